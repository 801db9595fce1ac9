//! Running things on a machine, here or over SSH, behind one trait ([`Exec`]).
//!
//! srv-launch, srv-kill (and later collbench `--hosts`) need the same few primitives on any
//! host: run a short shell command, start a detached process in its own session, read a file
//! (or its tail), snapshot the process table, signal processes (only while their start time
//! still matches), and see who listens on a TCP port. Everything above this layer (process
//! trees, kill loops, readiness) is written once against the trait, so local and remote share
//! one code path; only these primitives differ. The SSH side uses the `ssh2` crate (libssh2):
//! agent or key auth, host keys checked against known_hosts, keepalives and timeouts, and one
//! clear error per failure kind.

use crate::procs::{ProcId, ProcInfo, ProcTable, parse_stat, start_ticks_of};
use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a primitive failed. `Connect` errors are about the host as named (DNS, refused, host key,
/// auth): the user must fix something, so tools map them to exit 2.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Command(String),
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

    /// The error as a tool error: connection problems are usage errors (exit 2), the rest
    /// failures (exit 1).
    pub fn into_tool_error(self) -> anyhow::Error {
        match self {
            ExecError::Connect(msg) => crate::cli::usage(msg),
            other => crate::cli::failure(other.to_string()),
        }
    }
}

/// What a finished command printed and how it ended.
#[derive(Debug, Clone)]
pub struct Output {
    pub status: i32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
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

/// The primitives every tool needs on a host. Implemented by [`Local`] and [`Ssh`].
pub trait Exec: Send + Sync {
    /// `localhost`, or the SSH target as given (`user@addr:port`).
    fn host(&self) -> &str;
    /// True for this machine.
    fn is_local(&self) -> bool;
    /// Runs `script` with `sh -c`; a non-zero exit is not an error (see [`Output::status`]).
    fn run(&self, script: &str) -> Result<Output, ExecError>;
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
        let out = self.run(&format!(
            "command -v {} >/dev/null 2>&1",
            shell_quote(argv0)
        ))?;
        Ok(out.status == 0)
    }

    /// The process `id` if it still exists with the same start time and is not a zombie.
    fn alive(&self, id: ProcId) -> Result<bool, ExecError> {
        let stat = self.read_tail(&format!("/proc/{}/stat", id.pid), 4096)?;
        Ok(stat
            .and_then(|s| parse_stat(id.pid, &String::from_utf8_lossy(&s)))
            .is_some_and(|p| p.start_ticks == id.start_ticks && !p.is_gone()))
    }

    /// The start time of `pid` (clock ticks since boot), `None` when it does not exist.
    fn start_ticks(&self, pid: u32) -> Result<Option<u64>, ExecError> {
        let stat = self.read_tail(&format!("/proc/{pid}/stat"), 4096)?;
        Ok(stat.and_then(|s| start_ticks_of(pid, &String::from_utf8_lossy(&s))))
    }

    /// Used memory per GPU in bytes, via nvidia-smi; `None` where there is no nvidia-smi.
    fn gpu_used_bytes(&self) -> Result<Option<Vec<u64>>, ExecError> {
        let mib: Option<Vec<u64>> = nvidia_smi_column(self, "--query-gpu=memory.used")?;
        Ok(mib.map(|m| m.into_iter().map(|mib| mib << 20).collect()))
    }

    /// Pids of GPU compute processes, via nvidia-smi; `None` where there is no nvidia-smi.
    fn gpu_pids(&self) -> Result<Option<Vec<u32>>, ExecError> {
        nvidia_smi_column(self, "--query-compute-apps=pid")
    }
}

