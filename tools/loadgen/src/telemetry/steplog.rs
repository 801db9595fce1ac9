//! The engine's step log during each point (the summary's `engine_steps`): where the upstream
//! `server` record says its server logs its steps (`servbench::steplog::logs_steps`: vLLM's
//! `--enable-logging-iteration-details`, which srv-launch `--self-report` adds, and srv-sim's
//! the same; SGLang's decode log; TensorRT-LLM's iteration log), loadgen notes the size of the
//! server's log (`server.log`, on `server.host`: here, or over SSH) when the point starts and
//! when it ends, and parses only the bytes between. Each edge waits for the log to be quiet
//! (unchanged for [`QUIET`], at most [`SETTLE`]), so the lines of a step that ran before the
//! edge are on the right side of it. The steps' rate is over the point's busy window (the wall
//! time with a request in flight), which the point measures.
//!
//! Every read is bounded (`Exec::file_stat` and `Exec::read_from`, shared with srv-launch's
//! startup phases: a byte cap, and over SSH one command of at most 10 s). Only a regular file is
//! read (a FIFO would block the read), and only the file the point started with (one rotated
//! into its name is another); a failure, a log that shrank or one with no step line is a note
//! (once), never fatal.

use servbench::cli;
use servbench::exec::{self, Exec, FileStat, SshOptions};
use servbench::jsonl::excerpt;
use servbench::record::{EngineSteps, ServerRecord, ServerTiming};
use servbench::steplog::{self, LogFormat};
use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The most of a point's log read: a step line is ~200 bytes, so this is ~150,000 steps.
pub const MAX_STEP_LOG_BYTES: u64 = 32 << 20;
/// The log counts as quiet once its size stayed the same this long ...
const QUIET: Duration = Duration::from_millis(100);
/// ... and an edge waits for that at most this long (a busy log from other clients).
const SETTLE: Duration = Duration::from_secs(1);
/// A reason quoted in a note is cut to this many characters.
const REASON: usize = 160;

/// The server's log, read at each point's edges.
pub struct StepLog {
    exec: Box<dyn Exec>,
    /// `host:path`, for the notes.
    place: String,
    path: String,
    format: LogFormat,
    /// The log at the point's start, and when (monotonic, and on the wall clock).
    start: Option<(FileStat, Instant, SystemTime)>,
    /// When the point's first request was due ([`StepLog::point_started`]): the per-second
    /// steps are placed from it.
    point_start: Option<Instant>,
    /// The run's one note, once given.
    noted: Option<String>,
    /// SGLang's per-request time stats are in the log (`--enable-request-time-stats-logging`):
    /// the point's requests wait for them.
    joins: bool,
    /// The last point's time stats, by rid (the answer's `id`).
    timings: BTreeMap<String, ServerTiming>,
    /// A time stats line could not be read (said once).
    bad_timing_noted: bool,
}

/// SGLang's flag for its per-request time stats in its log.
pub const TIME_STATS_FLAG: &str = "--enable-request-time-stats-logging";

/// Why a point has no `engine_steps`.
const NO_STEPS: &str = "those summaries have no `engine_steps`";

impl StepLog {
    /// For a server whose record says it logs its steps; `None` (with a note when it was meant
    /// to and cannot) otherwise.
    pub fn for_server(server: Option<&ServerRecord>, ssh: &SshOptions) -> Option<StepLog> {
        let s = server?;
        let argv: Vec<String> = if s.argv.is_empty() {
            s.command.split_whitespace().map(str::to_string).collect()
        } else {
            s.argv.clone()
        };
        let format = steplog::logs_steps(&s.engine, &argv)?;
        let joins = argv.iter().any(|a| a == TIME_STATS_FLAG);
        if s.log.is_empty() {
            return None;
        }
        let place = format!("{}:{}", s.host, s.log);
        match exec::connect(Some(&s.host), ssh) {
            Ok(exec) => Some(StepLog {
                exec,
                place,
                path: s.log.clone(),
                format,
                start: None,
                point_start: None,
                noted: None,
                joins,
                timings: BTreeMap::new(),
                bad_timing_noted: false,
            }),
            Err(e) => {
                cli::info(format!(
                    "note: no engine step log: cannot reach {place}: {e}; {NO_STEPS}"
                ));
                None
            }
        }
    }

