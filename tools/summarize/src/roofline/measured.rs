//! A memory bandwidth measured on the GPU (collbench's `device_limits` records) in place of the
//! card's datasheet figure, in every limit the roofline computes.

use crate::render::human;
use crate::roofline::Roofline;
use servbench::record::{DeviceLimitsRecord, GemmBackend};

/// The measured memory bandwidth for the roofline: the better of copy and read from a GPU
/// measurement (a CPU's figure says nothing about a GPU card), with the words that say so.
pub fn measured_bandwidth(limits: &[DeviceLimitsRecord]) -> Option<(f64, String)> {
    limits
        .iter()
        .filter(|l| l.backend != GemmBackend::Cpu)
        .map(|l| {
            let (gbps, how) = if l.read_gbps >= l.copy_gbps {
                (l.read_gbps, "read kernel")
            } else {
                (l.copy_gbps, "device copy")
            };
            let text = format!(
                "memory bandwidth measured: {} GB/s ({how} on {}, datasheet {} GB/s)",
                human(gbps),
                l.device,
                human(l.datasheet_mem_gbps)
            );
            (gbps, text)
        })
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The roofline with the measured bandwidth in place of the card's, and the note saying so.
pub fn with_measured_bandwidth(
    roof: &Roofline,
    limits: &[DeviceLimitsRecord],
) -> (Roofline, Option<String>) {
    match measured_bandwidth(limits) {
        Some((gbps, text)) => {
            let mut r = roof.clone();
            r.measured_bw = Some((gbps, text.clone()));
            (r, Some(format!("roofline limits use the {text}")))
        }
        None if !limits.is_empty() => (
            roof.clone(),
            Some("roofline limits use the datasheet bandwidth: the measured one is a CPU's".into()),
        ),
        None => (roof.clone(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(backend: &str, read: f64, copy: f64) -> DeviceLimitsRecord {
        let line = format!(
            r#"{{"kind":"device_limits","ts":"2026-12-01T05:00:00.000Z","backend":"{backend}","device":"NVIDIA H200","hardware":"h200","bytes":1073741824,"copy_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"copy_gbps":{copy},"read_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"read_gbps":{read},"launch_us":{{"n":1,"mean":1,"stddev":0,"min":1,"p50":1,"p90":1,"p95":1,"p99":1,"p999":1,"max":1}},"datasheet_mem_gbps":4800,"iters":1,"warmup":0}}"#
        );
        match servbench::record::Record::parse(&line).unwrap() {
            servbench::record::Record::DeviceLimits(l) => l,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_gpu_measured_bandwidth_replaces_the_datasheet_and_says_so() {
        let roof = Roofline::of("llama-3.1-8b", "h200").unwrap();
        let layout = servbench::presets::Layout::default();
        let datasheet = roof.deployment(layout).decode_step(1, 0).memory_s;
        let (measured, note) = with_measured_bandwidth(&roof, &[limits("cublas", 4000.0, 3000.0)]);
        let dep = measured.deployment(layout);
        assert_eq!(dep.rates.mem_bw_gbps, 4000.0);
        assert!(
            dep.rates.source.contains("measured"),
            "{}",
            dep.rates.source
        );
        // Weight bytes over 4000 instead of 4800 GB/s.
        let step = dep.decode_step(1, 0).memory_s;
        assert!(
            (step / datasheet - 4800.0 / 4000.0).abs() < 1e-9,
            "{step} {datasheet}"
        );
        let note = note.unwrap();
        assert!(
            note.contains("4000 GB/s (read kernel on NVIDIA H200, datasheet 4800 GB/s)"),
            "{note}"
        );
        // A CPU's bandwidth never stands in for a GPU card's.
        let (same, note) = with_measured_bandwidth(&roof, &[limits("cpu", 20.0, 15.0)]);
        assert!(same.measured_bw.is_none());
        assert!(note.unwrap().contains("datasheet"));
    }
}