/// One numeric column from an nvidia-smi query, a value per line; `None` where there is no
/// nvidia-smi.
fn nvidia_smi_column<T: std::str::FromStr, E: Exec + ?Sized>(
    exec: &E,
    query: &str,
) -> Result<Option<Vec<T>>, ExecError> {
    let out = exec.run(&format!(
        "command -v nvidia-smi >/dev/null 2>&1 || exit 99; \
         nvidia-smi {query} --format=csv,noheader,nounits"
    ))?;
    if out.status != 0 {
        return Ok(None);
    }
    Ok(Some(
        out.stdout_text()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
    ))
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

// ---------------------------------------------------------------------------------------------
// Shared parsing of what both implementations read.

/// LISTEN sockets on `port` from the text of /proc/net/tcp or tcp6: their inodes.
pub fn parse_listen_inodes(table: &str, port: u16) -> Vec<u64> {
    let mut inodes = Vec::new();
    for line in table.lines().skip(1) {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.len() < 10 {
            continue;
        }
        // local_address is HEXADDR:HEXPORT; state 0A is LISTEN.
        let local_port = cols[1]
            .rsplit(':')
            .next()
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        if local_port == Some(port)
            && cols[3] == "0A"
            && let Ok(inode) = cols[9].parse::<u64>()
            && inode != 0
        {
            inodes.push(inode);
        }
    }
    inodes
}

/// The pids in /proc, as they are listed.
fn proc_pids() -> std::io::Result<impl Iterator<Item = u32>> {
    Ok(std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())))
}

/// What [`pick_free_port`] reads: the ephemeral port range, then the TCP socket tables.
const PORT_TABLES: &str = "/proc/sys/net/ipv4/ip_local_port_range /proc/net/tcp /proc/net/tcp6";

/// A port for a server to listen on, from the contents of [`PORT_TABLES`]: below the ephemeral
/// range, so no outgoing connection takes it between this choice and the server's bind, and
/// used by no socket at all; a time-derived offset makes each call guess differently.
fn pick_free_port(text: &str) -> Option<u16> {
    let (range, table) = text.split_once('\n')?;
    let ephemeral_start = range
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .unwrap_or(32768);
    let used = used_local_ports(&format!("\n{table}"));
    let (low, high) = if ephemeral_start > 11_000 {
        (10_000, ephemeral_start)
    } else {
        (ephemeral_start.max(1024), 65_536)
    };
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    (0..500u32)
        .map(|i| (low + (seed / 1000 + i * 7919) % (high - low)) as u16)
        .find(|port| !used.contains(port))
}

/// Every local port in a /proc/net/tcp table, whatever the socket's state (a port an
/// established connection holds cannot be bound either).
pub fn used_local_ports(table: &str) -> std::collections::HashSet<u16> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| line.split_whitespace().nth(1))
        .filter_map(|local| local.rsplit(':').next())
        .filter_map(|port| u16::from_str_radix(port, 16).ok())
        .collect()
}

/// The script a remote host runs to snapshot its process table: its own pid, every stat line,
/// every command line (NUL-separated `path:arg` items), and the pids carrying `marker`.
fn snapshot_script(marker: Option<&str>) -> String {
    let mut s = String::from(
        "echo \"self $$\"; echo \"boot $(cat /proc/sys/kernel/random/boot_id)\"; cat /proc/[0-9]*/stat 2>/dev/null; printf '\\n--cmdline--\\n'; \
         grep -azH '' /proc/[0-9]*/cmdline 2>/dev/null; printf '\\n--marker--\\n'; ",
    );
    if let Some(m) = marker {
        s.push_str(&format!(
            "grep -alF {} /proc/[0-9]*/environ 2>/dev/null; ",
            shell_quote(m)
        ));
    }
    s.push_str("true");
    s
}

/// Parses [`snapshot_script`]'s output.
fn parse_snapshot(out: &[u8]) -> ProcTable {
    let find = |needle: &[u8], from: usize| {
        out[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| i + from)
    };
    let cmd_sep = b"\n--cmdline--\n";
    let mark_sep = b"\n--marker--\n";
    let cmd_at = find(cmd_sep, 0).unwrap_or(out.len());
    let mark_at = find(mark_sep, cmd_at).unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..cmd_at]);
    let mut self_pid = 0;
    let mut also_self = Vec::new();
    let mut procs: BTreeMap<u32, ProcInfo> = BTreeMap::new();
    for line in head.lines() {
        if let Some(pid) = line.strip_prefix("self ") {
            self_pid = pid.trim().parse().unwrap_or(0);
            continue;
        }
        if let Some(boot) = line.strip_prefix("boot ") {
            // The same kernel as ours (an SSH session to this machine): protect us too.
            if std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .is_ok_and(|b| b.trim() == boot.trim())
            {
                also_self.push(std::process::id());
            }
            continue;
        }
        let pid = line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(p) = pid.and_then(|pid| parse_stat(pid, line)) {
            procs.insert(p.pid, p);
        }
    }
    let cmd_part = &out[(cmd_at + cmd_sep.len()).min(out.len())..mark_at];
    for item in cmd_part.split(|b| *b == 0) {
        let item = String::from_utf8_lossy(item);
        let item = item.trim_start_matches('\n');
        let Some(rest) = item.strip_prefix("/proc/") else {
            continue;
        };
        let Some((pid, arg)) = rest.split_once("/cmdline:") else {
            continue;
        };
        if let Some(p) = pid.parse::<u32>().ok().and_then(|pid| procs.get_mut(&pid)) {
            p.argv.push(arg.to_string());
        }
    }
    let mark_part = String::from_utf8_lossy(&out[(mark_at + mark_sep.len()).min(out.len())..]);
    for line in mark_part.lines() {
        let pid = line
            .strip_prefix("/proc/")
            .and_then(|r| r.strip_suffix("/environ"))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(p) = pid.and_then(|pid| procs.get_mut(&pid)) {
            p.marked = true;
        }
    }
    ProcTable {
        self_pid,
        also_self,
        procs: procs.into_values().collect(),
    }
}

