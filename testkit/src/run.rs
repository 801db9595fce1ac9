//! Running one workspace binary the way the tests do, and reading what it wrote: the exit code,
//! stderr, and stdout as typed records (`servbench::record`) or, where a test reads a field the
//! schema does not name, as JSON values.

use servbench::record::{Record, RecordKind};
use std::ffi::OsStr;
use std::ops::{Deref, DerefMut};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The longest any test run of a tool may take: past it the tool is killed and the test fails
/// saying so, instead of hanging the suite.
pub const RUN_LIMIT: Duration = Duration::from_secs(600);

/// What one run gave: the process's output (`status`, `stdout`, `stderr` through `Deref`) and
/// the command it was, for messages.
#[derive(Debug)]
pub struct Run {
    pub output: Output,
    /// The tool and its arguments, as a failure message names them.
    pub what: String,
    /// From the start of the process to its end.
    pub took: Duration,
}

impl Deref for Run {
    type Target = Output;
    fn deref(&self) -> &Output {
        &self.output
    }
}

impl Run {
    /// The exit code (None when a signal ended the process).
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }

    /// Stderr as text.
    pub fn err(&self) -> String {
        stderr(&self.output)
    }

    /// Stdout as text.
    pub fn out(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    /// Panics naming the command and its stderr unless it exited 0; the run otherwise.
    #[track_caller]
    pub fn ok(self) -> Run {
        assert!(
            self.output.status.success(),
            "{} failed ({}): {}",
            self.what,
            self.output.status,
            self.err()
        );
        self
    }

    /// Every stdout line as a typed record (each must parse: stdout carries records only).
    pub fn records(&self) -> Vec<Record> {
        lines(&self.output.stdout)
            .map(|l| {
                Record::parse(l)
                    .unwrap_or_else(|e| panic!("stdout line is not a record ({e}): {l}"))
            })
            .collect()
    }

    /// The records of kind `T`, typed, in order.
    pub fn of<T: RecordKind>(&self) -> Vec<T> {
        lines(&self.output.stdout)
            .filter(|l| kind_of(l).as_deref() == Some(T::KIND))
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("bad {} record ({e}): {l}", T::KIND))
            })
            .collect()
    }

    /// The one record of kind `T`; panics unless there is exactly one.
    #[track_caller]
    pub fn one<T: RecordKind>(&self) -> T {
        let mut all = self.of::<T>();
        assert_eq!(
            all.len(),
            1,
            "{} wrote {} {} records: {}",
            self.what,
            all.len(),
            T::KIND,
            self.out()
        );
        all.remove(0)
    }

    /// Stdout lines as JSON values (for fields a test reads by name).
    pub fn values(&self) -> Vec<serde_json::Value> {
        crate::json_lines(&self.output.stdout)
    }

    /// (exit code, stdout, stderr) as text, for the tests that read stdout as a user would.
    pub fn texts(&self) -> (Option<i32>, String, String) {
        (self.code(), self.out(), self.err())
    }

    /// (exit code, stdout records as JSON values, stderr): the shape the tests that check all
    /// three read.
    pub fn parts(&self) -> (Option<i32>, Vec<serde_json::Value>, String) {
        (self.code(), self.values(), self.err())
    }
}

/// `line` read back as its typed record, in the schema: a known kind, nothing outside it (the
/// summary's `workload` too), a summary written in the current version. Panics naming `place`.
#[track_caller]
pub fn in_the_schema(line: &str, place: &str) -> Record {
    let record = Record::parse(line).unwrap_or_else(|e| panic!("{place}: {e}: {line}"));
    let extra = record
        .extra()
        .unwrap_or_else(|| panic!("{place}: a kind outside the schema: {line}"));
    assert!(
        extra.is_empty(),
        "{place}: {} record fields outside the schema (add them to shared/src/record/): {:?}",
        record.kind(),
        extra.keys().collect::<Vec<_>>()
    );
    if let Record::Summary(s) = &record {
        // As written, not as read: a v1 line reads as v2.
        let written: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            written["v"],
            servbench::record::SCHEMA_VERSION,
            "{place}: a summary of another schema version: {line}"
        );
        assert!(
            s.workload.extra.is_empty(),
            "{place}: workload fields outside the schema: {:?}",
            s.workload.extra.keys().collect::<Vec<_>>()
        );
    }
    record
}

fn lines(out: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(out)
        .expect("stdout is UTF-8")
        .lines()
        .filter(|l| !l.trim().is_empty())
}

fn kind_of(line: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    Some(v.get("kind")?.as_str()?.to_string())
}

/// Stderr of a finished process as text.
pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stdout of a finished process that must have exited 0 (else panics with its stderr).
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "the run failed ({}): {}",
        out.status,
        stderr(out)
    );
    String::from_utf8(out.stdout.clone()).expect("stdout is UTF-8")
}

/// Runs `c` (stdin as `c` set it), bounded by [`RUN_LIMIT`].
pub fn run_cmd(c: Command) -> Run {
    run_within(c, RUN_LIMIT, None)
}

/// [`run_cmd`], failing the test past `limit` instead.
pub fn run_cmd_within(c: Command, limit: Duration) -> Run {
    run_within(c, limit, None)
}

