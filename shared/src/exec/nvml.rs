//! This host's GPUs through NVML: `libnvidia-ml.so.1`, the driver's own library (in the
//! driver's folder, no CUDA toolkit needed), loaded at run time by nvml-wrapper, so a machine
//! without a driver builds, runs and tests and only says that NVML is not there. It reads what
//! nvidia-smi reads without a process per sample, and one thing nvidia-smi cannot: the energy
//! counter (`nvmlDeviceGetTotalEnergyConsumption`; driver 580's nvidia-smi refuses
//! `total_energy_consumption` as a query field). Remote hosts, and hosts where it cannot load,
//! are read through nvidia-smi ([`super::gpu`]).

use super::gpu::{Answer, CounterRow, GpuReading};
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use std::ffi::OsStr;

/// The file NVML is loaded from (the SONAME every driver installs; `libnvidia-ml.so` without
/// the `.1` comes only with development packages).
pub const LIBRARY: &str = "libnvidia-ml.so.1";

/// NVML, loaded and initialized; shut down when dropped.
pub struct Nvml {
    lib: nvml_wrapper::Nvml,
}

/// A value NVML gave, or none where this GPU does not have it (`NotSupported`, and any other
/// failure of that one query: the rest of the sample still counts).
fn given<T>(r: Result<T, NvmlError>) -> Option<T> {
    r.ok()
}

impl Nvml {
    /// Loads [`LIBRARY`] and initializes NVML; why not, in words, where it cannot (no driver,
    /// no library, a driver that does not answer).
    pub fn open() -> Result<Nvml, String> {
        match nvml_wrapper::Nvml::builder()
            .lib_path(OsStr::new(LIBRARY))
            .init()
        {
            Ok(lib) => Ok(Nvml { lib }),
            Err(NvmlError::LibloadingError(e)) => Err(format!("{LIBRARY} did not load ({e})")),
            Err(e) => Err(format!("NVML ({LIBRARY}) did not start: {e}")),
        }
    }

    /// The GPUs `indices` names (all when empty) that this host has, and why a named one is
    /// not there.
    fn indices(&self, indices: &[u32]) -> Result<(Vec<u32>, Option<String>), String> {
        let count = self
            .lib
            .device_count()
            .map_err(|e| format!("NVML: no GPU count ({e})"))?;
        let here: Vec<u32> = (0..count)
            .filter(|i| indices.is_empty() || indices.contains(i))
            .collect();
        let missing: Vec<String> = indices
            .iter()
            .filter(|i| **i >= count)
            .map(u32::to_string)
            .collect();
        let why = (!missing.is_empty()).then(|| {
            format!(
                "NVML: this host has {count} GPU(s), not GPU {}",
                missing.join(", ")
            )
        });
        Ok((here, why))
    }

    /// One reading of each GPU: the figures nvidia-smi's telemetry query gives, and the
    /// clocks-event reasons. A GPU NVML cannot reach is left out and named in `failure`.
    pub fn sample(&self, indices: &[u32]) -> Answer<GpuReading> {
        self.each(indices, |index, d| GpuReading {
            index,
            name: given(d.name()),
            util_pct: given(d.utilization_rates()).map(|u| f64::from(u.gpu)),
            // v2's `used` leaves the driver's reserved memory out, as nvidia-smi's
            // `memory.used` does (NVML v1's counts it: 1716 against 1101 MiB on the H200).
            mem_used_mib: given(d.memory_info()).map(|m| m.used as f64 / 1048576.0),
            power_w: given(d.power_usage()).map(|mw| f64::from(mw) / 1000.0),
            sm_clock_mhz: given(d.clock_info(Clock::SM)).map(f64::from),
            temp_c: given(d.temperature(TemperatureSensor::Gpu)).map(f64::from),
            clocks_event_reasons: given(d.current_throttle_reasons()).map(|r| r.bits()),
            ..GpuReading::default()
        })
    }

    /// Each GPU's energy counter (millijoules since the driver loaded), `None` where the GPU
    /// has none (before Volta).
    pub fn energy_counters(&self, indices: &[u32]) -> Answer<CounterRow> {
        self.each(indices, |index, d| {
            (
                index,
                given(d.total_energy_consumption()).map(|mj| mj as f64),
            )
        })
    }

    fn each<T>(
        &self,
        indices: &[u32],
        read: impl Fn(u32, &nvml_wrapper::Device<'_>) -> T,
    ) -> Answer<T> {
        let (here, mut failure) = match self.indices(indices) {
            Ok(x) => x,
            Err(why) => {
                return Answer {
                    rows: Vec::new(),
                    failure: Some(why),
                    cut: false,
                };
            }
        };
        let mut rows = Vec::with_capacity(here.len());
        for index in here {
            match self.lib.device_by_index(index) {
                Ok(d) => rows.push(read(index, &d)),
                // A GPU fallen off the bus: the others are still read.
                Err(e) => {
                    failure.get_or_insert_with(|| format!("NVML: GPU {index}: {e}"));
                }
            }
        }
        Answer {
            rows,
            failure,
            cut: false,
        }
    }
}
