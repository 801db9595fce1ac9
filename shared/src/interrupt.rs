//! Ctrl-C and SIGTERM for a tool in the middle or at the end of a pipeline.
//!
//! A terminal's Ctrl-C reaches every process of a pipeline at once. A tool that holds work for
//! its input (srv-kill holding `server` records, summarize holding points, loadgen passing its
//! upstream on) must not die with it: the first signal means "upstream is stopping", so it reads
//! on until its input ends, does its job with what arrived, and exits 130. A second signal, or
//! no end of input within the drain bound (`--drain-wait`, 30 s), stops the reading at once: the
//! input then ends where it is (at a line's end), and the tool does its job with what it holds.
//!
//! [`catch`] installs the handlers (once per process); [`on_signal`] runs a tool's own reaction
//! on a thread of its own (never in the handler); [`count`] says how many came. Stdin read while
//! caught is a [`DrainingStdin`] (`jsonl::stdin_reader` picks it).

use std::io::{self, BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

/// How long a tool keeps reading for the end of its input after the first Ctrl-C, by default.
/// Longer than loadgen's default `--grace` (5 s), so a loadgen upstream has its partial summary
/// written before anything downstream gives up on it.
pub const DRAIN_WAIT: Duration = Duration::from_secs(30);

static SIGNALS: AtomicUsize = AtomicUsize::new(0);
/// The write end of the self-pipe the handler wakes the watcher through (-1 before [`catch`]).
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);
static CAUGHT: AtomicBool = AtomicBool::new(false);
/// The drain bound in milliseconds, set by [`catch`].
static DRAIN_WAIT_MS: AtomicU64 = AtomicU64::new(30_000);
static INSTALL: Once = Once::new();

type Subscriber = Box<dyn FnMut(usize) -> bool + Send>;
static SUBSCRIBERS: Mutex<Vec<Subscriber>> = Mutex::new(Vec::new());

/// A signal sent with kill(2) by the same process as the last one, within this long of it, is
/// the same delivery twice: GNU `timeout` (and CI runners, `kill 0` wrappers) signal the child
/// and then its whole process group, so the child gets two TERMs at once. Counted as a second
/// signal, that would be "quit now", and the partial summary the first asked for would be lost.
/// A terminal's Ctrl-C comes from the kernel, never from a pid: pressed twice, it counts twice.
pub const SAME_DELIVERY: Duration = Duration::from_secs(1);

/// The last counted kill(2)-sent signal: `signal << 32 | sender pid` (0: none), and when
/// (CLOCK_MONOTONIC, ms).
static LAST_SENDER: AtomicU64 = AtomicU64::new(0);
static LAST_SENT_MS: AtomicU64 = AtomicU64::new(0);

/// True when this signal repeats the last counted one (see [`SAME_DELIVERY`]). Async-signal-safe:
/// atomics and clock_gettime(2) only.
///
/// # Safety
/// `info` is the siginfo the kernel handed an `SA_SIGINFO` handler.
unsafe fn repeats_the_last(signal: libc::c_int, info: *const libc::siginfo_t) -> bool {
    if info.is_null() {
        return false;
    }
    // SAFETY: the caller's siginfo; si_pid is meaningful for SI_USER and SI_QUEUE.
    let (code, pid) = unsafe { ((*info).si_code, (*info).si_pid()) };
    if !(code == libc::SI_USER || code == libc::SI_QUEUE) || pid <= 0 {
        LAST_SENDER.store(0, Ordering::SeqCst);
        return false;
    }
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) is async-signal-safe and writes only `now`.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let now_ms = (now.tv_sec as u64) * 1000 + (now.tv_nsec as u64) / 1_000_000;
    let sender = ((signal as u64) << 32) | pid as u64;
    let same = LAST_SENDER.load(Ordering::SeqCst) == sender
        && now_ms.saturating_sub(LAST_SENT_MS.load(Ordering::SeqCst))
            < SAME_DELIVERY.as_millis() as u64;
    if !same {
        LAST_SENDER.store(sender, Ordering::SeqCst);
        LAST_SENT_MS.store(now_ms, Ordering::SeqCst);
    }
    same
}

