//! Hostile stand-ins for nvidia-smi (tried-to-break-it-3.md's appendix): one that hangs (a
//! wedged driver), one that prints without end, one that exits 1 (a driver that failed), and
//! one that has lost a GPU (the others still answer, it exits non-zero). Each records the pid
//! of every run it starts in `DIR/pids`, so a test can check that nothing was left running.

use crate::StandIn;
use std::time::Duration;

/// How a stand-in misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Smi {
    /// `sleep 3600`, whatever it is asked.
    Hangs,
    /// `yes` of a telemetry row, whatever it is asked.
    PrintsForever,
    /// A line on stderr, then exit 1.
    Fails,
    /// GPU 0 lost ("Unable to determine the device handle ...: Unknown Error") and exit 255;
    /// GPU 1 still answers every query (2000 MiB used, no compute process).
    LostGpu0,
}

impl Smi {
    fn script(self) -> &'static str {
        match self {
            Smi::Hangs => "exec sleep 3600\n",
            Smi::PrintsForever => "exec yes '0, NVIDIA H100, 50, 1000, 300, 1980, 60'\n",
            Smi::Fails => {
                "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\" >&2\nexit 1\n"
            }
            Smi::LostGpu0 => {
                r#"echo "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error"
case "$*" in
  *--query-gpu=index,name,utilization.gpu*) echo "1, NVIDIA H100 80GB HBM3, 42, 2000, 300.5, 1980, 50" ;;
  *--query-gpu=index,memory.used*) echo "1, 2000" ;;
  *--query-gpu=index,name,driver_version*) echo "1, NVIDIA H100 80GB HBM3, 550.54.15" ;;
  *--query-compute-apps*) ;;
esac
exit 255
"#
            }
        }
    }
}

/// A stand-in written as `DIR/bin/nvidia-smi` in a fresh temporary directory.
pub struct HostileSmi(pub StandIn);

impl std::ops::Deref for HostileSmi {
    type Target = StandIn;
    fn deref(&self) -> &StandIn {
        &self.0
    }
}

impl HostileSmi {
    pub fn new(kind: Smi) -> HostileSmi {
        let dir = tempfile::tempdir().expect("temp dir");
        let pids = dir.path().join("pids");
        let script = format!(
            "#!/bin/sh\necho $$ >> '{}'\n{}",
            pids.display(),
            kind.script()
        );
        HostileSmi(StandIn::in_dir(dir, "nvidia-smi", &script))
    }

    /// The pids of every run it started.
    pub fn runs(&self) -> Vec<u32> {
        std::fs::read_to_string(self.0.dir.path().join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Whether every run it started has ended within `wait` (a run stopped with SIGTERM ends
    /// at once, one needing SIGKILL after the grace period).
    pub fn none_left_running(&self, wait: Duration) -> bool {
        crate::wait_gone(&self.runs(), wait)
    }
}

impl Drop for HostileSmi {
    fn drop(&mut self) {
        // Whatever a failed test left behind, by its own pid only.
        for pid in self.runs() {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let ours = cmdline.starts_with(b"sleep\x003600") || cmdline.starts_with(b"yes\0");
            if ours && crate::alive(pid) {
                // SAFETY: kill(2) on a pid this stand-in recorded as its own run.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
    }
}
