//! Every run of another program is bounded: a deadline, past which the program's whole process
//! group gets SIGTERM and, [`KILL_GRACE`] later, SIGKILL; and a cap on each output stream,
//! past which the rest is cut ([`super::Output::cut`]) and the program killed the same way.
//! Outside programs (nvidia-smi on a wedged driver, an engine's `--version`) are not trusted
//! to be quick, small or to obey SIGTERM.
//!
//! Here, the program runs in a process group of its own (`sh -c` as its leader), read through
//! poll(2) so neither a silent nor an endless program holds the caller. Over SSH
//! ([`remote_script`]), the remote `timeout -k` (coreutils, busybox) does the same to the
//! remote group, and the output cap is applied as the channel is read.

use super::{ExecError, Output};
use std::os::fd::{AsRawFd, RawFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Between SIGTERM and SIGKILL when a program is stopped.
pub const KILL_GRACE: Duration = Duration::from_secs(2);

/// How long a run may take and how much of its output is kept.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Past this the program's group is killed and the run is [`ExecError::TimedOut`].
    pub deadline: Duration,
    /// Bytes kept of stdout, and of stderr; past either the program is killed and the output
    /// marked [`Output::cut`].
    pub output_cap: usize,
    /// When set (a signal handler's flag), the program is stopped as at the deadline.
    pub stop: Option<&'static AtomicBool>,
}

impl Bounds {
    /// A short query of the host (nvidia-smi, `command -v`, `uname`): 10 s, 1 MiB.
    pub const QUERY: Bounds = Bounds::new(Duration::from_secs(10), 1 << 20);
    /// The process layer's primitives over SSH (a process table snapshot, a signal loop):
    /// 60 s, 256 MiB.
    pub const PRIMITIVE: Bounds = Bounds::new(Duration::from_secs(60), 256 << 20);

    pub const fn new(deadline: Duration, output_cap: usize) -> Bounds {
        Bounds {
            deadline,
            output_cap,
            stop: None,
        }
    }

    pub fn with_deadline(self, deadline: Duration) -> Bounds {
        Bounds { deadline, ..self }
    }

    pub fn with_output_cap(self, output_cap: usize) -> Bounds {
        Bounds { output_cap, ..self }
    }

    /// Stopped early when `flag` is set.
    pub fn stopped_by(self, flag: &'static AtomicBool) -> Bounds {
        Bounds {
            stop: Some(flag),
            ..self
        }
    }

    fn stop_asked(&self) -> bool {
        self.stop.is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// The error for a run of `what` that passed the deadline.
    pub fn timed_out(&self, what: &str) -> ExecError {
        ExecError::TimedOut(format!(
            "{what} did not finish within {:?} (stopped with SIGTERM, then SIGKILL)",
            self.deadline
        ))
    }
}

/// Runs `script` with `sh -c` on this machine within `bounds`.
pub fn run_local(script: &str, bounds: Bounds) -> Result<Output, ExecError> {
    use std::os::unix::process::CommandExt;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ExecError::io("cannot run sh", e))?;
    let pgid = child.id() as i32;
    let deadline = Instant::now() + bounds.deadline;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let mut streams = [
        Stream::new(stdout.as_ref().map(|s| s.as_raw_fd())),
        Stream::new(stderr.as_ref().map(|s| s.as_raw_fd())),
    ];
    let mut out = Output::default();
    let mut stopped = false;
    // Read until both streams end, the cap is passed, the deadline or a stop.
    while streams.iter().any(|s| s.fd.is_some()) {
        if Instant::now() >= deadline || bounds.stop_asked() {
            stopped = true;
            break;
        }
        pump(&mut streams, bounds.output_cap, Duration::from_millis(50));
        if streams.iter().any(|s| s.cut) {
            out.cut = true;
            break;
        }
    }
    let status = if out.cut || stopped {
        stop_group(pgid, &mut child)
    } else {
        // Both streams ended: the program has exited or is about to.
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                break Some(status);
            }
            if Instant::now() >= deadline || bounds.stop_asked() {
                stopped = true;
                break stop_group(pgid, &mut child);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    drop((stdout, stderr));
    if stopped {
        if bounds.stop_asked() {
            return Err(ExecError::TimedOut("stopped by a signal".into()));
        }
        return Err(bounds.timed_out(&format!("'{}'", first_words(script))));
    }
    let [o, e] = streams;
    out.stdout = o.buf;
    out.stderr = e.buf;
    out.status = status.and_then(|s| s.code()).unwrap_or(-1);
    Ok(out)
}

/// One output stream being read.
struct Stream {
    fd: Option<RawFd>,
    buf: Vec<u8>,
    cut: bool,
}

impl Stream {
    fn new(fd: Option<RawFd>) -> Stream {
        Stream {
            fd,
            buf: Vec::new(),
            cut: false,
        }
    }
}

/// Waits up to `wait` for output on the open streams and reads what is there.
fn pump(streams: &mut [Stream; 2], cap: usize, wait: Duration) {
    let mut fds: Vec<libc::pollfd> = streams
        .iter()
        .filter_map(|s| s.fd)
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: poll(2) on descriptors we own, with the array's own length.
    let n = unsafe {
        libc::poll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            wait.as_millis() as i32,
        )
    };
    if n <= 0 {
        return;
    }
    let mut chunk = [0u8; 64 * 1024];
    for pfd in fds.iter().filter(|p| p.revents != 0) {
        let Some(s) = streams.iter_mut().find(|s| s.fd == Some(pfd.fd)) else {
            continue;
        };
        // SAFETY: read(2) into our own buffer; poll said it will not block.
        let got = unsafe { libc::read(pfd.fd, chunk.as_mut_ptr().cast(), chunk.len()) };
        if got <= 0 {
            // End of the stream (or an error, which ends it too).
            s.fd = None;
            continue;
        }
        let got = got as usize;
        let room = cap.saturating_sub(s.buf.len());
        s.buf.extend_from_slice(&chunk[..got.min(room)]);
        if got > room {
            s.cut = true;
        }
    }
}

