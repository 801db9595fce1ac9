//! Another machine, over SSH: one authenticated session (see `ssh/auth.rs` for the host-key check
//! and authentication), one channel per primitive, every script through `sh -c`.

mod auth;
mod host_cert;
mod known_hosts;

pub use super::host::{HostSpec, SshOptions};

use super::{
    Bounds, Detached, Exec, ExecError, Listeners, Output, Signal, bounded, detached_script,
    shell_quote,
};
use crate::procs::{
    PORT_TABLES, ProcId, ProcTable, parse_listen_inodes, parse_snapshot, pick_free_port,
};
use auth::{authenticate, check_host_key, load_known_hosts, prefer_known_host_key_types};
use std::io::Read;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Printed by every remote script before its own output (see [`Ssh::after_the_mark`]).
const OUTPUT_STARTS: &str = "servbench-output-starts";

/// Room on stdout for what a login prints before [`OUTPUT_STARTS`] (a banner, a message of the
/// day), beyond the script's own cap.
const LOGIN_ROOM: usize = 64 << 10;

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
        let known = load_known_hosts(&spec, opts)?;
        prefer_known_host_key_types(&session, &spec, &known)?;
        session.handshake().map_err(|e| {
            ExecError::Connect(format!(
                "ssh {spec}: SSH handshake failed ({e}): is that port an SSH server?"
            ))
        })?;
        check_host_key(&session, &spec, opts, &known)?;
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

    /// Runs `script` there within `bounds` (see [`bounded::remote_script`]): the remote
    /// `timeout` stops it at the deadline; output past the cap is cut and the channel closed.
    fn exec_raw(&self, script: &str, bounds: Bounds) -> Result<Output, ExecError> {
        self.keepalive_if_due();
        let fail = |what: &str, e: ssh2::Error| {
            ExecError::Command(format!("ssh {}: {what}: {e}", self.spec))
        };
        let started = Instant::now();
        let mut ch = self
            .session
            .channel_session()
            .map_err(|e| fail("cannot open a channel (connection lost?)", e))?;
        // Through `sh -c`, so the scripts are POSIX whatever the user's login shell is. The
        // mark first: what comes before it is the login's (a ForceCommand's banner, an rc
        // file's echo), never the script's.
        let line = format!(
            "echo {OUTPUT_STARTS}; {}",
            bounded::remote_script(script, bounds.deadline)
        );
        ch.exec(&format!("sh -c {}", shell_quote(&line)))
            .map_err(|e| fail("remote command refused", e))?;
        let reading = |e: std::io::Error| {
            ExecError::Command(format!("ssh {}: reading output: {e}", self.spec))
        };
        // The cap is the script's: the login's words and the mark come on top, bounded too.
        let raw = bounds.with_output_cap(bounds.output_cap.saturating_add(LOGIN_ROOM));
        let (stdout, raw_cut) = read_capped(&mut ch, raw).map_err(reading)?;
        let (stderr, cut_err) = if raw_cut {
            (Vec::new(), false)
        } else {
            read_capped(&mut ch.stderr(), bounds).unwrap_or_default()
        };
        if bounds
            .stop
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst))
        {
            return Err(ExecError::TimedOut("stopped by a signal".into()));
        }
        if raw_cut || cut_err {
            // Closing the channel closes the program's output: its next write ends it, and
            // the remote `timeout` ends it at the deadline anyway.
            let _ = ch.close();
            let mut stdout = self.after_the_mark(stdout, -1)?;
            stdout.truncate(bounds.output_cap);
            return Ok(Output {
                status: -1,
                stdout,
                stderr,
                cut: true,
            });
        }
        ch.wait_close()
            .map_err(|e| fail("closing the channel", e))?;
        let status = ch.exit_status().map_err(|e| fail("no exit status", e))?;
        if bounded::is_timeout_status(status) && started.elapsed() >= bounds.deadline {
            return Err(bounds.timed_out(&format!("ssh {}: the remote command", self.spec)));
        }
        let mut stdout = self.after_the_mark(stdout, status)?;
        let cut = stdout.len() > bounds.output_cap;
        stdout.truncate(bounds.output_cap);
        Ok(Output {
            status: if cut { -1 } else { status },
            stdout,
            stderr,
            cut,
        })
    }

    /// The script's own output: what follows [`OUTPUT_STARTS`]. Without the mark the remote
    /// ran none of the script (a ForceCommand that ends the session, a login that swallows its
    /// output): an empty answer is not "nothing there".
    fn after_the_mark(&self, stdout: Vec<u8>, status: i32) -> Result<Vec<u8>, ExecError> {
        let mark = format!("{OUTPUT_STARTS}\n");
        match stdout
            .windows(mark.len())
            .position(|w| w == mark.as_bytes())
        {
            Some(at) => Ok(stdout[at + mark.len()..].to_vec()),
            None => Err(ExecError::Command(format!(
                "ssh {}: the remote ran none of the command (exit status {status}, stdout '{}'): \
                 does a ForceCommand or login script there end the session or swallow its \
                 output? `ssh {} echo ok` should print ok",
                self.spec,
                String::from_utf8_lossy(&stdout)
                    .chars()
                    .take(200)
                    .collect::<String>(),
                self.spec
            ))),
        }
    }

    /// A primitive of the process layer: its output is whole or it failed.
    fn primitive(&self, script: &str) -> Result<Output, ExecError> {
        let out = self.exec_raw(script, Bounds::PRIMITIVE)?;
        if out.cut {
            return Err(ExecError::Command(format!(
                "ssh {}: the remote command printed more than {} MiB",
                self.spec,
                Bounds::PRIMITIVE.output_cap >> 20
            )));
        }
        Ok(out)
    }
}

