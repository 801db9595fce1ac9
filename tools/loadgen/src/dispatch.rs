//! The one dispatch loop every load mode feeds: a runtime task that decides each intended send
//! time through [`crate::pacing::next_send`], waits for it precisely and starts the request;
//! finished requests come back to the phase's caller one at a time. Per request it takes one
//! reference count and one spawned task, no lock and no other allocation than the body.

use crate::exec::{Outcome, stream_into};
use crate::http::{Failure, Pool};
use crate::pacing::{Load, next_send};
use crate::workload::{self, BodySpec, Entry, PromptText, Synthetic};
use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use servbench::record::ErrorClass;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, watch};

/// A run's stop switch, what the first Ctrl-C/SIGTERM pulls: no new requests, in-flight ones
/// get `--grace`. One per run, so a process can run twice. The flag is read on every dispatch
/// (an atomic load); the notification wakes whoever waits for it.
#[derive(Clone, Default)]
pub struct Stop(Arc<StopState>);

#[derive(Default)]
struct StopState {
    set: AtomicBool,
    notify: Notify,
}

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    pub fn stop(&self) {
        self.0.set.store(true, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_stopped(&self) -> bool {
        self.0.set.load(Ordering::SeqCst)
    }

    /// Returns once the switch is pulled (at once when it already was).
    pub async fn wait(&self) {
        let notified = self.0.notify.notified();
        // Checked after registering, so a stop between the two is not missed.
        if self.is_stopped() {
            return;
        }
        notified.await;
    }
}

/// How much of a phase to run.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    Requests(u64),
    Time(Duration),
}

/// Makes request bodies for a point.
pub struct Maker {
    pub spec: BodySpec,
    pub source: Source,
    pub seed: u64,
    /// `--max-tokens` was given: it overrides a prompt file's own `max_tokens`.
    pub max_given: bool,
}

/// Where prompts come from: aligned synthetic ones, or a list in a shuffled order.
#[derive(Clone)]
pub enum Source {
    Synthetic(Arc<Synthetic>),
    Listed(Arc<Vec<Entry>>, Arc<Vec<usize>>),
}

/// One request ready to go: its body and what the record should say it asked for.
struct Prepared {
    body: Bytes,
    target: Option<u32>,
    max_tokens: u32,
}

