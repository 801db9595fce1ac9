//! The one dispatch loop every load mode feeds: a runtime task that decides each intended send
//! time through [`crate::pacing::next_send`], waits for it precisely and starts the request;
//! finished requests come back to the phase's caller one at a time. Per request it takes one
//! reference count and one spawned task, no lock and no other allocation than the body.

use crate::body::Template;
use crate::exec::{Outcome, stream_into};
use crate::http::{Failure, Pool};
use crate::pacing::{Load, next_send};
use crate::workload::{Entry, PromptText, Synthetic};
use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use servbench::record::ErrorClass;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

pub use crate::stop::Stop;

/// How much of a phase to run.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    Requests(u64),
    Time(Duration),
}

/// Makes request bodies for a point.
pub struct Maker {
    pub template: Arc<Template>,
    /// Output tokens asked for, unless a listed prompt says otherwise.
    pub max_tokens: u32,
    pub source: Source,
    pub seed: u64,
    /// `--max-tokens` was given: it overrides a prompt file's own `max_tokens`.
    pub max_given: bool,
    /// `--prefix-groups`: request `id` of a phase is in group `id % groups` (0: no groups).
    pub groups: u32,
}

/// Where prompts come from: aligned synthetic ones, a list in a shuffled order, a trace's
/// rows, or conversations (each dispatched unit then a whole session).
#[derive(Clone)]
pub enum Source {
    Synthetic(Arc<Synthetic>),
    Listed(Arc<Vec<Entry>>, Arc<Vec<usize>>),
    Trace(Arc<crate::trace::Replay>),
    Sessions(Arc<crate::conversation::Sessions>),
}

/// One request ready to go: its body and what the record should say it asked for.
pub(crate) struct Prepared {
    pub body: Bytes,
    pub target: Option<u32>,
    pub max_tokens: u32,
    /// A trace row's send time, seconds from the trace's start.
    pub at_s: Option<f64>,
    /// A conversation's script: the unit is a session, not one request.
    pub script: Option<crate::conversation::Script>,
}

impl Maker {
    /// The body of one request of `max_tokens` output tokens.
    pub(crate) fn body(&self, prompt: &PromptText, max_tokens: u32) -> Bytes {
        self.template.build(prompt, max_tokens)
    }

    /// The phase's `id`-th unit, the run's `seq`-th (unique across the run).
    fn make(&self, seq: u64, id: u64) -> Prepared {
        match &self.source {
            Source::Synthetic(s) => {
                let group = (self.groups > 0).then(|| (id % u64::from(self.groups)) as u32);
                let text = s.text(Some(seq), group, self.seed);
                Prepared {
                    body: self
                        .template
                        .build(&PromptText::Text(text), self.max_tokens),
                    target: Some(s.target_tokens),
                    max_tokens: self.max_tokens,
                    at_s: None,
                    script: None,
                }
            }
            Source::Trace(t) => t.prepare(id, self),
            Source::Sessions(s) => Prepared {
                body: Bytes::new(),
                target: s.first_target(),
                max_tokens: self.max_tokens,
                at_s: None,
                script: Some(s.script(seq)),
            },
            Source::Listed(entries, order) => {
                let e = &entries[order[(seq % order.len() as u64) as usize]];
                let max_tokens = match e.max_tokens.filter(|_| !self.max_given) {
                    Some(m) => m,
                    None => self.max_tokens,
                };
                Prepared {
                    body: self.template.build(&e.prompt, max_tokens),
                    target: None,
                    max_tokens,
                    at_s: None,
                    script: None,
                }
            }
        }
    }
}

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
}

/// What every phase of a run shares: where requests go, how long they may take, the stop.
#[derive(Clone)]
pub struct Context {
    pub pool: Arc<Pool>,
    /// The API's path (`/v1/completions`).
    pub path: &'static str,
    /// Streaming requests (false: `--no-stream`).
    pub stream: bool,
    pub timeout: Duration,
    pub grace: Duration,
    /// Requests prepared so far in the whole run: synthetic prompts are unique across points.
    pub seq: Arc<AtomicU64>,
    pub stop: Stop,
}