/// The shell line that starts `spec` detached: `setsid` gives the server its own session, and
/// in a non-interactive shell the `&` child is no group leader, so setsid does not fork and
/// `$!` is the server's pid. All three stdio streams are redirected, or an SSH channel would
/// stay open until the server exits.
pub fn detached_script(spec: &Detached) -> String {
    let mut s = String::new();
    let log = shell_quote(&spec.log);
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
    s.push_str(&format!(" </dev/null >>{log} 2>&1 & echo $!"));
    s
}

// ---------------------------------------------------------------------------------------------
// This machine.

/// This machine: syscalls and /proc directly.
#[derive(Debug, Default)]
pub struct Local;

impl Exec for Local {
    fn host(&self) -> &str {
        "localhost"
    }

    fn is_local(&self) -> bool {
        true
    }

    fn run(&self, script: &str) -> Result<Output, ExecError> {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| ExecError::io("cannot run sh", e))?;
        Ok(Output {
            status: out.status.code().unwrap_or(-1),
            stdout: out.stdout,
            stderr: out.stderr,
        })
    }

    fn spawn_detached(&self, spec: &Detached) -> Result<u32, ExecError> {
        use std::os::unix::process::CommandExt;
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(ExecError::Command("empty command".into()));
        };
        if let Some(dir) = Path::new(&spec.log).parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| ExecError::io(format!("cannot create {}", dir.display()), e))?;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&spec.log)
            .map_err(|e| ExecError::io(format!("cannot open log {}", spec.log), e))?;
        let log2 = log
            .try_clone()
            .map_err(|e| ExecError::io("cannot duplicate the log handle", e))?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        // SAFETY: setsid(2) is async-signal-safe and touches nothing of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| ExecError::io(format!("cannot start {program}"), e))?;
        // The child is reaped by nobody while we run (a dead one shows as a zombie, which every
        // check treats as gone); once we exit, init adopts it.
        let pid = child.id();
        std::mem::forget(child);
        Ok(pid)
    }

    fn read_tail(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, ExecError> {
        use std::io::{Seek, SeekFrom};
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(ExecError::io(format!("cannot read {path}"), e)),
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > max_bytes {
            let _ = f.seek(SeekFrom::Start(len - max_bytes));
        }
        let mut buf = Vec::new();
        match f.take(max_bytes).read_to_end(&mut buf) {
            Ok(_) => Ok(Some(buf)),
            // A process that exits between open and read.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(ExecError::io(format!("cannot read {path}"), e)),
        }
    }

    fn processes(&self, marker: Option<&str>) -> Result<ProcTable, ExecError> {
        let needle = marker.map(|m| m.as_bytes().to_vec());
        let mut procs = Vec::new();
        for pid in proc_pids().map_err(|e| ExecError::io("cannot read /proc", e))? {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(mut p) = parse_stat(pid, &stat) else {
                continue;
            };
            if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
                p.argv = cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
            }
            if let Some(needle) = &needle
                && let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
            {
                p.marked = env.split(|b| *b == 0).any(|e| e == needle.as_slice());
            }
            procs.push(p);
        }
        procs.sort_by_key(|p| p.pid);
        Ok(ProcTable {
            self_pid: std::process::id(),
            also_self: Vec::new(),
            procs,
        })
    }

    fn signal(&self, targets: &[ProcId], sig: Signal) -> Result<Vec<u32>, ExecError> {
        let mut sent = Vec::new();
        for t in targets {
            // Checked just before the signal: a pid whose start time changed is a stranger.
            if self.start_ticks(t.pid)? != Some(t.start_ticks) {
                continue;
            }
            // SAFETY: plain kill(2) on a positive pid we just verified.
            if unsafe { libc::kill(t.pid as i32, sig.number()) } == 0 {
                sent.push(t.pid);
            }
        }
        Ok(sent)
    }

    fn listeners(&self, port: u16) -> Result<Listeners, ExecError> {
        let mut inodes = Vec::new();
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(text) = std::fs::read_to_string(table) {
                inodes.extend(parse_listen_inodes(&text, port));
            }
        }
        let mut pids = Vec::new();
        if !inodes.is_empty() {
            let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
            for pid in proc_pids().into_iter().flatten() {
                let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                    continue;
                };
                let holds = fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path())
                        .map(|t| wanted.iter().any(|w| t.as_os_str() == w.as_str()))
                        .unwrap_or(false)
                });
                if holds {
                    pids.push(pid);
                }
            }
        }
        Ok(Listeners { inodes, pids })
    }

    fn free_port(&self) -> Result<u16, ExecError> {
        let mut text = String::new();
        for path in PORT_TABLES.split(' ') {
            text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        match pick_free_port(&text) {
            Some(port) => Ok(port),
            None => TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| ExecError::io("cannot find a free port", e)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Another machine, over SSH.

/// How to reach and trust a remote host.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Private key file; without one the agent is tried, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
    pub identity: Option<PathBuf>,
    /// known_hosts file (default ~/.ssh/known_hosts).
    pub known_hosts: Option<PathBuf>,
    /// Trust (and record) a host key that is not yet known. A changed key is always refused.
    pub accept_new_host: bool,
    pub connect_timeout: Duration,
    /// Limit on each blocking SSH operation.
    pub command_timeout: Duration,
    pub keepalive: Duration,
}

impl Default for SshOptions {
    fn default() -> Self {
        SshOptions {
            identity: None,
            known_hosts: None,
            accept_new_host: false,
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(60),
            keepalive: Duration::from_secs(15),
        }
    }
}

/// `[user@]addr[:port]`, with `[v6addr]:port` for IPv6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub user: String,
    pub addr: String,
    pub port: u16,
}

impl HostSpec {
    pub fn parse(s: &str) -> Result<HostSpec, String> {
        let (user, rest) = match s.rsplit_once('@') {
            Some((u, r)) if !u.is_empty() => (u.to_string(), r),
            Some(_) => return Err(format!("'{s}': empty user before '@'")),
            None => (current_user(), s),
        };
        let (addr, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (a, tail) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{s}': missing ']' after an IPv6 address"))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => p
                    .parse()
                    .map_err(|_| format!("'{s}': '{p}' is not a port"))?,
                None => 22,
            };
            (a.to_string(), port)
        } else {
            match rest.rsplit_once(':') {
                Some((a, p)) if !a.contains(':') => (
                    a.to_string(),
                    p.parse()
                        .map_err(|_| format!("'{s}': '{p}' is not a port"))?,
                ),
                _ => (rest.to_string(), 22),
            }
        };
        if addr.is_empty() {
            return Err(format!("'{s}': no host address"));
        }
        Ok(HostSpec { user, addr, port })
    }

    /// How known_hosts names this host: `addr`, or `[addr]:port` off port 22.
    pub fn known_hosts_name(&self) -> String {
        if self.port == 22 {
            self.addr.clone()
        } else {
            format!("[{}]:{}", self.addr, self.port)
        }
    }
}