    /// One note per run: `why`, then what it costs (`then`).
    fn note(&mut self, why: &str, then: &str) {
        if self.noted.is_none() {
            let note = format!(
                "note: engine step log {}: {}{then}",
                self.place,
                excerpt(why, REASON)
            );
            cli::info(&note);
            self.noted = Some(note);
        }
    }

    fn no_steps(&mut self, why: &str) {
        self.note(why, &format!("; {NO_STEPS}"));
    }

    /// What the log is now: a regular file that exists.
    fn stat(&self) -> Result<FileStat, String> {
        match self.exec.file_stat(&self.path) {
            Ok(Some(f)) if f.regular => Ok(f),
            Ok(Some(_)) => Err(
                "it is not a regular file (a FIFO or a device: reading it could block), not read"
                    .into(),
            ),
            Ok(None) => Err("it does not exist".into()),
            Err(e) => Err(format!("cannot read what it is: {e}")),
        }
    }

    /// The log once quiet (or [`SETTLE`] has passed).
    fn settled(&self) -> Result<FileStat, String> {
        let until = Instant::now() + SETTLE;
        let mut last = self.stat()?;
        loop {
            std::thread::sleep(QUIET);
            let now = self.stat()?;
            if now == last || Instant::now() >= until {
                return Ok(now);
            }
            last = now;
        }
    }

    /// Bytes `from..to` of the log (at most [`MAX_STEP_LOG_BYTES`]), and whether they were cut.
    fn bytes(&self, from: u64, to: u64) -> Result<(Vec<u8>, bool), String> {
        if to == from {
            return Ok((Vec::new(), false));
        }
        let len = (to - from).min(MAX_STEP_LOG_BYTES);
        match self.exec.read_from(&self.path, from, len) {
            Ok(Some(bytes)) => Ok((bytes, to - from > MAX_STEP_LOG_BYTES)),
            Ok(None) => Err("it no longer exists".into()),
            Err(e) => Err(format!("cannot read it: {e}")),
        }
    }

    /// Whether the server logs each request's time stats: its request records are held until
    /// the point's end and given them ([`StepLog::take_timings`]).
    pub fn joins_requests(&self) -> bool {
        self.joins
    }

    /// The time stats the last point's window held, by rid.
    pub fn take_timings(&mut self) -> BTreeMap<String, ServerTiming> {
        std::mem::take(&mut self.timings)
    }

    /// Requests of a point that succeeded and found no time stats line (`missing` of `n`).
    pub fn unjoined(&mut self, point: u32, missing: u64, n: u64) {
        if missing > 0 {
            self.note(
                &format!(
                    "{missing} of point {point}'s {n} requests have no `Req Time Stats` line in it"
                ),
                ": their records have no server_timing",
            );
        }
    }

    /// The time stats lines of a window's text.
    fn read_timings(&mut self, text: &str) {
        for line in text.lines() {
            match steplog::sglang::time_stats(line) {
                Some(Ok((rid, t))) => {
                    self.timings.insert(rid, t);
                }
                Some(Err(why)) if !self.bad_timing_noted => {
                    self.bad_timing_noted = true;
                    cli::info(format!(
                        "note: engine step log {}: a `Req Time Stats` line could not be read ({}); its request has no server_timing (said once)",
                        self.place,
                        excerpt(&why, REASON)
                    ));
                }
                _ => {}
            }
        }
    }

    /// The point starts: its window opens at the log's (quiet) size now. Blocking (bounded).
    pub fn begin(&mut self) {
        self.timings.clear();
        self.start = match self.settled() {
            Ok(f) => Some((f, Instant::now(), SystemTime::now())),
            Err(why) => {
                self.no_steps(&why);
                None
            }
        };
    }

