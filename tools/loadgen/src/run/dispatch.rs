//! The one dispatch loop every load mode feeds: a runtime task that takes each unit from the
//! point's workload, decides its intended send time through [`crate::pacing::next_send`],
//! waits for it precisely and starts it (`inflight.rs`); finished requests come back to the
//! phase's caller in order (in a closed loop, in batches at most a millisecond after they
//! finished: one wakeup of the caller's thread per batch, not per request), watched for a
//! server gone (`health.rs`). Per request it takes one reference count and one spawned task,
//! no lock and no other allocation than the body.

use crate::client::body::Bodies;
use crate::client::http::Pool;
use crate::client::inflight::{
    Finished, InFlight, Slot, halted, request_task, sleep_until_some, wait_until,
};
use crate::pacing::{Load, next_send};
use crate::run::health::Health;
use crate::stop::{Ended, Stop};
use crate::workload::{Unit, Workload};
use rand::SeedableRng;
use rand::rngs::StdRng;
use servbench::load::Budget;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

/// What every phase of a run shares: where requests go, how long they may take, the stop.
#[derive(Clone)]
pub struct Context {
    pub pool: Arc<Pool>,
    /// The API loaded.
    pub api: crate::client::wire::Api,
    /// Streaming requests (false: `--no-stream`).
    pub stream: bool,
    pub timeout: Duration,
    /// `--record-text`.
    pub record_text: bool,
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
    pub work: Arc<dyn Workload>,
    pub bodies: Arc<Bodies>,
    /// `--cancel-rate`: requests abandoned on purpose (not in a warmup).
    pub cancel: Option<crate::cancel::Cancel>,
}

impl Context {
    /// Runs `phase` until its budget is spent, the run's stop, or the server is found down,
    /// calling `each` for every finished request with the phase's start.
    pub async fn phase(&self, phase: Phase, each: &mut dyn FnMut(Finished, Instant)) -> Ended {
        let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
        let (cancel_tx, cancel_rx) = watch::channel::<Option<&'static str>>(None);
        // The dispatcher's own stop: the run's, or a server found down.
        let halt = Stop::new();
        let closed = matches!(phase.load, Load::Closed { .. });
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
                    api: self.api,
                    stream: self.stream,
                    timeout: self.timeout,
                    record_text: self.record_text,
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
        // Finished requests are taken in batches: after one, the collector rests for
        // COLLECT_EVERY, and requests finishing meanwhile queue without waking its thread (a
        // wakeup per request was a tenth of the client's CPU). Each is still handed on, in
        // order, at most that long after it finished. Closed loops only: a paced load's sends
        // at 5,000 a second came late more often with the rest (send lag p99 0.4-5 ms in most
        // runs on the loaded VM, against tens of us), so they are handed on as they come.
        let mut batch: Vec<Finished> = Vec::new();
        let mut resting_until: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                n = rx.recv_many(&mut batch, COLLECT_BATCH), if resting_until.is_none() => {
                    if n == 0 {
                        break;
                    }
                    for f in batch.drain(..) {
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
                    if closed {
                        resting_until = Some(tokio::time::Instant::now() + COLLECT_EVERY);
                    }
                }
                _ = sleep_until_some(resting_until), if resting_until.is_some() => {
                    resting_until = None;
                }
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

/// How long the collector rests after taking a batch of finished requests.
const COLLECT_EVERY: Duration = Duration::from_millis(1);

/// The most finished requests taken in one batch (more wait for the next).
const COLLECT_BATCH: usize = 4096;

/// Yields once to the tasks already queued on this worker (a request just spawned runs
/// first). Not `tokio::task::yield_now`: that one also waits for the runtime to poll its I/O
/// driver, a system call per request dispatched, and one dispatch per scheduler round, which
/// a closed loop (a slot freed is a request sent) does not need.
async fn run_queued_first() {
    let mut yielded = false;
    std::future::poll_fn(|cx| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        // Woken while it runs, the task goes to the back of the worker's queue.
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
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
            let unit = self.phase.work.next(
                self.ctx.seq.fetch_add(1, Ordering::Relaxed),
                id,
                &self.phase.bodies,
            );
            let at_s = match &unit {
                Unit::Request(p) => p.at_s,
                Unit::Session(_) => None,
            };
            let draw = match load {
                Load::Open { arrival, .. } => arrival.draw(&mut rng),
                Load::Trace { .. } => at_s.unwrap_or(0.0),
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
            let slot = Slot {
                id,
                intended,
                permit,
                end,
            };
            match unit {
                Unit::Request(p) => tokio::spawn(request_task(
                    self.requests.clone(),
                    slot,
                    p.body,
                    (p.target, p.max_tokens),
                    self.phase
                        .cancel
                        .and_then(|c| c.after(self.phase.arrival_seed, id)),
                    p.question,
                )),
                Unit::Session(s) => tokio::spawn(s.run(self.requests.clone(), slot)),
            };
            id += 1;
            // Let the new request go out before preparing the next: when many slots free at
            // once, each request leaves as soon as its slot is taken instead of queueing behind
            // the whole burst's preparation. Paced loads (open loop, trace) yield to the I/O
            // driver too, as their precise waits do: without it their sends at 2,000 a
            // second came late more often (trace_timing).
            match load {
                Load::Closed { .. } => run_queued_first().await,
                Load::Open { .. } | Load::Trace { .. } => tokio::task::yield_now().await,
            }
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
