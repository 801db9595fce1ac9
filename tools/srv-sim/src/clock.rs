//! The engine's clock, a seam: the modelled step loop asks it what time it is, waits on it for a
//! step's deadline and takes arriving requests from it. [`WallClock`] is the server's: the
//! monotonic clock, waited on with the channel's timed receive, and requests from the HTTP side.
//! `--predict` runs the same loop on a virtual clock (`predict`'s load module) that jumps to each
//! deadline at once and makes the requests of a modelled client: the engine is one engine, in
//! real or virtual time.

use crate::step::Submit;
use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

/// Time and arrivals, as the step loop sees them.
pub trait Clock {
    /// Now.
    fn now(&mut self) -> Instant;
    /// The engine is idle: blocks until a request arrives and queues it. False when no request
    /// will ever come (the server is gone, or the modelled load is over).
    fn wait_for_work(&mut self, inbox: &mut VecDeque<Submit>) -> bool;
    /// Queues the requests that have arrived by now, without waiting.
    fn poll(&mut self, inbox: &mut VecDeque<Submit>);
    /// Waits until `deadline` (a step's end), queueing requests that arrive meanwhile. False
    /// when the server is gone.
    fn wait_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> bool;
    /// Waits until a request arrives (queued) or `deadline` passes, whichever is first: a
    /// pipeline with a free stage takes new work before its rounds in flight are back.
    fn wait_for_work_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> Wake;
}

/// Why [`Clock::wait_for_work_until`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A request arrived before the deadline.
    Work,
    /// The deadline passed first.
    Deadline,
    /// The server is gone.
    Gone,
}

/// The server's clock: `Instant` and the HTTP side's channel.
pub struct WallClock {
    pub rx: Receiver<Submit>,
}

impl Clock for WallClock {
    fn now(&mut self) -> Instant {
        Instant::now()
    }

    fn wait_for_work(&mut self, inbox: &mut VecDeque<Submit>) -> bool {
        match self.rx.recv() {
            Ok(s) => {
                inbox.push_back(s);
                true
            }
            Err(_) => false,
        }
    }

    fn poll(&mut self, inbox: &mut VecDeque<Submit>) {
        inbox.extend(self.rx.try_iter());
    }

    fn wait_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> bool {
        wait_until(&self.rx, deadline, Duration::ZERO, inbox)
    }

    fn wait_for_work_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> Wake {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(s) => {
                inbox.push_back(s);
                Wake::Work
            }
            Err(RecvTimeoutError::Timeout) => Wake::Deadline,
            Err(RecvTimeoutError::Disconnected) => Wake::Gone,
        }
    }
}

/// Waits until `deadline`, queueing requests that arrive meanwhile; the last `spin` of the wait
/// is spent polling instead of sleeping. False when the server is gone.
pub fn wait_until(
    rx: &Receiver<Submit>,
    deadline: Instant,
    spin: Duration,
    inbox: &mut VecDeque<Submit>,
) -> bool {
    loop {
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        let left = deadline - now;
        if left <= spin {
            match rx.try_recv() {
                Ok(s) => inbox.push_back(s),
                Err(TryRecvError::Empty) => std::hint::spin_loop(),
                Err(TryRecvError::Disconnected) => return false,
            }
            continue;
        }
        match rx.recv_timeout(left - spin) {
            Ok(s) => inbox.push_back(s),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return false,
        }
    }
}

/// A borrowed clock is a clock: a caller keeps its virtual clock (and what it recorded) after
/// the step loop is done with it.
impl<T: Clock + ?Sized> Clock for &mut T {
    fn now(&mut self) -> Instant {
        (**self).now()
    }

    fn wait_for_work(&mut self, inbox: &mut VecDeque<Submit>) -> bool {
        (**self).wait_for_work(inbox)
    }

    fn poll(&mut self, inbox: &mut VecDeque<Submit>) {
        (**self).poll(inbox)
    }

    fn wait_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> bool {
        (**self).wait_until(deadline, inbox)
    }

    fn wait_for_work_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> Wake {
        (**self).wait_for_work_until(deadline, inbox)
    }
}
