//! The reader of loadgen's stdout. A pipeline's next tool can exit (`loadgen | head -1`), and
//! an SSH session carrying a remote loadgen's output can close (multi-host-load.sh after
//! Ctrl-C); either way nothing loadgen measures can be delivered any more, so it stops at once
//! instead of loading the server until the next record fails to write (which, with long
//! requests or `--no-requests`, can be the end of the point).

use crate::stop::Stop;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// How often the watch looks (a poll(2) with this timeout; it costs nothing meanwhile).
const EVERY_MS: i32 = 200;

/// Watches stdout on a thread of its own until dropped; pulls the stop hard when the reading
/// end is gone.
pub struct Watch {
    done: Arc<AtomicBool>,
}

impl Watch {
    pub fn start(stop: Stop) -> Watch {
        let done = Arc::new(AtomicBool::new(false));
        let seen = done.clone();
        let spawned = std::thread::Builder::new()
            .name("stdout-watch".into())
            .spawn(move || {
                while !seen.load(Ordering::Relaxed) {
                    if reader_gone(libc::STDOUT_FILENO, EVERY_MS) {
                        stop.abort();
                        return;
                    }
                }
            });
        // Without the thread loadgen still stops at its next record that fails to write.
        drop(spawned);
        Watch { done }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Waits up to `timeout_ms` for `fd`'s reading end to go away. A pipe whose readers all closed
/// reports POLLERR and a socket whose peer closed POLLHUP, whatever events are asked for (none
/// here); a file or terminal reports neither and the wait just times out.
pub fn reader_gone(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd we own; the fd is only examined, not used.
    let n = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    n > 0 && p.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_pipe_without_readers_is_seen_and_a_read_one_is_not() {
        let mut fds = [0i32; 2];
        // SAFETY: pipe(2) fills the two descriptors, which this test closes.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let [reader, writer] = fds;
        assert!(!reader_gone(writer, 0));
        // SAFETY: closing descriptors this test opened.
        unsafe { libc::close(reader) };
        assert!(reader_gone(writer, 0));
        unsafe { libc::close(writer) };
        let file = tempfile::tempfile().unwrap();
        assert!(!reader_gone(file.as_raw_fd(), 0));
    }
}