impl fmt::Display for HostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.addr.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.addr, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.addr, self.port)
        }
    }
}

fn current_user() -> String {
    if let Ok(u) = std::env::var("USER")
        && !u.is_empty()
    {
        return u;
    }
    // SAFETY: getpwuid returns a pointer into static storage or null; read at once.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if !pw.is_null() && !(*pw).pw_name.is_null() {
            return std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    "root".to_string()
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}

/// A host reached over SSH: one authenticated session, one channel per primitive.
pub struct Ssh {
    spec: HostSpec,
    name: String,
    session: ssh2::Session,
    last_keepalive: Mutex<Instant>,
    keepalive: Duration,
}

impl Ssh {
    /// Connects, checks the host key and authenticates. Each failure says which step failed.
    pub fn connect(target: &str, opts: &SshOptions) -> Result<Ssh, ExecError> {
        let spec =
            HostSpec::parse(target).map_err(|e| ExecError::Connect(format!("--host {e}")))?;
        let addrs: Vec<_> = (spec.addr.as_str(), spec.port)
            .to_socket_addrs()
            .map_err(|e| {
                ExecError::Connect(format!(
                    "cannot resolve host '{}' ({e}): check the name in --host or the server record",
                    spec.addr
                ))
            })?
            .collect();
        let mut last_err = None;
        let mut tcp = None;
        for addr in &addrs {
            match TcpStream::connect_timeout(addr, opts.connect_timeout) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last_err = Some((addr, e)),
            }
        }
        let tcp = tcp.ok_or_else(|| {
            let why = match &last_err {
                Some((addr, e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    format!(
                        "connection refused by {addr}: is sshd running on port {}?",
                        spec.port
                    )
                }
                Some((addr, e)) if e.kind() == std::io::ErrorKind::TimedOut => format!(
                    "no answer from {addr} within {:?}: host down or port {} filtered",
                    opts.connect_timeout, spec.port
                ),
                Some((addr, e)) => format!("cannot connect to {addr}: {e}"),
                None => "the name resolved to no address".to_string(),
            };
            ExecError::Connect(format!("ssh {spec}: {why}"))
        })?;
        let mut session = ssh2::Session::new()
            .map_err(|e| ExecError::Connect(format!("ssh {spec}: cannot start libssh2: {e}")))?;
        session.set_tcp_stream(tcp);
        session.set_timeout(opts.connect_timeout.as_millis() as u32);
        session.handshake().map_err(|e| {
            ExecError::Connect(format!(
                "ssh {spec}: SSH handshake failed ({e}): is that port an SSH server?"
            ))
        })?;
        check_host_key(&session, &spec, opts)?;
        authenticate(&session, &spec, opts)?;
        session.set_timeout(opts.command_timeout.as_millis() as u32);
        session.set_keepalive(false, opts.keepalive.as_secs().max(1) as u32);
        Ok(Ssh {
            name: target.to_string(),
            spec,
            session,
            last_keepalive: Mutex::new(Instant::now()),
            keepalive: opts.keepalive,
        })
    }

