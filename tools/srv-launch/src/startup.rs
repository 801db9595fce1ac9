//! The server's log, read while srv-launch waits for readiness: each new piece is scanned for
//! the preset's startup phase lines (`servbench::startup`), each phase timed when first seen.
//! Bounded: [`PER_POLL_BYTES`] a poll and [`TOTAL_BYTES`] in all, here or over SSH (through
//! `Exec::read_from`, a bounded run there).

use servbench::cli;
use servbench::exec::Exec;
use servbench::record::Startup;
use servbench::startup::{PhaseMarker, PhaseScan};
use std::time::Instant;

/// Read of the log at most per poll: a poll reads what was added since the last one.
pub(crate) const PER_POLL_BYTES: u64 = 1 << 20;
/// Read of the log at most during one startup; past it the rest is not read (`log_cut`).
pub(crate) const TOTAL_BYTES: u64 = 16 << 20;

pub(crate) struct LogWatch<'a> {
    exec: &'a dyn Exec,
    log: &'a str,
    /// Where the next read starts: the log is appended to, so a reused `--log` starts past
    /// the previous run's text.
    offset: u64,
    read: u64,
    scan: Option<PhaseScan>,
    warned: bool,
}

impl<'a> LogWatch<'a> {
    /// Before the server starts: notes where its log ends now. No markers (a `--cmd` server):
    /// nothing is read.
    pub(crate) fn new(exec: &'a dyn Exec, log: &'a str, markers: &'static [PhaseMarker]) -> Self {
        let mut watch = LogWatch {
            exec,
            log,
            offset: 0,
            read: 0,
            scan: (!markers.is_empty()).then(|| PhaseScan::new(markers)),
            warned: false,
        };
        if watch.scan.is_some() {
            match exec.file_len(log) {
                Ok(len) => watch.offset = len.unwrap_or(0),
                Err(e) => watch.warn(&e),
            }
        }
        watch
    }

    /// Reads what the log gained since the last poll; its lines are timed now (`started`).
    pub(crate) fn poll(&mut self, started: Instant) {
        let Some(scan) = self.scan.as_mut() else {
            return;
        };
        let want = PER_POLL_BYTES.min(TOTAL_BYTES - self.read);
        if want == 0 {
            return;
        }
        match self.exec.read_from(self.log, self.offset, want) {
            Ok(Some(bytes)) => {
                // Timed after the read: the lines were in the log by then.
                scan.feed(&bytes, started.elapsed().as_secs_f64());
                self.offset += bytes.len() as u64;
                self.read += bytes.len() as u64;
            }
            // Not created yet (a remote shell still starting the server).
            Ok(None) => {}
            Err(e) => self.warn(&e),
        }
    }

    /// The startup as read, with the time to ready.
    pub(crate) fn finish(self, ready_s: f64) -> Startup {
        Startup {
            ready_s,
            phases: self.scan.map(|s| s.finish(ready_s)).unwrap_or_default(),
            log_cut: self.read >= TOTAL_BYTES,
        }
    }

    /// One warning for a log that cannot be read (the phases then stay unknown); the wait goes on.
    fn warn(&mut self, err: &dyn std::fmt::Display) {
        if !self.warned {
            self.warned = true;
            cli::warn(format!(
                "cannot read the server's log {} on {} for its startup phases: {err}",
                self.log,
                self.exec.host()
            ));
        }
    }
}
