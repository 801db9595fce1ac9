//! What one request's stream reads from the engine ([`Progress`]: how many tokens exist so far)
//! and when the engine did what with it ([`ReqTimes`]: the truth `--enable-per-request-metrics`
//! reports), and the future that waits for a count of tokens.

use futures_util::task::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;

/// When the engine queued, first scheduled, and published the first and the last tokens of
/// one request (vLLM's `queued_ts`, `scheduled_ts`, `first_token_ts`, `last_token_ts`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ReqTimes {
    pub queued: Option<Instant>,
    pub scheduled: Option<Instant>,
    pub first: Option<Instant>,
    pub last: Option<Instant>,
}

#[derive(Debug)]
pub struct Progress {
    pub available: AtomicU32,
    pub total: u32,
    pub waker: AtomicWaker,
    /// Set by the HTTP side when the client went away; the engine frees the request's slot.
    pub cancelled: AtomicBool,
    pub times: Mutex<ReqTimes>,
}

impl Progress {
    pub fn new(total: u32) -> Arc<Progress> {
        Arc::new(Progress {
            available: AtomicU32::new(0),
            total,
            waker: AtomicWaker::new(),
            cancelled: AtomicBool::new(false),
            times: Mutex::new(ReqTimes::default()),
        })
    }

    pub(crate) fn publish(&self, available: u32) {
        self.available.store(available, Ordering::Release);
        self.waker.wake();
    }

    fn times(&self) -> std::sync::MutexGuard<'_, ReqTimes> {
        self.times.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The engine scheduled the request at `at` (the first time only, as vLLM's
    /// `scheduled_ts`; a preempted request keeps its first); it was queued at `arrival`.
    pub fn scheduled(&self, arrival: Instant, at: Instant) {
        let mut t = self.times();
        if t.scheduled.is_none() {
            t.queued = Some(arrival);
            t.scheduled = Some(at.max(arrival));
        }
    }

    /// Tokens were published at `now`.
    pub fn tokens_at(&self, now: Instant) {
        let mut t = self.times();
        t.first.get_or_insert(now);
        t.last = Some(now);
    }

    pub fn read_times(&self) -> ReqTimes {
        *self.times()
    }
}

/// Resolves once the engine has published `count` tokens.
pub struct WaitFor<'a> {
    pub progress: &'a Progress,
    pub count: u32,
}

impl Future for WaitFor<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.progress.available.load(Ordering::Acquire) >= self.count {
            return Poll::Ready(());
        }
        self.progress.waker.register(cx.waker());
        if self.progress.available.load(Ordering::Acquire) >= self.count {
            return Poll::Ready(());
        }
        Poll::Pending
    }
}
