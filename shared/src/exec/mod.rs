//! Running things on a machine, here or over SSH, behind one trait ([`Exec`]).
//!
//! srv-launch, srv-kill and collbench `--hosts` need the same few primitives on any host: run a
//! short shell command, start a detached process in its own session, read a file (or its
//! tail), snapshot the process table, signal processes (only while their start time still
//! matches), and see who listens on a TCP port. Everything above this layer (process trees,
//! kill loops, readiness) is written once against the trait, so local and remote share one
//! code path; only these primitives differ.
//!
//! - this file: the trait and its small types, shell quoting, [`connect`];
//! - [`local`]: this machine, through syscalls and /proc;
//! - [`ssh`]: another machine over the `ssh2` crate (libssh2): agent or key auth, host keys
//!   checked against known_hosts, keepalives and timeouts, one clear error per failure kind.
//!   Only with the `ssh` feature (default for this crate; tools that never reach another host,
//!   summarize and srv-sim, build without it and so without libssh2 and OpenSSL);
//! - [`host`]: naming a remote host and the SSH options, with or without the feature;
//! - [`gpu`]: nvidia-smi's queries, on either;
//! - [`bounded`]: how every run of another program is bounded ([`Bounds`]): a deadline past
//!   which its whole process group gets TERM, then KILL, and a cap on what it prints.
//!
//! Layering: `exec` reads process tables through [`crate::procs`] (types and /proc text
//! parsers, which know nothing of hosts); the kill loop (the `kill` module) sits above both.

pub mod bounded;
pub mod gpu;
pub mod host;
pub mod local;
#[cfg(feature = "nvml")]
pub mod nvml;
#[cfg(feature = "ssh")]
pub mod ssh;

pub use bounded::{Bounds, KILL_GRACE};
pub use host::{HostSpec, SshOptions};
pub use local::Local;
#[cfg(feature = "ssh")]
pub use ssh::Ssh;

use crate::procs::{ProcId, ProcTable, parse_stat, start_ticks_of};

/// Why a primitive failed. `Connect` errors are about the host as named (DNS, refused, host key,
/// auth): the user must fix something, so `cli::exit_for` maps them to exit 2, the
/// rest to exit 1; a tool just `?`s them.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Command(String),
    /// The program ran past its [`Bounds::deadline`] (its group was killed) or was stopped by
    /// [`Bounds::stop`].
    #[error("{0}")]
    TimedOut(String),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
}

impl ExecError {
    fn io(what: impl Into<String>, err: std::io::Error) -> ExecError {
        ExecError::Io {
            what: what.into(),
            err,
        }
    }
}

/// What a finished command printed and how it ended.
#[derive(Debug, Clone, Default)]
pub struct Output {
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// It printed more than [`Bounds::output_cap`] on one stream: what is here was kept, the
    /// rest cut, and the program killed.
    pub cut: bool,
}

impl Output {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }
}

/// A process to start detached: its own session (pgid = sid = pid), stdin from /dev/null,
/// stdout and stderr appended to `log`, so it outlives the caller and any SSH connection.
#[derive(Debug, Clone, Default)]
pub struct Detached {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: Option<String>,
    pub log: String,
}

/// Signals the tools send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Term => "TERM",
            Signal::Kill => "KILL",
        }
    }
    fn number(self) -> i32 {
        match self {
            Signal::Term => libc::SIGTERM,
            Signal::Kill => libc::SIGKILL,
        }
    }
}

/// A TCP listener found in /proc/net/tcp{,6}: the socket inode and the pids holding it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listeners {
    pub inodes: Vec<u64>,
    pub pids: Vec<u32>,
}

impl Listeners {
    pub fn is_free(&self) -> bool {
        self.inodes.is_empty()
    }
}

