//! The requests of a phase once the dispatcher started them: each one sent bounded by
//! `--timeout` from its intended send and cancelled with the phase ([`execute`]), handed to
//! the collector with its slot freed ([`deliver`]). A session of turns (a conversation) sends
//! its requests through the same [`InFlight`] lane.

use super::http::{Failure, Pool};
use super::request::{Outcome, stream_into};
use crate::stop::Stop;
use bytes::Bytes;
use servbench::load::eval::Expected;
use servbench::record::ErrorClass;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

/// A slot whose request could not connect waits this long before it is used again, so a
/// dead server is not sent thousands of requests a second while `health` makes sure.
const CONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// A request that finished (or failed, or was cancelled).
pub struct Finished {
    pub id: u64,
    pub intended: Instant,
    pub dispatched: Instant,
    pub outcome: Outcome,
    pub target: Option<u32>,
    pub max_tokens: u32,
    /// Conversations: (session, turn from 1).
    pub turn: Option<(u64, u32)>,
    /// `--eval`: the question it asked.
    pub question: Option<Arc<Expected>>,
}

/// What each request task of a phase shares, behind one reference count.
pub struct InFlight {
    pub(crate) pool: Arc<Pool>,
    pub(crate) api: crate::client::wire::Api,
    pub(crate) stream: bool,
    pub(crate) timeout: Duration,
    /// `--record-text`: every reply's text is kept, piece by piece, for its record.
    pub(crate) record_text: bool,
    /// Dropped with the last task: the phase's collector then ends.
    pub tx: mpsc::UnboundedSender<Finished>,
    /// Set, with the reason, when in-flight requests are to be cancelled.
    pub(crate) cancel_rx: watch::Receiver<Option<&'static str>>,
    /// The phase's stop and the run's: a conversation sends no further turn after either.
    pub(crate) halt: Stop,
    pub(crate) stop: Stop,
    /// Conversations: requests started in the phase (their ids; sessions count the units).
    pub requests: AtomicU64,
}

/// What the dispatcher hands a unit with: its id in the phase, when it was meant to leave,
/// its slot, and the phase's time budget end.
pub struct Slot {
    pub id: u64,
    pub intended: Instant,
    /// The closed-loop (or `--max-concurrency`) slot, freed when the request (or session) ends.
    pub permit: Option<OwnedSemaphorePermit>,
    /// A time budget's end: no unit (or further turn) starts after it.
    pub end: Option<Instant>,
}

impl InFlight {
    pub fn stopped(&self) -> bool {
        self.halt.is_stopped() || self.stop.is_stopped()
    }

    /// Waits until `deadline` as the dispatcher does; false when a stop came first.
    pub async fn wait_until(&self, deadline: Instant) -> bool {
        wait_until(
            deadline,
            || self.stopped(),
            || halted(&self.halt, &self.stop),
        )
        .await
    }
}

pub(crate) async fn halted(halt: &Stop, stop: &Stop) {
    tokio::select! {
        _ = halt.wait() => {}
        _ = stop.wait() => {}
    }
}

/// Waits until `deadline` without the runtime timer's millisecond rounding: the timer sleeps
/// to within 1.5 ms, then the task yields (letting every other task and the I/O driver run)
/// until the deadline passes. False when a stop came first.
pub(crate) async fn wait_until<F: std::future::Future<Output = ()>>(
    deadline: Instant,
    stopped: impl Fn() -> bool,
    halted: impl Fn() -> F,
) -> bool {
    const COARSE: Duration = Duration::from_micros(1500);
    loop {
        if stopped() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        if deadline - now > COARSE {
            tokio::select! {
                _ = tokio::time::sleep_until((deadline - COARSE).into()) => {}
                _ = halted() => return false,
            }
        } else {
            tokio::task::yield_now().await;
        }
    }
}

/// One request of a phase, start to collector: its prompt's target length and its
/// `max_tokens`, and when it is abandoned on purpose (`--cancel-rate`), how long after it left.
pub(crate) async fn request_task(
    shared: Arc<InFlight>,
    slot: Slot,
    body: Bytes,
    (target, max_tokens): (Option<u32>, u32),
    abandon: Option<Duration>,
    question: Option<Arc<Expected>>,
) {
    // An eval answer is judged by its text, and its record carries it.
    let o = if shared.record_text || question.is_some() {
        Outcome::recording(max_tokens)
    } else {
        Outcome::expecting(max_tokens)
    };
    let (o, dispatched, cancelled) = execute(&shared, body, slot.intended, o, abandon).await;
    let finished = Finished {
        id: slot.id,
        intended: slot.intended,
        dispatched,
        outcome: o,
        target,
        max_tokens,
        turn: None,
        question,
    };
    deliver(&shared, finished, slot.permit, cancelled).await;
}

/// Hands a finished request to the collector and frees its slot: after a failure to connect,
/// a moment later (see CONNECT_BACKOFF), unless the phase is being cancelled.
pub async fn deliver(
    shared: &InFlight,
    finished: Finished,
    permit: Option<OwnedSemaphorePermit>,
    cancelled: bool,
) {
    let connect_failed =
        matches!(&finished.outcome.failure, Some(f) if f.class == ErrorClass::Connect);
    if connect_failed && permit.is_some() && !cancelled {
        let _ = shared.tx.send(finished);
        let mut cancel_rx = shared.cancel_rx.clone();
        tokio::select! {
            _ = tokio::time::sleep(CONNECT_BACKOFF) => {}
            _ = cancel_rx.wait_for(Option::is_some) => {}
        }
        drop(permit);
    } else {
        drop(permit);
        let _ = shared.tx.send(finished);
    }
}

/// Sends one request meant to leave at `intended` and reads its answer, bounded by `--timeout`
/// from `intended` and cancelled with the phase: its outcome (read into `o`: with a `reply`,
/// the answer's text is collected into it), when it really left, and whether the phase
/// cancelled it. With `abandon`, the client disconnects that long after it left unless the
/// answer was whole by then (`--cancel-rate`): no failure, `o.abandoned_after` says so.
pub async fn execute(
    shared: &InFlight,
    body: Bytes,
    intended: Instant,
    mut o: Outcome,
    abandon: Option<Duration>,
) -> (Outcome, Instant, bool) {
    let dispatched = Instant::now();
    let mut cancel_rx = shared.cancel_rx.clone();
    let deadline = tokio::time::Instant::from_std(intended + shared.timeout);
    let work = tokio::time::timeout_at(
        deadline,
        stream_into(&shared.pool, shared.api, body, shared.stream, &mut o),
    );
    let abandon_at = abandon.map(|d| tokio::time::Instant::from_std(dispatched + d));
    let cancelled = tokio::select! {
        r = work => {
            if r.is_err() {
                o.end = Instant::now();
                o.failure = Some(Failure::new(
                    ErrorClass::Timeout,
                    format!(
                        "no complete answer within --timeout {}s",
                        shared.timeout.as_secs_f64()
                    ),
                ));
            }
            false
        }
        // Dropping the request's future drops its connection: the server sees the disconnect.
        _ = sleep_until_some(abandon_at), if abandon_at.is_some() => {
            o.end = Instant::now();
            o.abandoned_after = abandon;
            false
        }
        why = cancel_rx.wait_for(Option::is_some) => {
            o.end = Instant::now();
            let why = why.ok().and_then(|w| *w).unwrap_or("cancelled");
            o.failure = Some(Failure::new(ErrorClass::Interrupted, why));
            true
        }
    };
    (o, dispatched, cancelled)
}

/// Sleeps until `t`, or forever without one.
pub(crate) async fn sleep_until_some(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