    pub fn spec(&self) -> &HostSpec {
        &self.spec
    }

    fn keepalive_if_due(&self) {
        let mut last = self
            .last_keepalive
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if last.elapsed() >= self.keepalive {
            let _ = self.session.keepalive_send();
            *last = Instant::now();
        }
    }

    fn exec_raw(&self, script: &str) -> Result<Output, ExecError> {
        self.keepalive_if_due();
        let fail = |what: &str, e: ssh2::Error| {
            ExecError::Command(format!("ssh {}: {what}: {e}", self.spec))
        };
        let mut ch = self
            .session
            .channel_session()
            .map_err(|e| fail("cannot open a channel (connection lost?)", e))?;
        // Through `sh -c`, so the scripts are POSIX whatever the user's login shell is.
        ch.exec(&format!("sh -c {}", shell_quote(script)))
            .map_err(|e| fail("remote command refused", e))?;
        let mut stdout = Vec::new();
        ch.read_to_end(&mut stdout)
            .map_err(|e| ExecError::Command(format!("ssh {}: reading output: {e}", self.spec)))?;
        let mut stderr = Vec::new();
        let _ = ch.stderr().read_to_end(&mut stderr);
        ch.wait_close()
            .map_err(|e| fail("closing the channel", e))?;
        let status = ch.exit_status().map_err(|e| fail("no exit status", e))?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

fn check_host_key(
    session: &ssh2::Session,
    spec: &HostSpec,
    opts: &SshOptions,
) -> Result<(), ExecError> {
    let (key, key_type) = session
        .host_key()
        .ok_or_else(|| ExecError::Connect(format!("ssh {spec}: the server sent no host key")))?;
    let file = opts
        .known_hosts
        .clone()
        .unwrap_or_else(|| home_dir().join(".ssh/known_hosts"));
    let mut known = session
        .known_hosts()
        .map_err(|e| ExecError::Connect(format!("ssh {spec}: known_hosts: {e}")))?;
    // Line by line, so one entry libssh2 cannot parse (certificates, sk keys) does not hide
    // the others.
    if let Ok(text) = std::fs::read_to_string(&file) {
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
                continue;
            }
            let _ = known.read_str(line, ssh2::KnownHostFileKind::OpenSSH);
        }
    }
    let fingerprint = session
        .host_key_hash(ssh2::HashType::Sha256)
        .map(|h| {
            use base64::Engine;
            format!(
                "SHA256:{}",
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(h)
            )
        })
        .unwrap_or_else(|| "unknown".into());
    let type_name = match key_type {
        ssh2::HostKeyType::Rsa => "ssh-rsa",
        ssh2::HostKeyType::Dss => "ssh-dss",
        ssh2::HostKeyType::Ecdsa256 => "ecdsa-sha2-nistp256",
        ssh2::HostKeyType::Ecdsa384 => "ecdsa-sha2-nistp384",
        ssh2::HostKeyType::Ecdsa521 => "ecdsa-sha2-nistp521",
        ssh2::HostKeyType::Ed25519 => "ssh-ed25519",
        ssh2::HostKeyType::Unknown => "unknown",
    };
    match known.check_port(&spec.addr, spec.port, key) {
        ssh2::CheckResult::Match => Ok(()),
        ssh2::CheckResult::Mismatch => Err(ExecError::Connect(format!(
            "ssh {spec}: HOST KEY CHANGED: {} in {} does not match the {type_name} key the server \
             sent ({fingerprint}); refusing to connect. If the host was reinstalled, remove the old \
             line (ssh-keygen -R '{}' -f {}) and rerun",
            spec.known_hosts_name(),
            file.display(),
            spec.known_hosts_name(),
            file.display()
        ))),
        ssh2::CheckResult::NotFound if opts.accept_new_host => {
            use base64::Engine;
            let line = format!(
                "{} {type_name} {}\n",
                spec.known_hosts_name(),
                base64::engine::general_purpose::STANDARD.encode(key)
            );
            if let Some(dir) = file.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| {
                    ExecError::Connect(format!(
                        "ssh {spec}: cannot record the new host key in {}: {e}",
                        file.display()
                    ))
                })?;
            crate::cli::info(format!(
                "trusting new host key for {} ({type_name} {fingerprint}), added to {}",
                spec.known_hosts_name(),
                file.display()
            ));
            Ok(())
        }
        ssh2::CheckResult::NotFound => Err(ExecError::Connect(format!(
            "ssh {spec}: unknown host key ({type_name} {fingerprint}): {} is not in {}; verify the \
             fingerprint and rerun with --accept-new-host to trust it",
            spec.known_hosts_name(),
            file.display()
        ))),
        ssh2::CheckResult::Failure => Err(ExecError::Connect(format!(
            "ssh {spec}: cannot check the host key against {}",
            file.display()
        ))),
    }
}