/// The primitives every tool needs on a host. Implemented by [`Local`] and `ssh::Ssh`.
pub trait Exec: Send + Sync {
    /// `localhost`, or the SSH target as given (`user@addr:port`).
    fn host(&self) -> &str;
    /// True for this machine.
    fn is_local(&self) -> bool;
    /// Runs `script` with `sh -c` within `bounds` (see [`Bounds`]): past the deadline it is
    /// killed and the run is [`ExecError::TimedOut`]; output past the cap is cut
    /// ([`Output::cut`]). A non-zero exit is not an error (see [`Output::status`]).
    fn run(&self, script: &str, bounds: Bounds) -> Result<Output, ExecError>;
    /// Starts a detached process (see [`Detached`]) and returns its pid.
    fn spawn_detached(&self, spec: &Detached) -> Result<u32, ExecError>;
    /// Up to the last `max_bytes` of a file; `None` when it does not exist.
    fn read_tail(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, ExecError>;
    /// Every process, with `marker` (an environment entry `K=V`) looked up when given.
    fn processes(&self, marker: Option<&str>) -> Result<ProcTable, ExecError>;
    /// Sends `sig` to each process whose start time still matches; returns the pids signalled.
    fn signal(&self, targets: &[ProcId], sig: Signal) -> Result<Vec<u32>, ExecError>;
    /// Who listens on TCP `port` (any address, IPv4 or IPv6).
    fn listeners(&self, port: u16) -> Result<Listeners, ExecError>;
    /// A TCP port nothing listens on right now.
    fn free_port(&self) -> Result<u16, ExecError>;

    /// Whether `argv0` can be run there (on PATH or an executable path).
    fn has_program(&self, argv0: &str) -> Result<bool, ExecError> {
        let out = self.run(
            &format!("command -v {} >/dev/null 2>&1", shell_quote(argv0)),
            Bounds::QUERY,
        )?;
        Ok(out.status == 0)
    }

    /// The process `id` if it still exists with the same start time and is not a zombie.
    fn alive(&self, id: ProcId) -> Result<bool, ExecError> {
        let stat = self.read_tail(&format!("/proc/{}/stat", id.pid), 4096)?;
        Ok(stat
            .and_then(|s| parse_stat(id.pid, &String::from_utf8_lossy(&s)))
            .is_some_and(|p| p.start_ticks == id.start_ticks && !p.is_gone()))
    }

    /// The length of a file in bytes; `None` when it does not exist.
    fn file_len(&self, path: &str) -> Result<Option<u64>, ExecError> {
        let q = shell_quote(path);
        let out = self.run(
            &format!("[ -e {q} ] || exit 44; wc -c < {q}"),
            Bounds::QUERY,
        )?;
        if out.status == 44 {
            return Ok(None);
        }
        // A size that cannot be read is not "no such file" (SSH-log-banner/-close).
        match out.stdout_text().trim().parse() {
            Ok(len) if out.status == 0 => Ok(Some(len)),
            _ => Err(ExecError::Command(format!(
                "{}: the size of {path} could not be read (exit status {}, stdout '{}', stderr '{}')",
                self.host(),
                out.status,
                out.stdout_text()
                    .trim()
                    .chars()
                    .take(100)
                    .collect::<String>(),
                out.stderr_text()
            ))),
        }
    }

    /// Up to `max_bytes` of a file from byte `offset` on (empty past its end); `None` when it
    /// does not exist. Reading a growing log piece by piece (srv-launch's startup phases).
    fn read_from(
        &self,
        path: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, ExecError> {
        let q = shell_quote(path);
        let script = format!(
            "[ -e {q} ] || exit 44; tail -c +{} {q} | head -c {max_bytes}",
            offset + 1
        );
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        // One byte of room: `head -c` already stops at the cap, so a full read is not "cut".
        let out = self.run(
            &script,
            Bounds::QUERY.with_output_cap(cap.saturating_add(1)),
        )?;
        if out.status == 44 {
            return Ok(None);
        }
        let mut bytes = out.stdout;
        bytes.truncate(cap);
        Ok(Some(bytes))
    }

    /// What a path is: its length, whether it is a regular file (a FIFO or a device is not,
    /// and opening one may block or never end), and its identity (device and inode: a file
    /// rotated into its place is another); `None` when it does not exist.
    fn file_stat(&self, path: &str) -> Result<Option<FileStat>, ExecError> {
        let q = shell_quote(path);
        let out = self.run(
            &format!("[ -e {q} ] || exit 44; stat -L -c '%s %F %d:%i' {q}"),
            Bounds::QUERY,
        )?;
        if out.status == 44 {
            return Ok(None);
        }
        let text = out.stdout_text();
        parse_stat_line(text.trim()).map(Some).ok_or_else(|| {
            ExecError::io(
                format!("cannot read what {path} is"),
                std::io::Error::other(format!(
                    "stat printed `{}`",
                    crate::jsonl::excerpt(text.trim(), 80)
                )),
            )
        })
    }

    /// The start time of `pid` (clock ticks since boot), `None` when it does not exist.
    fn start_ticks(&self, pid: u32) -> Result<Option<u64>, ExecError> {
        let stat = self.read_tail(&format!("/proc/{pid}/stat"), 4096)?;
        Ok(stat.and_then(|s| start_ticks_of(pid, &String::from_utf8_lossy(&s))))
    }
}

/// What [`Exec::file_stat`] says of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStat {
    pub len: u64,
    pub regular: bool,
    /// `device:inode`.
    pub id: String,
}

/// `stat -c '%s %F %d:%i'`'s line: `123 regular file 2049:1234` (`regular empty file` too).
fn parse_stat_line(line: &str) -> Option<FileStat> {
    let (len, rest) = line.split_once(' ')?;
    let (kind, id) = rest.rsplit_once(' ')?;
    Some(FileStat {
        len: len.parse().ok()?,
        regular: kind.starts_with("regular"),
        id: id.to_string(),
    })
}

/// Quotes `s` for a POSIX shell (single quotes; a bare word when that is safe).
pub fn shell_quote(s: &str) -> String {
    let safe = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if safe {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A command line as a person would type it.
pub fn shell_join(argv: &[String]) -> String {
    argv.iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why a detached process's log was refused: it exists and is not a regular file (a FIFO would
/// block the open, or the server's first write, forever; a device or a directory cannot be read
/// back as its log).
pub const NOT_A_FILE: &str = "exists and is not a regular file";

/// Exit status of [`detached_script`] when the log exists and is not a regular file.
pub const LOG_NOT_A_FILE_STATUS: i32 = 96;

/// The shell line that starts `spec` detached: `setsid` gives the server its own session, and
/// in a non-interactive shell the `&` child is no group leader, so setsid does not fork and
/// `$!` is the server's pid. All three stdio streams are redirected, or an SSH channel would
/// stay open until the server exits.
pub fn detached_script(spec: &Detached) -> String {
    let mut s = String::new();
    let log = shell_quote(&spec.log);
    s.push_str(&format!(
        "[ ! -e {log} ] || [ -f {log} ] || exit {LOG_NOT_A_FILE_STATUS}; "
    ));
    s.push_str(&format!("mkdir -p \"$(dirname {log})\" || exit 97; "));
    if let Some(dir) = &spec.cwd {
        s.push_str(&format!("cd {} || exit 98; ", shell_quote(dir)));
    }
    s.push_str("setsid ");
    if !spec.env.is_empty() {
        s.push_str("env ");
        for (k, v) in &spec.env {
            s.push_str(&shell_quote(&format!("{k}={v}")));
            s.push(' ');
        }
    }
    s.push_str(&shell_join(&spec.argv));
    s.push_str(&format!(" </dev/null >>{log} 2>&1 & echo {PID_MARK}$!"));
    s
}

/// Before the pid [`detached_script`] prints: a login's banner before it, or a logout
/// script's words after it, do not hide it.
pub const PID_MARK: &str = "servbench-launched-pid:";

/// The pid on the last line of `stdout` that carries [`PID_MARK`].
pub fn launched_pid(stdout: &str) -> Option<u32> {
    let (_, after) = stdout.rsplit_once(PID_MARK)?;
    after.lines().next()?.trim().parse().ok()
}

/// Connects to `host`: `None`, empty or `localhost` mean this machine, anything else SSH.
pub fn connect(host: Option<&str>, opts: &SshOptions) -> Result<Box<dyn Exec>, ExecError> {
    match host {
        None | Some("") | Some("localhost") => Ok(Box::new(Local)),
        #[cfg(feature = "ssh")]
        Some(h) => Ok(Box::new(Ssh::connect(h, opts)?)),
        #[cfg(not(feature = "ssh"))]
        Some(h) => {
            let _ = opts;
            Err(ExecError::Connect(format!(
                "--host {h}: this tool is built without SSH (servbench's `ssh` feature); \
                 run it on that host, or use a tool that reaches hosts (srv-launch, srv-kill)"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_launched_pid_is_read_past_a_banner_and_a_logout_message() {
        let out = format!(
            "Welcome to gpu-node-7! Last login: yesterday\n*** 3 GPUs are reserved ***\n{PID_MARK}14256\nbye\n"
        );
        assert_eq!(launched_pid(&out), Some(14256));
        // A banner without a line end before the mark.
        assert_eq!(launched_pid(&format!("motd{PID_MARK}7\n")), Some(7));
        assert_eq!(launched_pid("Welcome\n14256\n"), None);
        assert_eq!(launched_pid(&format!("{PID_MARK}\n")), None);
    }

    #[test]
    fn stats_line_says_the_length_the_kind_and_the_identity() {
        let f = parse_stat_line("123 regular file 2049:77").unwrap();
        assert_eq!((f.len, f.regular, f.id.as_str()), (123, true, "2049:77"));
        assert!(parse_stat_line("0 regular empty file 1:2").unwrap().regular);
        assert!(!parse_stat_line("0 fifo 1:3").unwrap().regular);
        assert_eq!(parse_stat_line("garbage"), None);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc"), "abc");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