    /// The point's clock started at `at` (its requests' times are from it).
    pub fn point_started(&mut self, at: Instant) {
        self.point_start = Some(at);
    }

    /// The point's start on the wall clock, in UTC seconds since midnight, from the log's
    /// window's opening (`begin`) and the point's own start.
    fn start_of_day_s(&mut self, opened: Instant, wall: SystemTime) -> Option<f64> {
        let at = self.point_start.take()?;
        let wall_at = if at >= opened {
            wall.checked_add(at - opened)?
        } else {
            wall.checked_sub(opened - at)?
        };
        let s = wall_at.duration_since(UNIX_EPOCH).ok()?.as_secs_f64();
        Some(s.rem_euclid(86_400.0))
    }

    /// The point ends: the steps the log gained since [`StepLog::begin`], their rate over
    /// `busy_s` (the point's busy window; 0: not measured). Blocking (bounded).
    pub fn end(&mut self, point: u32, busy_s: f64) -> Option<EngineSteps> {
        let (first, started, wall) = self.start.take()?;
        let start_of_day_s = self.start_of_day_s(started, wall);
        // The window is the point's, not the wait for a quiet log after it.
        let window_s = started.elapsed().as_secs_f64();
        let now = match self.settled() {
            Ok(f) => f,
            Err(why) => {
                self.no_steps(&why);
                return None;
            }
        };
        let (from, to) = (first.len, now.len);
        if now.id != first.id {
            self.no_steps(&format!(
                "it was rotated during point {point} (another file now has its name), so its steps are not all in it"
            ));
            return None;
        }
        if to < from {
            self.no_steps(&format!(
                "it shrank during point {point} ({from} to {to} bytes: truncated)"
            ));
            return None;
        }
        let (bytes, cut) = match self.bytes(from, to) {
            Ok(b) => b,
            Err(why) => {
                self.no_steps(&why);
                return None;
            }
        };
        // Whole lines only: a line the window's edge cut is no step of the point.
        let text = String::from_utf8_lossy(&bytes);
        let whole = match text.rfind('\n') {
            Some(i) => &text[..=i],
            None => "",
        };
        if self.joins {
            self.read_timings(whole);
        }
        let busy_s = busy_s.min(window_s);
        let Some(w) = steplog::read_window(whole, window_s, busy_s, &self.format) else {
            self.no_steps(&format!(
                "no step line during point {point}, though the server was started to log them"
            ));
            return None;
        };
        let mut steps = w.steps;
        if steps.steps == 0 {
            // Only padding or unreadable lines: no step to report, not a summary of zeros.
            let first = w
                .first_malformed
                .map_or(String::new(), |why| format!(" (first: {why})"));
            self.no_steps(&format!(
                "no readable step line during point {point}: {} padding (dummy) and {} malformed{first}",
                steps.dummy_steps, steps.malformed_lines
            ));
            return None;
        }
        if let Some(why) = w.first_malformed {
            cli::info(format!(
                "note: engine step log {}: {} step lines of point {point} could not be read (first: {}); left out",
                self.place,
                steps.malformed_lines,
                excerpt(&why, REASON)
            ));
        }
        for why in w.implausible {
            cli::info(format!(
                "note: engine step log {}: point {point}: {why}",
                self.place
            ));
        }
        steps.per_second = start_of_day_s
            .and_then(|sod| steplog::series::per_second(whole, &self.format, sod, window_s));
        steps.log_bytes = to - from;
        steps.log_cut = cut;
        if cut {
            self.note(
                &format!(
                    "point {point} wrote {} bytes to it, more than the {MAX_STEP_LOG_BYTES} read",
                    to - from
                ),
                ": its `engine_steps` cover the first part only (`log_cut`)",
            );
        }
        Some(steps)
    }
}

#[cfg(test)]
mod tests;