extern "C" fn on_interrupt(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    _context: *mut libc::c_void,
) {
    // Only async-signal-safe work: atomics, the clock and one write(2), errno kept for whoever
    // we cut into.
    // SAFETY: __errno_location is this thread's errno; write(2) is async-signal-safe; `info`
    // is the kernel's siginfo for this SA_SIGINFO handler.
    unsafe {
        let errno = *libc::__errno_location();
        if repeats_the_last(signal, info) {
            *libc::__errno_location() = errno;
            return;
        }
        SIGNALS.fetch_add(1, Ordering::SeqCst);
        let fd = PIPE_WRITE.load(Ordering::SeqCst);
        if fd >= 0 {
            let byte = 1u8;
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
        *libc::__errno_location() = errno;
    }
}

/// Catches SIGINT and SIGTERM for the rest of the process (later calls only set `drain_wait`):
/// each is counted and handed to the [`on_signal`] subscribers, and stdin read through
/// `jsonl::stdin_reader` drains (see the module). Programs this process starts get the
/// default handlers back at exec.
pub fn catch(drain_wait: Duration) {
    DRAIN_WAIT_MS.store(
        u64::try_from(drain_wait.as_millis()).unwrap_or(u64::MAX),
        Ordering::SeqCst,
    );
    INSTALL.call_once(|| {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: plain syscalls on fds this function owns; the handler is async-signal-safe.
        unsafe {
            if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                crate::diag::warn(format!(
                    "cannot catch Ctrl-C (pipe: {}): it ends this tool at once",
                    io::Error::last_os_error()
                ));
                return;
            }
            // The handler must never block, even if nobody read the pipe for a while.
            let flags = libc::fcntl(fds[1], libc::F_GETFL);
            libc::fcntl(fds[1], libc::F_SETFL, flags | libc::O_NONBLOCK);
            PIPE_WRITE.store(fds[1], Ordering::SeqCst);
            let read_fd = fds[0];
            std::thread::Builder::new()
                .name("interrupts".into())
                .spawn(move || watch(read_fd))
                .expect("spawning the signal watcher");
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_interrupt
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
                as libc::sighandler_t;
            // Restarted: a blocking read of stdin goes on after the first signal. SA_SIGINFO:
            // who sent it (see SAME_DELIVERY).
            action.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            for sig in [libc::SIGINT, libc::SIGTERM] {
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
        CAUGHT.store(true, Ordering::SeqCst);
    });
}

/// The watcher: one byte per signal, each handed to every subscriber with the count so far.
fn watch(read_fd: libc::c_int) {
    let mut seen = 0usize;
    let mut buf = [0u8; 64];
    loop {
        // SAFETY: reading into a buffer we own from the pipe's read end, which we own.
        let n = unsafe { libc::read(read_fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return;
        }
        if n == 0 {
            return;
        }
        for _ in 0..n {
            seen += 1;
            let mut subs = SUBSCRIBERS.lock().unwrap_or_else(|e| e.into_inner());
            subs.retain_mut(|f| f(seen));
        }
    }
}

/// True once [`catch`] installed the handlers.
pub fn caught() -> bool {
    CAUGHT.load(Ordering::SeqCst)
}

/// SIGINTs and SIGTERMs received since [`catch`].
pub fn count() -> usize {
    SIGNALS.load(Ordering::SeqCst)
}

/// True when at least one came: the tool exits 130 once its job is done.
pub fn interrupted() -> bool {
    count() > 0
}

/// The drain bound given to [`catch`].
pub fn drain_wait() -> Duration {
    Duration::from_millis(DRAIN_WAIT_MS.load(Ordering::SeqCst))
}

/// Calls `f(n)` for the n-th signal (1 for the first) on the watcher thread, for every signal
/// from now on while `f` returns true. `f` may do anything but block for long.
pub fn on_signal(f: impl FnMut(usize) -> bool + Send + 'static) {
    SUBSCRIBERS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Box::new(f));
}

/// What the stdin reader thread hands over.
enum Event {
    Data(Vec<u8>),
    End(io::Result<()>),
    /// A signal came: look at [`count`] again.
    Signal,
}

/// Why reading stopped before the input ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeftEarly {
    /// A second Ctrl-C/SIGTERM.
    SecondSignal,
    /// The input did not end within the drain bound after the first.
    NoEnd(Duration),
}

/// Stdin as a `BufRead` that follows the drain rule (see the module): read on a thread of its
/// own and handed over whole lines at a time, so reading can stop at once, at a line's end,
/// while that thread is still blocked in `read(2)`. Memory is bounded (a few chunks in flight).
pub struct DrainingStdin {
    rx: Receiver<Event>,
    /// Bytes received but not yet handed over: the tail of the last chunk after its last newline.
    pending: Vec<u8>,
    ready: Vec<u8>,
    pos: usize,
    deadline: Option<Instant>,
    done: bool,
    left: Option<LeftEarly>,
}

/// Chunks read ahead of the consumer.
const CHUNKS_AHEAD: usize = 8;
const CHUNK: usize = 1 << 16;
/// The most of an unfinished line held back (to be dropped whole if the reading stops).
const HELD_TAIL_MAX: usize = 1 << 20;

impl DrainingStdin {
    pub fn new() -> DrainingStdin {
        let (tx, rx) = mpsc::sync_channel::<Event>(CHUNKS_AHEAD);
        let wake = tx.clone();
        on_signal(move |_| match wake.try_send(Event::Signal) {
            // Full: the reader has data waiting, and looks at the count before blocking again.
            Ok(()) | Err(TrySendError::Full(_)) => true,
            Err(TrySendError::Disconnected(_)) => false,
        });
        std::thread::Builder::new()
            .name("stdin".into())
            .spawn(move || read_stdin(tx))
            .expect("spawning the stdin reader");
        DrainingStdin {
            rx,
            pending: Vec::new(),
            ready: Vec::new(),
            pos: 0,
            deadline: None,
            done: false,
            left: None,
        }
    }

    /// Why reading stopped before the end of the input, once it did.
    pub fn left_early(&self) -> Option<LeftEarly> {
        self.left
    }

    /// Stops reading (called once what was handed over is used up): what the reader thread
    /// already took from the pipe is still handed over, to its last whole line.
    fn leave(&mut self, why: LeftEarly) {
        self.done = true;
        self.left = Some(why);
        while let Ok(event) = self.rx.try_recv() {
            if let Event::Data(bytes) = event {
                self.pending.extend_from_slice(&bytes);
            }
        }
        // A line cut by the stop is not a record: dropped, not reported as malformed.
        let whole = self
            .pending
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        self.pending.truncate(whole);
        self.ready = std::mem::take(&mut self.pending);
        self.pos = 0;
        let what = match why {
            LeftEarly::SecondSignal => "a second Ctrl-C/SIGTERM".to_string(),
            LeftEarly::NoEnd(d) => format!(
                "no end of input within {} of the Ctrl-C (--drain-wait)",
                humantime::format_duration(d)
            ),
        };
        crate::diag::warn(format!(
            "{what}: stopped reading stdin; going on with what arrived"
        ));
    }

    /// Waits for the next event, or decides to stop reading; false once reading is over and
    /// everything was handed over.
    fn next_event(&mut self) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        let n = count();
        if n >= 2 {
            self.leave(LeftEarly::SecondSignal);
            return Ok(true);
        }
        if n == 1 && self.deadline.is_none() {
            self.deadline = Some(Instant::now() + drain_wait());
        }
        let event = match self.deadline {
            Some(d) => match self
                .rx
                .recv_timeout(d.saturating_duration_since(Instant::now()))
            {
                Ok(e) => e,
                Err(RecvTimeoutError::Timeout) => {
                    self.leave(LeftEarly::NoEnd(drain_wait()));
                    return Ok(true);
                }
                Err(RecvTimeoutError::Disconnected) => Event::End(Ok(())),
            },
            None => self.rx.recv().unwrap_or(Event::End(Ok(()))),
        };
        match event {
            Event::Data(bytes) => {
                self.pending.extend_from_slice(&bytes);
                if let Some(i) = self.pending.iter().rposition(|&b| b == b'\n') {
                    let rest = self.pending.split_off(i + 1);
                    self.ready = std::mem::replace(&mut self.pending, rest);
                    self.pos = 0;
                } else if self.pending.len() >= HELD_TAIL_MAX {
                    // A line this long is handed over as it comes: the reader's own line bound
                    // judges it, and nothing grows here.
                    self.ready = std::mem::take(&mut self.pending);
                    self.pos = 0;
                }
            }
            Event::End(result) => {
                self.done = true;
                self.ready = std::mem::take(&mut self.pending);
                self.pos = 0;
                result?;
            }
            Event::Signal => {}
        }
        Ok(true)
    }
}

impl Default for DrainingStdin {
    fn default() -> Self {
        DrainingStdin::new()
    }
}

fn read_stdin(tx: SyncSender<Event>) {
    let mut stdin = io::stdin();
    loop {
        let mut buf = vec![0u8; CHUNK];
        let event = match stdin.read(&mut buf) {
            Ok(0) => Event::End(Ok(())),
            Ok(n) => {
                buf.truncate(n);
                Event::Data(buf)
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => Event::End(Err(e)),
        };
        let end = matches!(event, Event::End(_));
        if tx.send(event).is_err() || end {
            return;
        }
    }
}

impl Read for DrainingStdin {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for DrainingStdin {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        while self.pos >= self.ready.len() {
            if !self.next_event()? && self.pos >= self.ready.len() {
                return Ok(&[]);
            }
        }
        Ok(&self.ready[self.pos..])
    }

    fn consume(&mut self, amt: usize) {
        self.pos = (self.pos + amt).min(self.ready.len());
    }
}