/// One phase: a load, held until its budget is spent.
pub struct Phase {
    pub load: Load,
    pub budget: Budget,
    pub arrival_seed: u64,
    pub maker: Arc<Maker>,
}

/// How a phase ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Its budget was spent.
    Completed,
    /// The run's stop was pulled (Ctrl-C, SIGTERM; or hard, when stdout's reader is gone).
    Stopped,
    /// The server is gone (see [`Health`]): why, in words.
    ServerDown(String),
    /// Another rank of the job died or failed (see [`crate::ranks`]): which, and why.
    RankFailed(String),
}

/// Connections failing for this long, with nothing else finishing in between, is a server
/// that is gone (crashed, killed), not a slow or overloaded one.
pub const DOWN_AFTER: Duration = Duration::from_secs(2);
/// ... and at least this many of them (one slow failure is not a pattern).
const DOWN_MIN_FAILURES: u64 = 3;
/// A slot whose request could not connect waits this long before it is used again, so a
/// dead server is not sent thousands of requests a second while [`Health`] makes sure.
const CONNECT_BACKOFF: Duration = Duration::from_millis(100);

/// Watches finished requests for a server that is gone: every request failing to connect
/// (refused, unreachable) for [`DOWN_AFTER`]. Any other outcome, success or not, proves
/// something answers and starts the watch again.
#[derive(Default)]
pub struct Health {
    /// The first connect failure of the current run of them: when, and its message.
    since: Option<(Instant, String)>,
    failures: u64,
}

impl Health {
    /// Takes one finished request; `Some(reason)` once the server counts as down.
    pub fn observe(&mut self, failure: Option<&Failure>, end: Instant) -> Option<String> {
        let Some(f) = failure.filter(|f| f.class == ErrorClass::Connect) else {
            self.since = None;
            self.failures = 0;
            return None;
        };
        self.failures += 1;
        let (since, first) = self.since.get_or_insert_with(|| (end, f.message.clone()));
        let lasted = end.saturating_duration_since(*since);
        (lasted >= DOWN_AFTER && self.failures >= DOWN_MIN_FAILURES).then(|| {
            format!(
                "server down: every connection failed for {:.1} s ({} attempts, nothing else finished in between); first: {first}",
                lasted.as_secs_f64(),
                self.failures
            )
        })
    }

    /// At the end of a phase: the last requests (at least [`DOWN_MIN_FAILURES`]) all failed to
    /// connect and nothing answered since, so the server is gone even though the phase ran
    /// out before [`DOWN_AFTER`].
    pub fn down_at_end(&self) -> Option<String> {
        let (_, first) = self.since.as_ref()?;
        (self.failures >= DOWN_MIN_FAILURES).then(|| {
            format!(
                "server down: the point's last {} requests all failed to connect; first: {first}",
                self.failures
            )
        })
    }
}