/// Runs `c`, its stdin `stdin` when given, failing the test past `limit`.
fn run_within(mut c: Command, limit: Duration, stdin: Option<Vec<u8>>) -> Run {
    let what = format!("{c:?}");
    if stdin.is_some() {
        c.stdin(Stdio::piped());
    }
    let started = Instant::now();
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    if let Some(bytes) = stdin {
        let mut pipe = child.stdin.take().expect("piped stdin");
        // Written from a thread so a tool that answers before reading it all cannot block us.
        std::thread::spawn(move || {
            use std::io::Write;
            let _ = pipe.write_all(&bytes);
        });
    }
    let output = crate::wait_output(&mut child, limit);
    Run {
        output,
        what,
        took: started.elapsed(),
    }
}

/// One run of a workspace binary being set up, for the runs that need more than arguments:
/// environment, stdin, their own time limit. Stdin is empty unless [`Call::stdin`] gives it.
pub struct Call {
    cmd: Command,
    limit: Duration,
    stdin: Option<Vec<u8>>,
}

/// A [`Call`] of workspace binary `tool`.
pub fn call(tool: &str) -> Call {
    let mut cmd = crate::cmd(tool);
    cmd.stdin(Stdio::null());
    Call {
        cmd,
        limit: RUN_LIMIT,
        stdin: None,
    }
}

impl Call {
    /// `--url URL`.
    pub fn url(self, url: &str) -> Call {
        self.args(["--url", url])
    }

    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Call {
        self.cmd.arg(arg);
        self
    }

    pub fn args<S: AsRef<OsStr>>(mut self, args: impl IntoIterator<Item = S>) -> Call {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Call {
        self.cmd.env(key, value);
        self
    }

    pub fn envs<K: AsRef<OsStr>, V: AsRef<OsStr>>(
        mut self,
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> Call {
        self.cmd.envs(vars);
        self
    }

    pub fn env_remove(mut self, key: &str) -> Call {
        self.cmd.env_remove(key);
        self
    }

    /// Without the system's CA store settings (`SSL_CERT_FILE`, `SSL_CERT_DIR`), so only what
    /// the test gives is trusted.
    pub fn no_system_ca(self) -> Call {
        self.env_remove("SSL_CERT_FILE").env_remove("SSL_CERT_DIR")
    }

    /// The tool reads `bytes` on its stdin.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Call {
        self.stdin = Some(bytes.into());
        self
    }

    /// Past `limit` the tool is killed and the test fails (instead of [`RUN_LIMIT`]).
    pub fn within(mut self, limit: Duration) -> Call {
        self.limit = limit;
        self
    }

    pub fn run(self) -> Run {
        run_within(self.cmd, self.limit, self.stdin)
    }

    /// [`Call::run`], which must exit 0.
    #[track_caller]
    pub fn run_ok(self) -> Run {
        self.run().ok()
    }

    /// Started and left running, stdout and stderr piped, for a test that reads or signals it
    /// meanwhile ([`Spawned::wait`] ends it). Stdin is empty.
    pub fn spawn(mut self) -> Spawned {
        assert!(self.stdin.is_none(), "a spawned Call reads no stdin");
        let what = format!("{:?}", self.cmd);
        let started = Instant::now();
        let child = self
            .cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {what}: {e}"));
        Spawned {
            child,
            what,
            started,
        }
    }
}

/// A tool [`Call::spawn`] started: the child (through `Deref`) and what it is.
pub struct Spawned {
    pub child: Child,
    what: String,
    started: Instant,
}

impl Deref for Spawned {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.child
    }
}

impl DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Spawned {
    /// Its end, failing the test past `limit`: what it wrote that was not taken meanwhile.
    pub fn wait(mut self, limit: Duration) -> Run {
        let output = crate::wait_output(&mut self.child, limit);
        Run {
            output,
            what: self.what,
            took: self.started.elapsed(),
        }
    }
}

/// Runs workspace binary `tool` with `args` and no stdin.
pub fn run(tool: &str, args: &[&str]) -> Run {
    let mut c = crate::cmd(tool);
    c.args(args).stdin(Stdio::null());
    run_cmd(c)
}

/// [`run`] in directory `dir` (relative paths in `args` are read from there).
pub fn run_in(dir: &std::path::Path, tool: &str, args: &[&str]) -> Run {
    let mut c = crate::cmd(tool);
    c.args(args).current_dir(dir).stdin(Stdio::null());
    run_cmd(c)
}

/// [`run`], which must exit 0.
#[track_caller]
pub fn run_ok(tool: &str, args: &[&str]) -> Run {
    run(tool, args).ok()
}

/// loadgen with `args` and no stdin.
pub fn loadgen(args: &[&str]) -> Run {
    run("loadgen", args)
}

/// loadgen against `url` with a test file's fixed flags `base` (its `BASE`), then `args`.
pub fn loadgen_at(url: &str, base: &[&str], args: &[&str]) -> Run {
    call("loadgen").url(url).args(base).args(args).run()
}

/// loadgen with `args`, failing the test past `limit` (a test of how soon it ends).
pub fn loadgen_within(args: &[&str], limit: Duration) -> Run {
    call("loadgen").args(args).within(limit).run()
}

/// loadgen with `args`, which must exit 0.
#[track_caller]
pub fn loadgen_ok(args: &[&str]) -> Run {
    run("loadgen", args).ok()
}

/// summarize's table as a user reads it: `records` (JSON lines) written to a file and
/// summarized, asserting summarize succeeded; its stdout.
pub fn summarize_table(records: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    std::fs::write(&file, records).unwrap();
    let out = crate::cmd("summarize").arg(&file).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