impl Maker {
    fn make(&self, seq: u64) -> Prepared {
        match &self.source {
            Source::Synthetic(s) => Prepared {
                body: workload::body(&self.spec, &PromptText::Text(s.text(Some(seq), self.seed))),
                target: Some(s.target_tokens),
                max_tokens: self.spec.max_tokens,
            },
            Source::Listed(entries, order) => {
                let e = &entries[order[(seq % order.len() as u64) as usize]];
                let mut spec = self.spec.clone();
                if let Some(m) = e.max_tokens.filter(|_| !self.max_given) {
                    spec.max_tokens = m;
                }
                Prepared {
                    body: workload::body(&spec, &e.prompt),
                    target: None,
                    max_tokens: spec.max_tokens,
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
}

/// What every phase of a run shares: where requests go, how long they may take, the stop.
#[derive(Clone)]
pub struct Context {
    pub pool: Arc<Pool>,
    /// The API's path (`/v1/completions`).
    pub path: &'static str,
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

impl Context {
    /// Runs `phase` until its budget is spent (or a stop), calling `each` for every finished
    /// request with the phase's start. Returns true when stopped.
    pub async fn phase(&self, phase: Phase, each: &mut dyn FnMut(Finished, Instant)) -> bool {
        let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
        let (cancel_tx, cancel_rx) = watch::channel(false);
        // A moment's head start so the first deadline is not already past when the task starts.
        let start = Instant::now() + Duration::from_millis(1);
        let dispatcher = tokio::spawn(
            Dispatcher {
                ctx: self.clone(),
                phase,
                start,
                requests: Arc::new(InFlight {
                    pool: self.pool.clone(),
                    path: self.path,
                    timeout: self.timeout,
                    tx,
                    cancel_rx,
                }),
            }
            .run(),
        );
        let mut stopping = self.stop.is_stopped();
        let mut cancel_at = tokio::time::Instant::now() + self.grace;
        if stopping {
            let _ = cancel_tx.send(true);
        }
        // One wait for the whole phase, not one per finished request.
        let stopped = self.stop.wait();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                msg = rx.recv() => match msg {
                    Some(f) => each(f, start),
                    None => break,
                },
                _ = &mut stopped, if !stopping => {
                    stopping = true;
                    cancel_at = tokio::time::Instant::now() + self.grace;
                }
                _ = tokio::time::sleep_until(cancel_at), if stopping && !*cancel_tx.borrow() => {
                    let _ = cancel_tx.send(true);
                }
            }
        }
        let _ = dispatcher.await;
        stopping
    }
}

/// What each request task of a phase shares, behind one reference count.
struct InFlight {
    pool: Arc<Pool>,
    path: &'static str,
    timeout: Duration,
    /// Dropped with the last task: the phase's collector then ends.
    tx: mpsc::UnboundedSender<Finished>,
    /// Set when `--grace` after a stop ran out.
    cancel_rx: watch::Receiver<bool>,
}

/// The dispatch loop of one phase. It runs as a task on the runtime, so a freed slot wakes it
/// without a thread switch and its requests start on the same worker.
struct Dispatcher {
    ctx: Context,
    phase: Phase,
    start: Instant,
    requests: Arc<InFlight>,
}

impl Dispatcher {
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
            if self.ctx.stop.is_stopped()
                || matches!(self.phase.budget, Budget::Requests(n) if id >= n)
                || end.is_some_and(|e| Instant::now() >= e)
            {
                break;
            }
            let prepared = self
                .phase
                .maker
                .make(self.ctx.seq.fetch_add(1, Ordering::Relaxed));
            let draw = match load {
                Load::Open { arrival, .. } => arrival.draw(&mut rng),
                Load::Closed { .. } => 1.0,
            };
            let (intended, permit) = match next_send(&load, prev, draw) {
                Some(t) => {
                    prev = Some(t);
                    let deadline = self.start + Duration::from_secs_f64(t);
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
            tokio::spawn(request_task(
                self.requests.clone(),
                Request {
                    prepared,
                    id,
                    intended,
                    permit,
                },
            ));
            id += 1;
            // Let the new request go out before preparing the next: when many slots free at
            // once, each request leaves as soon as its slot is taken instead of queueing behind
            // the whole burst's preparation.
            tokio::task::yield_now().await;
        }
    }

    /// Waits until `deadline` without the runtime timer's millisecond rounding: the timer
    /// sleeps to within 1.5 ms, then the task yields (letting every other task and the I/O
    /// driver run) until the deadline passes. False when a stop came first.
    async fn wait_until(&self, deadline: Instant) -> bool {
        const COARSE: Duration = Duration::from_micros(1500);
        loop {
            if self.ctx.stop.is_stopped() {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            if deadline - now > COARSE {
                tokio::select! {
                    _ = tokio::time::sleep_until((deadline - COARSE).into()) => {}
                    _ = self.ctx.stop.wait() => return false,
                }
            } else {
                tokio::task::yield_now().await;
            }
        }
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
            _ = self.ctx.stop.wait() => None,
            _ = until => None,
        }
    }
}

/// One request as the dispatcher hands it over.
struct Request {
    prepared: Prepared,
    id: u64,
    intended: Instant,
    /// The closed-loop (or `--max-concurrency`) slot, freed when the request ends.
    permit: Option<OwnedSemaphorePermit>,
}

async fn request_task(shared: Arc<InFlight>, req: Request) {
    let dispatched = Instant::now();
    let mut o = Outcome::default();
    enum End {
        Done,
        TimedOut,
        Cancelled,
    }
    let end = {
        let mut cancel_rx = shared.cancel_rx.clone();
        let deadline = tokio::time::Instant::from_std(req.intended + shared.timeout);
        let work = tokio::time::timeout_at(
            deadline,
            stream_into(&shared.pool, shared.path, req.prepared.body, &mut o),
        );
        tokio::select! {
            r = work => if r.is_ok() { End::Done } else { End::TimedOut },
            _ = cancel_rx.wait_for(|c| *c) => End::Cancelled,
        }
    };
    match end {
        End::Done => {}
        End::TimedOut => {
            o.end = Instant::now();
            o.failure = Some(Failure::new(
                ErrorClass::Timeout,
                format!(
                    "no complete answer within --timeout {}s",
                    shared.timeout.as_secs_f64()
                ),
            ));
        }
        End::Cancelled => {
            o.end = Instant::now();
            o.failure = Some(Failure::new(
                ErrorClass::Cancelled,
                "still running when the --grace period after Ctrl-C ended",
            ));
        }
    }
    drop(req.permit);
    let _ = shared.tx.send(Finished {
        id: req.id,
        intended: req.intended,
        dispatched,
        outcome: o,
        target: req.prepared.target,
        max_tokens: req.prepared.max_tokens,
    });
}