impl Context {
    /// Runs `phase` until its budget is spent, the run's stop, or the server is found down,
    /// calling `each` for every finished request with the phase's start.
    pub async fn phase(&self, phase: Phase, each: &mut dyn FnMut(Finished, Instant)) -> Ended {
        let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
        let (cancel_tx, cancel_rx) = watch::channel::<Option<&'static str>>(None);
        // The dispatcher's own stop: the run's, or a server found down.
        let halt = Stop::new();
        // A moment's head start so the first deadline is not already past when the task starts.
        let start = Instant::now() + Duration::from_millis(1);
        let dispatcher = tokio::spawn(
            Dispatcher {
                ctx: self.clone(),
                halt: halt.clone(),
                phase,
                start,
                requests: Arc::new(InFlight {
                    pool: self.pool.clone(),
                    path: self.path,
                    stream: self.stream,
                    timeout: self.timeout,
                    tx,
                    cancel_rx,
                    halt: halt.clone(),
                    stop: self.stop.clone(),
                    requests: AtomicU64::new(0),
                }),
            }
            .run(),
        );
        let mut health = Health::default();
        let mut down: Option<String> = None;
        let mut stopped_by_run = false;
        // Set once the phase stops sending: in-flight requests are cancelled at this instant.
        let mut cancel_at: Option<(tokio::time::Instant, &'static str)> = None;
        // One wait each for the whole phase, not one per finished request.
        let stopped = self.stop.wait();
        let aborted = self.stop.wait_aborted();
        tokio::pin!(stopped, aborted);
        // Set when in-flight requests are told to cancel. A local flag, not the channel's value:
        // `watch::send` stores nothing once every request has dropped its receiver, and a
        // finished `aborted` polled again panics.
        let mut cancelled = false;
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(f) => {
                        if down.is_none()
                            && let Some(why) = health.observe(f.outcome.failure.as_ref(), f.outcome.end)
                        {
                            down = Some(why);
                            halt.stop();
                            cancel_at.get_or_insert((
                                tokio::time::Instant::now() + self.grace,
                                "still running when --grace after the server went down ended",
                            ));
                        }
                        each(f, start);
                    }
                    None => break,
                },
                _ = &mut stopped, if !stopped_by_run => {
                    stopped_by_run = true;
                    halt.stop();
                    cancel_at.get_or_insert((
                        tokio::time::Instant::now() + self.grace,
                        "still running when the --grace period after Ctrl-C ended",
                    ));
                }
                _ = &mut aborted, if !cancelled => {
                    stopped_by_run = true;
                    halt.stop();
                    cancelled = true;
                    cancel_tx.send_replace(Some("cancelled at once: nobody reads loadgen's output any more"));
                }
                _ = sleep_until_some(cancel_at.map(|(t, _)| t)), if !cancelled => {
                    cancelled = true;
                    cancel_tx.send_replace(cancel_at.map(|(_, why)| why));
                }
            }
        }
        let _ = dispatcher.await;
        // A stop pulled while nothing was in flight (an open-loop or trace gap, think time)
        // ends the dispatcher and with it the channel: `recv` may give `None` before the
        // `stopped` branch ran.
        stopped_by_run |= self.stop.is_stopped();
        if down.is_none() && !stopped_by_run {
            down = health.down_at_end();
        }
        match down {
            Some(why) => Ended::ServerDown(why),
            None if stopped_by_run => Ended::Stopped,
            None => Ended::Completed,
        }
    }
}

