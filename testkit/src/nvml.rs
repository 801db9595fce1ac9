//! A stand-in NVML (`libnvidia-ml.so.1`: NVML is not ours, and this machine has no GPU) and
//! driver 580's nvidia-smi, as recorded on the H200 (`fixtures/`).
//!
//! The library is `fixtures/nvml/nvml_standin.c` compiled by `cc` into a fresh directory: put
//! [`NvmlStandIn::lib_dir`] in `LD_LIBRARY_PATH` and the tool's `dlopen("libnvidia-ml.so.1")`
//! finds it before any driver's. `cc` is on every machine that builds this workspace: rustc
//! links through it, and libssh2-sys and ring compile C with it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The C source of the stand-in library (its header comment lists the modes).
pub const NVML_STANDIN_C: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/nvml/nvml_standin.c");

/// Driver 580's nvidia-smi stand-in: strict about its fields as the real one (exit 2 for a
/// field its `--help-query-gpu` does not list), the H200's recorded values.
pub const NVIDIA_SMI_580: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/nvidia-smi/nvidia-smi-580"
);

/// `nvidia-smi --help-query-gpu` of driver 580, as recorded on the H200.
pub const HELP_QUERY_GPU_580: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/nvidia-smi/help-query-gpu.txt"
);

/// How the stand-in library behaves (`NVML_STANDIN_MODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvmlMode {
    /// The H200 at work: 669.4 W, the counter advancing with it over real time.
    H200,
    /// The counter stands still while the power reads 300 W (ENERGY-FROZEN).
    Frozen,
    /// The counter reads all ones at every read (a driver's "no value").
    Huge,
    /// No counter (`NOT_SUPPORTED`, a GPU before Volta).
    NoEnergy,
    /// The counter runs backwards (a driver reload).
    Backwards,
    /// `nvmlInit_v2` fails: the library is there, the driver is not.
    NoDriver,
}

impl NvmlMode {
    pub fn name(self) -> &'static str {
        match self {
            NvmlMode::H200 => "h200",
            NvmlMode::Frozen => "frozen",
            NvmlMode::Huge => "huge",
            NvmlMode::NoEnergy => "no_energy",
            NvmlMode::Backwards => "backwards",
            NvmlMode::NoDriver => "no_driver",
        }
    }
}

/// The stand-in library, built in a temporary directory of its own.
pub struct NvmlStandIn {
    dir: tempfile::TempDir,
}

impl NvmlStandIn {
    /// Compiles the stand-in; panics with the compiler's words when that fails.
    pub fn new() -> NvmlStandIn {
        let dir = tempfile::tempdir().expect("temp dir");
        let lib = dir.path().join("lib");
        std::fs::create_dir_all(&lib).expect("lib dir");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(lib.join("libnvidia-ml.so.1"))
            .arg(NVML_STANDIN_C)
            .output()
            .expect("run cc (a C compiler is needed to build the NVML stand-in)");
        assert!(
            out.status.success(),
            "cc {NVML_STANDIN_C}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        NvmlStandIn { dir }
    }

    /// The directory holding `libnvidia-ml.so.1`.
    pub fn lib_dir(&self) -> PathBuf {
        self.dir.path().join("lib")
    }

    /// Where the library logs each call's name.
    pub fn log(&self) -> PathBuf {
        self.dir.path().join("calls")
    }

    /// The environment a tool needs to load it in `mode`, logging its calls.
    pub fn env(&self, mode: NvmlMode) -> Vec<(&'static str, String)> {
        vec![
            ("LD_LIBRARY_PATH", self.lib_dir().display().to_string()),
            ("NVML_STANDIN_MODE", mode.name().to_string()),
            ("NVML_STANDIN_LOG", self.log().display().to_string()),
        ]
    }

    /// The NVML calls made so far, by name, in order.
    pub fn calls(&self) -> Vec<String> {
        read_lines(&self.log())
    }
}

impl Default for NvmlStandIn {
    fn default() -> NvmlStandIn {
        NvmlStandIn::new()
    }
}

/// The field names driver 580's nvidia-smi lists in `--help-query-gpu` (each quoted name at the
/// start of a line, `"a" or "b"` giving two).
pub fn listed_query_fields() -> Vec<String> {
    let help = std::fs::read_to_string(HELP_QUERY_GPU_580).expect("read help-query-gpu.txt");
    help.lines()
        .filter(|l| l.starts_with('"'))
        .flat_map(|l| {
            let names = l.split(':').next().unwrap_or(l);
            names
                .split(" or ")
                .filter_map(|n| n.trim().strip_prefix('"')?.strip_suffix('"'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn read_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