fn authenticate(
    session: &ssh2::Session,
    spec: &HostSpec,
    opts: &SshOptions,
) -> Result<(), ExecError> {
    let user = spec.user.as_str();
    let mut tried = Vec::new();
    if let Some(key) = &opts.identity {
        if !key.exists() {
            return Err(ExecError::Connect(format!(
                "ssh {spec}: identity file {} does not exist",
                key.display()
            )));
        }
        return match session.userauth_pubkey_file(user, None, key, None) {
            Ok(()) if session.authenticated() => Ok(()),
            Ok(()) | Err(_) => Err(ExecError::Connect(format!(
                "ssh {spec}: authentication failed: the server refused key {} for user '{user}' \
                 (is its .pub in the remote authorized_keys?)",
                key.display()
            ))),
        };
    }
    if std::env::var_os("SSH_AUTH_SOCK").is_some()
        && let Ok(mut agent) = session.agent()
        && agent.connect().is_ok()
        && agent.list_identities().is_ok()
    {
        let ids = agent.identities().unwrap_or_default();
        tried.push(format!("agent ({} keys)", ids.len()));
        for id in &ids {
            if agent.userauth(user, id).is_ok() && session.authenticated() {
                return Ok(());
            }
        }
    }
    for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
        let key = home_dir().join(".ssh").join(name);
        if key.exists() {
            tried.push(key.display().to_string());
            if session.userauth_pubkey_file(user, None, &key, None).is_ok()
                && session.authenticated()
            {
                return Ok(());
            }
        }
    }
    Err(ExecError::Connect(format!(
        "ssh {spec}: authentication failed for user '{user}' (tried: {}); pass --identity KEY",
        if tried.is_empty() {
            "no agent, no default key".to_string()
        } else {
            tried.join(", ")
        }
    )))
}