/// Sleeps until `t`, or forever without one.
async fn sleep_until_some(t: Option<tokio::time::Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// What each request task of a phase shares, behind one reference count.
pub(crate) struct InFlight {
    pool: Arc<Pool>,
    path: &'static str,
    stream: bool,
    timeout: Duration,
    /// Dropped with the last task: the phase's collector then ends.
    pub(crate) tx: mpsc::UnboundedSender<Finished>,
    /// Set, with the reason, when in-flight requests are to be cancelled.
    cancel_rx: watch::Receiver<Option<&'static str>>,
    /// The phase's stop and the run's: a conversation sends no further turn after either.
    halt: Stop,
    stop: Stop,
    /// Conversations: requests started in the phase (their ids; sessions count the units).
    pub(crate) requests: AtomicU64,
}

impl InFlight {
    pub(crate) fn stopped(&self) -> bool {
        self.halt.is_stopped() || self.stop.is_stopped()
    }

    /// Waits until `deadline` as the dispatcher does; false when a stop came first.
    pub(crate) async fn wait_until(&self, deadline: Instant) -> bool {
        wait_until(
            deadline,
            || self.stopped(),
            || halted(&self.halt, &self.stop),
        )
        .await
    }
}

/// The dispatch loop of one phase. It runs as a task on the runtime, so a freed slot wakes it
/// without a thread switch and its requests start on the same worker.
struct Dispatcher {
    ctx: Context,
    /// Pulled when the phase stops sending (the run's stop, or the server found down).
    halt: Stop,
    phase: Phase,
    start: Instant,
    requests: Arc<InFlight>,
}

impl Dispatcher {
    /// The phase's stop or the run's (read directly, so no request leaves after a Ctrl-C
    /// while the collector has yet to pass it on).
    fn stopped(&self) -> bool {
        self.halt.is_stopped() || self.ctx.stop.is_stopped()
    }

    async fn halted(&self) {
        halted(&self.halt, &self.ctx.stop).await
    }

    async fn run(self) {
        let load = self.phase.load;
        let mut rng = StdRng::seed_from_u64(self.phase.arrival_seed);
        let slots = load.slots().map(|n| Arc::new(Semaphore::new(n as usize)));
        let end = match self.phase.budget {
            Budget::Time(d) => Some(self.start + d),
            Budget::Requests(_) => None,
        };
        let mut prev: Option<f64> = None;
        let mut id = 0u64;
        loop {
            if self.stopped()
                || matches!(self.phase.budget, Budget::Requests(n) if id >= n)
                || end.is_some_and(|e| Instant::now() >= e)
            {
                break;
            }
            let prepared = self
                .phase
                .maker
                .make(self.ctx.seq.fetch_add(1, Ordering::Relaxed), id);
            let draw = match load {
                Load::Open { arrival, .. } => arrival.draw(&mut rng),
                Load::Trace { .. } => prepared.at_s.unwrap_or(0.0),
                Load::Closed { .. } => 1.0,
            };
            let (intended, permit) = match next_send(&load, prev, draw) {
                Some(t) => {
                    prev = Some(t);
                    // A send beyond any duration (a trace's far timestamp at a slow speed)
                    // never comes: the point ends there instead of the clock overflowing.
                    let Some(deadline) = Duration::try_from_secs_f64(t)
                        .ok()
                        .filter(|d| *d <= servbench::cli::MAX_DURATION)
                        .map(|d| self.start + d)
                    else {
                        servbench::cli::warn(format!(
                            "request {id} would leave {t:.3e} s into the point, beyond a year: the point ends before it"
                        ));
                        break;
                    };
                    if end.is_some_and(|e| deadline >= e) || !self.wait_until(deadline).await {
                        break;
                    }
                    // The latency clock started at the deadline, slot or no slot.
                    match self.acquire(&slots, end).await {
                        Some(p) => (deadline, p),
                        None => break,
                    }
                }
                None => match self.acquire(&slots, end).await {
                    Some(p) => (Instant::now(), p),
                    None => break,
                },
            };
            let request = Request {
                prepared,
                id,
                intended,
                permit,
            };
            match request.prepared.script.is_some() {
                true => tokio::spawn(crate::conversation::session(
                    self.requests.clone(),
                    self.phase.maker.clone(),
                    request,
                    end,
                )),
                false => tokio::spawn(request_task(self.requests.clone(), request)),
            };
            id += 1;
            // Let the new request go out before preparing the next: when many slots free at
            // once, each request leaves as soon as its slot is taken instead of queueing behind
            // the whole burst's preparation.
            tokio::task::yield_now().await;
        }
    }

    async fn wait_until(&self, deadline: Instant) -> bool {
        wait_until(deadline, || self.stopped(), || self.halted()).await
    }

    /// Waits for a free slot; `None` when stopped or the time budget ran out meanwhile.
    async fn acquire(
        &self,
        slots: &Option<Arc<Semaphore>>,
        end: Option<Instant>,
    ) -> Option<Option<OwnedSemaphorePermit>> {
        let Some(sem) = slots else { return Some(None) };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Some(Some(p));
        }
        let until = async {
            match end {
                Some(e) => tokio::time::sleep_until(e.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = sem.clone().acquire_owned() => p.ok().map(Some),
            _ = self.halted() => None,
            _ = until => None,
        }
    }
}

async fn halted(halt: &Stop, stop: &Stop) {
    tokio::select! {
        _ = halt.wait() => {}
        _ = stop.wait() => {}
    }
}

/// Waits until `deadline` without the runtime timer's millisecond rounding: the timer sleeps
/// to within 1.5 ms, then the task yields (letting every other task and the I/O driver run)
/// until the deadline passes. False when a stop came first.
async fn wait_until<F: std::future::Future<Output = ()>>(
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

/// One request as the dispatcher hands it over.
pub(crate) struct Request {
    pub prepared: Prepared,
    pub id: u64,
    pub intended: Instant,
    /// The closed-loop (or `--max-concurrency`) slot, freed when the request (or session) ends.
    pub permit: Option<OwnedSemaphorePermit>,
}

async fn request_task(shared: Arc<InFlight>, mut req: Request) {
    let body = std::mem::take(&mut req.prepared.body);
    let (o, dispatched, cancelled) = execute(&shared, body, req.intended, None).await;
    let finished = Finished {
        id: req.id,
        intended: req.intended,
        dispatched,
        outcome: o,
        target: req.prepared.target,
        max_tokens: req.prepared.max_tokens,
        turn: None,
    };
    deliver(&shared, finished, req.permit, cancelled).await;
}

/// Hands a finished request to the collector and frees its slot: after a failure to connect,
/// a moment later (see CONNECT_BACKOFF), unless the phase is being cancelled.
pub(crate) async fn deliver(
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
/// from `intended` and cancelled with the phase: its outcome, when it really left, and whether
/// it was cancelled. `reply`: collect the answer's text into it.
pub(crate) async fn execute(
    shared: &InFlight,
    body: Bytes,
    intended: Instant,
    reply: Option<String>,
) -> (Outcome, Instant, bool) {
    let dispatched = Instant::now();
    let mut o = Outcome {
        reply,
        ..Outcome::default()
    };
    let mut cancel_rx = shared.cancel_rx.clone();
    let deadline = tokio::time::Instant::from_std(intended + shared.timeout);
    let work = tokio::time::timeout_at(
        deadline,
        stream_into(&shared.pool, shared.path, body, shared.stream, &mut o),
    );
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
        why = cancel_rx.wait_for(Option::is_some) => {
            o.end = Instant::now();
            let why = why.ok().and_then(|w| *w).unwrap_or("cancelled");
            o.failure = Some(Failure::new(ErrorClass::Cancelled, why));
            true
        }
    };
    (o, dispatched, cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Failure {
        Failure::new(ErrorClass::Connect, "Connection refused")
    }

    /// A server is down after DOWN_AFTER of nothing but connect failures; any other outcome
    /// (here an HTTP error: something answered) starts the watch again; a point that ends
    /// on a run of them ends with the server down.
    #[test]
    fn the_server_is_down_only_after_a_run_of_connect_failures() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut h = Health::default();
        assert!(h.observe(Some(&refused()), at(0)).is_none());
        assert!(h.observe(Some(&refused()), at(1000)).is_none());
        let answered = Failure::new(ErrorClass::Http5xx, "HTTP 503");
        assert!(h.observe(Some(&answered), at(1500)).is_none());
        assert!(h.down_at_end().is_none());
        assert!(h.observe(Some(&refused()), at(1600)).is_none());
        assert!(h.observe(Some(&refused()), at(2600)).is_none());
        assert!(h.down_at_end().is_none(), "two are not a pattern");
        let why = h.observe(Some(&refused()), at(3600)).expect("down");
        assert!(why.starts_with("server down: every connection failed for 2.0 s (3 attempts"));
        assert!(why.ends_with("first: Connection refused"), "{why}");
        assert!(h.down_at_end().is_some());
        assert!(h.observe(None, at(3700)).is_none());
        assert!(h.down_at_end().is_none(), "a success: it is back");
    }
}
