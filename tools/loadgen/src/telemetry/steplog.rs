//! The engine's step log during each point (the summary's `engine_steps`): where the upstream
//! `server` record says its server logs every step (vLLM's `--enable-logging-iteration-details`,
//! which srv-launch `--self-report` adds; srv-sim's the same), loadgen notes the size of the
//! server's log (`server.log`, on `server.host`: here, or over SSH) when the point starts and
//! when it ends, and parses only the bytes between: no timestamps are trusted (vLLM's have
//! second resolution and no date). Each edge waits for the log to be quiet (unchanged for
//! [`QUIET`], at most [`SETTLE`]), so the lines of a step that ran before the edge are on the
//! right side of it. Every read is bounded (`Exec::file_len` and `Exec::read_from`, shared with
//! srv-launch's startup phases: a byte cap, and over SSH one command of at most 10 s); a
//! failure, a log that shrank or one with no step line is a note (once), never fatal.

use servbench::cli;
use servbench::engines::STEP_LOG_FLAG;
use servbench::exec::{self, Exec, SshOptions};
use servbench::record::{EngineSteps, ServerRecord};
use std::time::{Duration, Instant};

/// The most of a point's log read: a step line is ~200 bytes, so this is ~150,000 steps.
pub const MAX_STEP_LOG_BYTES: u64 = 32 << 20;
/// The log counts as quiet once its size stayed the same this long ...
const QUIET: Duration = Duration::from_millis(100);
/// ... and an edge waits for that at most this long (a busy log from other clients).
const SETTLE: Duration = Duration::from_secs(1);

/// The server's log, read at each point's edges.
pub struct StepLog {
    exec: Box<dyn Exec>,
    /// `host:path`, for the notes.
    place: String,
    path: String,
    start: Option<(u64, Instant)>,
    noted: bool,
}

impl StepLog {
    /// For a server whose record says it logs its steps; `None` (with a note when it was meant
    /// to and cannot) otherwise.
    pub fn for_server(server: Option<&ServerRecord>, ssh: &SshOptions) -> Option<StepLog> {
        let s = server?;
        let logs_steps = s.argv.iter().any(|a| a == STEP_LOG_FLAG)
            || (s.argv.is_empty() && s.command.contains(STEP_LOG_FLAG));
        if !logs_steps || s.log.is_empty() {
            return None;
        }
        let place = format!("{}:{}", s.host, s.log);
        match exec::connect(Some(&s.host), ssh) {
            Ok(exec) => Some(StepLog {
                exec,
                place,
                path: s.log.clone(),
                start: None,
                noted: false,
            }),
            Err(e) => {
                cli::info(format!(
                    "note: no engine step log: cannot reach {place}: {e}; summaries have no `engine_steps`"
                ));
                None
            }
        }
    }

    fn note(&mut self, why: String) {
        if !std::mem::replace(&mut self.noted, true) {
            cli::info(format!(
                "note: engine step log {}: {why}; those summaries have no `engine_steps`",
                self.place
            ));
        }
    }

    /// The log's size now, in bytes.
    fn size(&self) -> Result<u64, String> {
        match self.exec.file_len(&self.path) {
            Ok(Some(len)) => Ok(len),
            Ok(None) => Err("it does not exist".into()),
            Err(e) => Err(format!("cannot read its size: {e}")),
        }
    }

    /// The size once the log is quiet (or [`SETTLE`] has passed).
    fn settled_size(&self) -> Result<u64, String> {
        let until = Instant::now() + SETTLE;
        let mut last = self.size()?;
        loop {
            std::thread::sleep(QUIET);
            let now = self.size()?;
            if now == last || Instant::now() >= until {
                return Ok(now);
            }
            last = now;
        }
    }

    /// Bytes `from..to` of the log (at most [`MAX_STEP_LOG_BYTES`]), and whether they were cut.
    fn bytes(&self, from: u64, to: u64) -> Result<(Vec<u8>, bool), String> {
        let len = (to - from).min(MAX_STEP_LOG_BYTES);
        match self.exec.read_from(&self.path, from, len) {
            Ok(Some(bytes)) => Ok((bytes, to - from > MAX_STEP_LOG_BYTES)),
            Ok(None) => Err("it no longer exists".into()),
            Err(e) => Err(format!("cannot read it: {e}")),
        }
    }

    /// The point starts: its window opens at the log's (quiet) size now. Blocking (bounded).
    pub fn begin(&mut self) {
        self.start = match self.settled_size() {
            Ok(n) => Some((n, Instant::now())),
            Err(why) => {
                self.note(why);
                None
            }
        };
    }