/// SIGTERM to the group, SIGKILL after [`KILL_GRACE`] to whatever of it is left; reaps the
/// leader.
fn stop_group(pgid: i32, child: &mut Child) -> Option<std::process::ExitStatus> {
    // SAFETY: kill(2) on the group we created; its id stays ours while any member lives.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    let until = Instant::now() + KILL_GRACE;
    let mut status = None;
    while Instant::now() < until {
        if status.is_none() {
            status = child.try_wait().ok().flatten();
        }
        // SAFETY: signal 0 only asks whether the group still has members.
        if status.is_some() && unsafe { libc::kill(-pgid, 0) } != 0 {
            return status;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    status.or_else(|| child.wait().ok())
}

/// The start of a script, for messages.
fn first_words(script: &str) -> String {
    let s: String = script.chars().take(80).collect();
    if s.len() < script.len() {
        format!("{s}...")
    } else {
        s
    }
}

/// The line a remote host runs for `script` within `deadline`: through `timeout -k` where the
/// host has it (its whole group gets TERM at the deadline, KILL [`KILL_GRACE`] later); where it
/// has not, the SSH command timeout is the only bound.
pub fn remote_script(script: &str, deadline: Duration) -> String {
    let q = super::shell_quote(script);
    let secs = deadline.as_secs().max(1);
    let grace = KILL_GRACE.as_secs();
    format!(
        "if command -v timeout >/dev/null 2>&1; then exec timeout -k {grace} {secs} sh -c {q}; \
         else exec sh -c {q}; fi"
    )
}

/// The statuses `timeout` exits with when it stopped the program (TERM, then KILL).
pub fn is_timeout_status(status: i32) -> bool {
    status == 124 || status == 137
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quick_program_gives_its_output_and_status() {
        let out = run_local("echo out; echo err >&2; exit 3", Bounds::QUERY).unwrap();
        assert_eq!(out.stdout_text(), "out\n");
        assert_eq!(out.stderr_text(), "err");
        assert_eq!(out.status, 3);
        assert!(!out.cut);
    }

    #[test]
    fn a_program_past_its_deadline_is_killed_with_its_group() {
        let started = Instant::now();
        let bounds = Bounds::new(Duration::from_millis(300), 1 << 20);
        // The child ignores TERM and holds the pipe: only KILL to the group ends it.
        let err = run_local("trap '' TERM; sleep 30 & echo $!; wait", bounds).unwrap_err();
        assert!(matches!(err, ExecError::TimedOut(_)), "{err}");
        assert!(err.to_string().contains("did not finish within"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn an_endless_output_is_cut_at_the_cap() {
        let out = run_local("yes", Bounds::new(Duration::from_secs(30), 4096)).unwrap();
        assert!(out.cut);
        assert_eq!(out.stdout.len(), 4096);
        assert!(out.stdout.starts_with(b"y\ny\n"));
    }

    #[test]
    fn remote_lines_go_through_timeout_and_run_here_too() {
        let line = remote_script("echo 'a b'", Duration::from_secs(5));
        assert!(line.contains("timeout -k 2 5 sh -c"), "{line}");
        let out = run_local(&line, Bounds::QUERY).unwrap();
        assert_eq!(out.stdout_text(), "a b\n");
    }
}