impl Exec for Ssh {
    fn host(&self) -> &str {
        &self.name
    }

    fn is_local(&self) -> bool {
        false
    }

    fn run(&self, script: &str) -> Result<Output, ExecError> {
        self.exec_raw(script)
    }

    fn spawn_detached(&self, spec: &Detached) -> Result<u32, ExecError> {
        if spec.argv.is_empty() {
            return Err(ExecError::Command("empty command".into()));
        }
        let out = self.exec_raw(&detached_script(spec))?;
        match out.status {
            97 => Err(ExecError::Command(format!(
                "ssh {}: cannot create the log directory for {}: {}",
                self.spec,
                spec.log,
                out.stderr_text()
            ))),
            98 => Err(ExecError::Command(format!(
                "ssh {}: cannot enter {}: {}",
                self.spec,
                spec.cwd.as_deref().unwrap_or(""),
                out.stderr_text()
            ))),
            _ => out.stdout_text().trim().parse::<u32>().map_err(|_| {
                ExecError::Command(format!(
                    "ssh {}: launching gave no pid (stdout '{}', stderr '{}')",
                    self.spec,
                    out.stdout_text().trim(),
                    out.stderr_text()
                ))
            }),
        }
    }

    fn read_tail(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, ExecError> {
        let q = shell_quote(path);
        let out = self.exec_raw(&format!("[ -e {q} ] || exit 44; tail -c {max_bytes} {q}"))?;
        match out.status {
            0 => Ok(Some(out.stdout)),
            // Gone, or vanished while reading (a /proc entry of an exiting process).
            _ => Ok(None),
        }
    }

    fn processes(&self, marker: Option<&str>) -> Result<ProcTable, ExecError> {
        let out = self.exec_raw(&snapshot_script(marker))?;
        let table = parse_snapshot(&out.stdout);
        if table.procs.is_empty() {
            return Err(ExecError::Command(format!(
                "ssh {}: cannot read the remote process table (no /proc?): {}",
                self.spec,
                out.stderr_text()
            )));
        }
        Ok(table)
    }

    fn signal(&self, targets: &[ProcId], sig: Signal) -> Result<Vec<u32>, ExecError> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        // Field 22 of /proc/PID/stat is field 20 after the ") " that ends the command name.
        let list: Vec<String> = targets
            .iter()
            .map(|t| format!("{}:{}", t.pid, t.start_ticks))
            .collect();
        let script = format!(
            "for x in {}; do p=${{x%%:*}}; t=${{x#*:}}; \
             s=$(sed 's/.*) //' /proc/$p/stat 2>/dev/null | cut -d' ' -f20); \
             [ \"$s\" = \"$t\" ] && kill -s {} $p 2>/dev/null && echo $p; done; true",
            list.join(" "),
            sig.name()
        );
        let out = self.exec_raw(&script)?;
        Ok(out
            .stdout_text()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    fn listeners(&self, port: u16) -> Result<Listeners, ExecError> {
        let out = self.exec_raw("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")?;
        let text = out.stdout_text();
        // The two tables concatenated: each has its own header line, which never parses.
        let inodes: Vec<u64> = parse_listen_inodes(&format!("\n{text}"), port);
        let mut pids = Vec::new();
        if !inodes.is_empty() {
            let names: Vec<String> = inodes
                .iter()
                .map(|i| format!("-lname 'socket:\\[{i}\\]'"))
                .collect();
            let out = self.exec_raw(&format!(
                "find /proc/[0-9]*/fd -maxdepth 1 \\( {} \\) 2>/dev/null; true",
                names.join(" -o ")
            ))?;
            for line in out.stdout_text().lines() {
                let pid = line
                    .strip_prefix("/proc/")
                    .and_then(|r| r.split('/').next())
                    .and_then(|p| p.parse::<u32>().ok());
                if let Some(pid) = pid
                    && !pids.contains(&pid)
                {
                    pids.push(pid);
                }
            }
        }
        Ok(Listeners { inodes, pids })
    }

    fn free_port(&self) -> Result<u16, ExecError> {
        let out = self.exec_raw(&format!("cat {PORT_TABLES} 2>/dev/null"))?;
        if let Some(port) = pick_free_port(&out.stdout_text()) {
            return Ok(port);
        }
        Err(ExecError::Command(format!(
            "ssh {}: no free port found",
            self.spec
        )))
    }
}

/// The SSH flags every tool that reaches other hosts takes (flatten into its clap struct).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SshArgs {
    /// Private key for SSH (default: the agent, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)
    #[arg(long, value_name = "KEY", env = "SERVBENCH_SSH_IDENTITY")]
    pub identity: Option<PathBuf>,
    /// known_hosts file to check host keys against (default ~/.ssh/known_hosts)
    #[arg(long, value_name = "FILE", env = "SERVBENCH_SSH_KNOWN_HOSTS")]
    pub known_hosts: Option<PathBuf>,
    /// Trust a host key seen for the first time and add it to known_hosts (a changed key is
    /// always refused)
    #[arg(long)]
    pub accept_new_host: bool,
    /// Give up connecting to an SSH host after this long
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = crate::cli::parse_duration)]
    pub connect_timeout: Duration,
}