    /// The point ends: the steps the log gained since [`StepLog::begin`]. Blocking (bounded).
    pub fn end(&mut self, point: u32) -> Option<EngineSteps> {
        let (from, started) = self.start.take()?;
        // The window is the point's, not the wait for a quiet log after it.
        let window_s = started.elapsed().as_secs_f64();
        let to = match self.settled_size() {
            Ok(n) => n,
            Err(why) => {
                self.note(why);
                return None;
            }
        };
        if to < from {
            self.note(format!(
                "it shrank during point {point} ({from} to {to} bytes: rotated or truncated)"
            ));
            return None;
        }
        let (bytes, cut) = match self.bytes(from, to) {
            Ok(b) => b,
            Err(why) => {
                self.note(why);
                return None;
            }
        };
        // Whole lines only: a line the window's edge cut is no step of the point.
        let text = String::from_utf8_lossy(&bytes);
        let whole = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        match EngineSteps::from_log(whole, window_s) {
            // Only padding or unreadable lines: no step to report, not a summary of zeros.
            Some((e, bad)) if e.steps == 0 => {
                let first = bad.map_or(String::new(), |why| format!(" (first: {why})"));
                self.note(format!(
                    "no readable step line during point {point}: {} padding (dummy) and {} malformed{first}",
                    e.dummy_steps, e.malformed_lines
                ));
                None
            }
            Some((mut steps, bad)) => {
                if let Some(why) = bad {
                    cli::info(format!(
                        "note: engine step log {}: {} step lines of point {point} could not be read (first: {why}); left out",
                        self.place, steps.malformed_lines
                    ));
                }
                steps.log_bytes = to - from;
                steps.log_cut = cut;
                if cut {
                    self.note(format!(
                        "point {point} wrote {} bytes to it, more than the {} read: its `engine_steps` cover the first part only (`log_cut`)",
                        to - from,
                        MAX_STEP_LOG_BYTES
                    ));
                }
                Some(steps)
            }
            None => {
                self.note(format!(
                    "no step line (`Engine NNN: Iteration(N): ...`) during point {point}, though the server was started with {STEP_LOG_FLAG}"
                ));
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const STEP: &str = "INFO [loggers.py:200] Engine 000: Iteration(4): 0 context requests, 0 context tokens, 2 generation requests, 2 generation tokens, iteration elapsed time: 5.25 ms, GPU KV cache usage: 0.1%\n";

    fn log_of(path: &std::path::Path) -> StepLog {
        let record: ServerRecord = serde_json::from_value(serde_json::json!({
            "kind": "server", "v": 1, "ts": "2026-12-02T00:00:00.000Z", "engine": "vllm",
            "host": "localhost", "pid": 1, "pgid": 1, "start_ticks": 1, "port": 8000,
            "url": "http://127.0.0.1:8000", "command": "vllm serve m",
            "log": path.to_str().unwrap(), "ready_s": 1.0,
            "argv": ["vllm", "serve", "m", STEP_LOG_FLAG]
        }))
        .unwrap();
        StepLog::for_server(Some(&record), &SshOptions::default()).expect("a step log")
    }

    fn append(path: &std::path::Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn only_the_whole_lines_written_inside_the_window_are_the_points_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        std::fs::write(&path, STEP.repeat(3)).unwrap();
        let mut log = log_of(&path);
        log.begin();
        // Two whole steps, then the first half of a third still being written.
        append(&path, &format!("{STEP}{STEP}{}", &STEP[..60]));
        let e = log.end(0).expect("the window's steps");
        assert_eq!((e.steps, e.gen_tokens_total), (2, 4));
        assert_eq!(e.log_bytes, (2 * STEP.len() + 60) as u64);
        assert!(!log.noted);
    }

    #[test]
    fn a_log_that_shrank_during_a_point_gives_no_steps_and_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        std::fs::write(&path, STEP.repeat(3)).unwrap();
        let mut log = log_of(&path);
        log.begin();
        std::fs::write(&path, STEP).unwrap();
        assert_eq!(log.end(0), None);
        assert!(log.noted);
    }

    #[test]
    fn a_window_of_only_unreadable_step_lines_gives_no_steps_and_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.log");
        std::fs::write(&path, STEP).unwrap();
        let mut log = log_of(&path);
        log.begin();
        append(&path, &STEP.replace("5.25 ms", "NaN ms").repeat(2));
        assert_eq!(log.end(0), None);
        assert!(log.noted);
    }

    #[test]
    fn a_missing_log_gives_no_steps_and_a_note_not_a_failure() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = log_of(&dir.path().join("gone.log"));
        log.begin();
        assert_eq!(log.end(0), None);
        assert!(log.noted);
    }
}