/// Reads `r` to its end, keeping at most `bounds.output_cap` bytes; true when it was cut
/// there. Ends early (not cut) when `bounds.stop` is set.
fn read_capped(r: &mut impl Read, bounds: Bounds) -> std::io::Result<(Vec<u8>, bool)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 32 * 1024];
    loop {
        if bounds
            .stop
            .is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst))
        {
            return Ok((buf, false));
        }
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Ok((buf, false));
        }
        let room = bounds.output_cap.saturating_sub(buf.len());
        buf.extend_from_slice(&chunk[..n.min(room)]);
        if n > room {
            return Ok((buf, true));
        }
    }
}

impl Exec for Ssh {
    fn host(&self) -> &str {
        &self.name
    }

    fn is_local(&self) -> bool {
        false
    }

    fn run(&self, script: &str, bounds: Bounds) -> Result<Output, ExecError> {
        self.exec_raw(script, bounds)
    }

    fn spawn_detached(&self, spec: &Detached) -> Result<u32, ExecError> {
        if spec.argv.is_empty() {
            return Err(ExecError::Command("empty command".into()));
        }
        let out = self.primitive(&detached_script(spec))?;
        match out.status {
            super::LOG_NOT_A_FILE_STATUS => Err(ExecError::Command(format!(
                "ssh {}: the log {} {}",
                self.spec,
                spec.log,
                super::NOT_A_FILE
            ))),
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
            _ => super::launched_pid(&out.stdout_text()).ok_or_else(|| {
                ExecError::Command(format!(
                    "ssh {}: launching gave no pid (stdout '{}', stderr '{}')",
                    self.spec,
                    out.stdout_text()
                        .trim()
                        .chars()
                        .take(200)
                        .collect::<String>(),
                    out.stderr_text()
                ))
            }),
        }
    }

    fn read_tail(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, ExecError> {
        let q = shell_quote(path);
        let out = self.primitive(&format!("[ -e {q} ] || exit 44; tail -c {max_bytes} {q}"))?;
        match out.status {
            0 => Ok(Some(out.stdout)),
            // Gone, or vanished while reading (a /proc entry of an exiting process).
            _ => Ok(None),
        }
    }

    fn processes(&self, marker: Option<&str>) -> Result<ProcTable, ExecError> {
        let out = self.primitive(&snapshot_script(marker))?;
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
        let out = self.primitive(&script)?;
        Ok(out
            .stdout_text()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    fn listeners(&self, port: u16) -> Result<Listeners, ExecError> {
        let out = self.primitive("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")?;
        let text = out.stdout_text();
        // The two tables concatenated: each has its own header line, which never parses.
        let inodes: Vec<u64> = parse_listen_inodes(&format!("\n{text}"), port);
        let mut pids = Vec::new();
        if !inodes.is_empty() {
            let names: Vec<String> = inodes
                .iter()
                .map(|i| format!("-lname 'socket:\\[{i}\\]'"))
                .collect();
            let out = self.primitive(&format!(
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
        let out = self.primitive(&format!("cat {PORT_TABLES} 2>/dev/null"))?;
        if let Some(port) = pick_free_port(&out.stdout_text()) {
            return Ok(port);
        }
        Err(ExecError::Command(format!(
            "ssh {}: no free port found",
            self.spec
        )))
    }
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
    // A zombie leader's threads: one not yet dead means the process is still exiting.
    s.push_str(
        "printf '\\n--tasks--\\n'; for f in $(grep -l ') Z ' /proc/[0-9]*/stat 2>/dev/null); do \
         grep -H '' \"${f%/stat}\"/task/*/stat 2>/dev/null; done; true",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::Local;

    #[test]
    fn local_snapshot_sees_itself_and_the_remote_parser_agrees() {
        let local = Local.processes(None).unwrap();
        let me = local.get(std::process::id()).expect("own pid in table");
        assert!(me.start_ticks > 0);
        // The remote path's script and parser, run here through sh.
        let out = Local
            .run(&snapshot_script(None), Bounds::PRIMITIVE)
            .unwrap();
        let remote = parse_snapshot(&out.stdout);
        let me2 = remote.get(std::process::id()).expect("own pid via script");
        assert_eq!(me.start_ticks, me2.start_ticks);
        assert_eq!(me.argv, me2.argv);
        assert!(remote.self_pid > 0 && remote.get(remote.self_pid).is_some());
    }
}
