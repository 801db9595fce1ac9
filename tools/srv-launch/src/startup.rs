//! The server's log, read while srv-launch waits for readiness: each new piece is scanned for
//! the preset's startup phase lines (`servbench::startup`), each phase timed when first seen.
//! A poll reads what the log gained since the last, [`PER_POLL_BYTES`] a read until it has
//! caught up, and a last read at ready takes the rest: a chatty engine's log does not outrun
//! the reads. Bounded: [`TOTAL_BYTES`] in all, here or over SSH (through `Exec::read_from`, a
//! bounded run there); a log longer than that is said (`log_cut`).

use servbench::cli;
use servbench::exec::Exec;
use servbench::record::Startup;
use servbench::startup::{PhaseMarker, PhaseScan};
use std::time::Instant;

/// Read of the log at most per read: a poll reads what was added since the last one.
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
    pub(crate) fn new(
        exec: &'a dyn Exec,
        log: &'a str,
        markers: &'static [&'static [PhaseMarker]],
    ) -> Self {
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
        self.catch_up(|| started.elapsed().as_secs_f64());
    }

    /// Reads until the log has no more to give (or [`TOTAL_BYTES`] are read), the lines timed
    /// by `at_s` after each read (they were in the log by then).
    fn catch_up(&mut self, at_s: impl Fn() -> f64) {
        loop {
            let Some(scan) = self.scan.as_mut() else {
                return;
            };
            let want = PER_POLL_BYTES.min(TOTAL_BYTES - self.read);
            if want == 0 {
                return;
            }
            match self.exec.read_from(self.log, self.offset, want) {
                Ok(Some(bytes)) => {
                    scan.feed(&bytes, at_s());
                    self.offset += bytes.len() as u64;
                    self.read += bytes.len() as u64;
                    if (bytes.len() as u64) < want {
                        return;
                    }
                }
                // Not created yet (a remote shell still starting the server).
                Ok(None) => return,
                Err(e) => {
                    self.warn(&e);
                    return;
                }
            }
        }
    }

    /// The startup as read, with the time to ready: a last read takes what the log gained
    /// since the last poll (timed at ready). `log_cut` when the log holds more than was read.
    pub(crate) fn finish(mut self, ready_s: f64) -> Startup {
        self.catch_up(|| ready_s);
        let unread = self.scan.is_some()
            && self
                .exec
                .file_len(self.log)
                .ok()
                .flatten()
                .is_some_and(|len| len > self.offset);
        let (phases, refused) = self.scan.map(|s| s.finish(ready_s)).unwrap_or_default();
        for why in refused {
            cli::warn(format!("server log {}: {why}", self.log));
        }
        Startup {
            ready_s,
            phases,
            // The reads stop only at their cap: what is left unread is past it.
            log_cut: unread && self.read >= TOTAL_BYTES,
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

#[cfg(test)]
mod tests {
    use super::*;
    use servbench::exec::Local;
    use std::io::Write as _;

    const PHASES: &str =
        "Loading weights took 1.50 seconds\nINFO:     Application startup complete.\n";

    /// A log of `junk` bytes of chatter, then the phase lines, read by one poll and the finish.
    fn startup_after(junk: usize) -> Startup {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("chatty.log");
        let log = path.to_str().unwrap().to_string();
        let exec = Local;
        let mut watch = LogWatch::new(&exec, &log, &[servbench::startup::VLLM]);
        let mut f = std::fs::File::create(&path).unwrap();
        let line = format!("{}\n", "x".repeat(1023));
        for _ in 0..junk / line.len() {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.write_all(PHASES.as_bytes()).unwrap();
        // The launch began 5 s ago (it is ready at 5 s): a 1.5 s phase fits in it however
        // fast this machine wrote the chatter.
        let started = Instant::now() - std::time::Duration::from_secs(5);
        watch.poll(started);
        watch.finish(5.0)
    }

    #[test]
    fn sp_big_a_chatty_engines_log_is_read_to_its_end_before_ready() {
        let s = startup_after(10 << 20);
        let names: Vec<String> = s.phases.iter().map(|p| p.name.to_string()).collect();
        assert_eq!(names, ["weights", "ready"]);
        assert_eq!(s.phases[0].took_s, Some(1.5));
        assert!(!s.log_cut);
    }

    #[test]
    fn sp_big_a_log_longer_than_the_cap_is_said_to_be_cut() {
        let s = startup_after(36 << 20);
        assert!(s.log_cut, "{s:?}");
        assert!(s.phases.is_empty(), "{s:?}");
    }
}