impl SshArgs {
    pub fn options(&self) -> SshOptions {
        SshOptions {
            identity: self.identity.clone(),
            known_hosts: self.known_hosts.clone(),
            accept_new_host: self.accept_new_host,
            connect_timeout: self.connect_timeout,
            ..SshOptions::default()
        }
    }
}

/// Connects to `host`: `None`, empty or `localhost` mean this machine, anything else SSH.
pub fn connect(host: Option<&str>, opts: &SshOptions) -> Result<Box<dyn Exec>, ExecError> {
    match host {
        None | Some("") | Some("localhost") => Ok(Box::new(Local)),
        Some(h) => Ok(Box::new(Ssh::connect(h, opts)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_specs() {
        let h = HostSpec::parse("bob@gpu1:2222").unwrap();
        assert_eq!(
            (h.user.as_str(), h.addr.as_str(), h.port),
            ("bob", "gpu1", 2222)
        );
        assert_eq!(h.known_hosts_name(), "[gpu1]:2222");
        let h = HostSpec::parse("gpu1").unwrap();
        assert_eq!((h.addr.as_str(), h.port), ("gpu1", 22));
        assert_eq!(h.known_hosts_name(), "gpu1");
        let h = HostSpec::parse("u@[::1]:2200").unwrap();
        assert_eq!((h.addr.as_str(), h.port), ("::1", 2200));
        assert!(HostSpec::parse("u@h:notaport").is_err());
        assert!(HostSpec::parse("@h").is_err());
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("abc"), "abc");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn listen_table() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1 0 100 0 0 10 0\n\
   1: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 777 1 0 100 0 0 10 0\n";
        assert_eq!(parse_listen_inodes(t, 8080), vec![12345]);
        assert!(parse_listen_inodes(t, 8081).is_empty());
        // Every local port counts as used, listening or not; remote ports do not.
        let used = used_local_ports(t);
        assert!(used.contains(&8080));
        assert!(!used.contains(&0xC350));
    }

    #[test]
    fn free_ports_are_chosen_below_the_ephemeral_range_and_unused() {
        let table = "  sl  local_address rem_address   st\n   0: 0100007F:2710 00000000:0000 0A\n";
        for _ in 0..50 {
            let port = pick_free_port(&format!("32768\t60999\n{table}")).unwrap();
            assert!((10_000..32_768).contains(&port) && port != 0x2710, "{port}");
        }
        let local = Local.free_port().unwrap();
        assert!(std::net::TcpListener::bind(("127.0.0.1", local)).is_ok());
    }

    #[test]
    fn local_snapshot_sees_itself_and_the_remote_parser_agrees() {
        let local = Local.processes(None).unwrap();
        let me = local.get(std::process::id()).expect("own pid in table");
        assert!(me.start_ticks > 0);
        // The remote path's script and parser, run here through sh.
        let out = Local.run(&snapshot_script(None)).unwrap();
        let remote = parse_snapshot(&out.stdout);
        let me2 = remote.get(std::process::id()).expect("own pid via script");
        assert_eq!(me.start_ticks, me2.start_ticks);
        assert_eq!(me.argv, me2.argv);
        assert!(remote.self_pid > 0 && remote.get(remote.self_pid).is_some());
    }
}
