//! The simulated engine: one OS thread that owns admission, scheduling and token timing.
//!
//! Requests arrive over a channel; the engine decides when each of their tokens exists and
//! publishes a running count (`Progress::available`) that the HTTP side streams from. Timing
//! follows absolute deadlines on the monotonic clock (`Instant`), waited for with the channel's
//! timed receive (a futex with a timeout), not tokio's 1 ms timer wheel.
//!
//! Two timings:
//! - [`Timing::Modelled`]: the `steploop` module's continuous batching, steps (or pipelined
//!   rounds) that last what the [`CostModel`] says.
//! - [`Timing::Fixed`]: each request has its own schedule, first chunk at arrival + TTFT, then one
//!   chunk every ITL; with ITL 0 every token is available at once.

pub use crate::abandoned::Abandoned;
use crate::clock::{WallClock, wait_until};
use crate::metrics::{MetricNames, Metrics};
use crate::request::{Req, secs};
use crate::selfreport::EngineReport;
use crate::step::{CostModel, Submit};
pub use crate::steploop::{ModelledConfig, Spec, run_modelled};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub enum Timing {
    Fixed {
        ttft: Duration,
        /// Gap between chunks; zero streams every token as soon as the first is due.
        itl: Duration,
        tokens_per_chunk: u32,
    },
    Modelled {
        cost: Box<dyn CostModel>,
        max_step_tokens: u32,
        kv_cache_tokens: u64,
        spec: Option<Spec>,
    },
}

pub struct EngineConfig {
    pub timing: Timing,
    /// At most this many requests run at once; the rest wait in FCFS order.
    pub max_running: Option<u32>,
    pub seed: u64,
    /// Whose metric names (and histogram buckets) `/metrics` shows.
    pub names: MetricNames,
    /// TP ranks, for the counters SGLang exports once per rank.
    pub tp_ranks: u32,
    pub report: EngineReport,
    pub abandoned: Abandoned,
    /// `--lora`: the engine's adapter slots.
    pub lora: Option<crate::lora::Slots>,
}

/// The HTTP side's handle: submit requests, read metrics.
#[derive(Clone)]
pub struct Engine {
    tx: Sender<Submit>,
    pub metrics: Arc<Mutex<Metrics>>,
}

impl Engine {
    /// Starts the engine thread; it ends when every handle is dropped.
    pub fn start(config: EngineConfig) -> Engine {
        let (tx, rx) = std::sync::mpsc::channel();
        let mut first = Metrics::new(config.names);
        first.tp_ranks = config.tp_ranks;
        let metrics = Arc::new(Mutex::new(first));
        let m = metrics.clone();
        std::thread::Builder::new()
            .name("srv-sim-engine".into())
            .spawn(move || {
                let _exit_on_panic = ExitOnPanic;
                Engine::serve(config, rx, m)
            })
            .expect("spawn the engine thread");
        Engine { tx, metrics }
    }

    /// The engine thread's loop, until every handle is dropped.
    fn serve(config: EngineConfig, rx: Receiver<Submit>, m: Arc<Mutex<Metrics>>) {
        match config.timing {
            Timing::Fixed {
                ttft,
                itl,
                tokens_per_chunk,
            } => FixedLoop {
                rx,
                metrics: m,
                ttft,
                itl,
                chunk: tokens_per_chunk.max(1),
                max_running: config.max_running.map_or(usize::MAX, |n| n as usize),
                abandoned: config.abandoned,
                lora: config.lora,
                waiting: VecDeque::new(),
                running: HashMap::new(),
                heap: BinaryHeap::new(),
                next_id: 0,
            }
            .run(),
            Timing::Modelled {
                cost,
                max_step_tokens,
                kv_cache_tokens,
                spec,
            } => run_modelled(
                WallClock { rx },
                m,
                ModelledConfig {
                    cost,
                    max_step_tokens,
                    kv_cache_tokens,
                    spec,
                    max_running: config.max_running,
                    seed: config.seed,
                    report: config.report,
                    abandoned: config.abandoned,
                    lora: config.lora,
                },
            ),
        }
    }

    pub fn submit(&self, s: Submit) {
        // The engine thread lives as long as any handle; a failed send means shutdown.
        let _ = self.tx.send(s);
    }
}

/// Ends the process when the engine thread unwinds from a panic: the HTTP side would go on
/// answering `/health` 200 while no request ever completed. The panic message is already on
/// stderr (the default hook runs first); the exit status says the server died.
struct ExitOnPanic;

/// srv-sim's exit status when its engine thread panicked (Rust's own for a panic).
pub const ENGINE_PANIC_EXIT: i32 = 101;

impl Drop for ExitOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "srv-sim: error: the engine thread panicked (above): exiting, rather than serving a /health that says ready to requests that would never end"
            );
            std::process::exit(ENGINE_PANIC_EXIT);
        }
    }
}

/// How long before a fixed-latency deadline the engine stops sleeping and spins: a sleeping
/// thread wakes 0.1-0.2 ms late on a virtual machine, and ground truth must not be late.
const FIXED_SPIN: Duration = Duration::from_micros(300);

/// Spinning only while few requests run: with many, deadlines are so close together that the
/// engine would spin without pause and starve the HTTP thread it feeds.
const FIXED_SPIN_MAX_RUNNING: usize = 8;

struct FixedLoop {
    rx: Receiver<Submit>,
    metrics: Arc<Mutex<Metrics>>,
    ttft: Duration,
    itl: Duration,
    chunk: u32,
    max_running: usize,
    abandoned: Abandoned,
    lora: Option<crate::lora::Slots>,
    waiting: VecDeque<Submit>,
    running: HashMap<u64, (Req, Instant, u32)>,
    /// (deadline, request id): the next chunk of each running request.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    next_id: u64,
}

impl FixedLoop {
    fn run(mut self) {
        loop {
            let mut inbox = VecDeque::new();
            match self.heap.peek().map(|Reverse((t, _))| *t) {
                Some(deadline) => {
                    let spin = if self.running.len() <= FIXED_SPIN_MAX_RUNNING {
                        FIXED_SPIN
                    } else {
                        Duration::ZERO
                    };
                    if !wait_until(&self.rx, deadline, spin, &mut inbox) {
                        return;
                    }
                }
                None => match self.rx.recv() {
                    Ok(s) => inbox.push_back(s),
                    Err(_) => return,
                },
            }
            inbox.extend(self.rx.try_iter());
            let metrics = self.metrics.clone();
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            for s in inbox {
                m.prompt_tokens += u64::from(s.prompt_tokens);
                self.waiting.push_back(s);
            }
            self.admit(None);
            let now = Instant::now();
            while let Some(&Reverse((due, id))) = self.heap.peek() {
                if due > now {
                    break;
                }
                self.heap.pop();
                m.engine_steps += 1;
                let Some((req, first_due, chunks)) = self.running.get_mut(&id) else {
                    continue;
                };
                if req.drop_now(self.abandoned) {
                    m.aborted += 1;
                    self.running.remove(&id);
                    self.admit(Some(due));
                    continue;
                }
                let n = if self.itl.is_zero() {
                    req.total() - req.published
                } else {
                    self.chunk.min(req.total() - req.published)
                };
                m.late(secs(now.saturating_duration_since(due)));
                req.publish(n, now, &mut m);
                *chunks += 1;
                if req.published >= req.total() {
                    self.running.remove(&id);
                    self.admit(Some(due));
                } else {
                    // Absolute schedule: chunk j is due at first + j x ITL, whatever the lateness.
                    let next = *first_due + self.itl * *chunks;
                    self.heap.push(Reverse((next, id)));
                }
            }
            m.running = self.running.len() as u64;
            m.waiting = self.waiting.len() as u64;
        }
    }

    /// Starts waiting requests while slots are free (FCFS, past a request whose adapter the
    /// running ones' leave no room for); `freed_at` is when the slot opened. A request whose
    /// adapter was not loaded has its first chunk later by the swap.
    fn admit(&mut self, freed_at: Option<Instant>) {
        if let Some(l) = &mut self.lora {
            l.begin(self.running.values().map(|r| r.0.sub.adapter));
        }
        let mut i = 0;
        while self.running.len() < self.max_running && i < self.waiting.len() {
            if self.waiting[i].progress.cancelled.load(Ordering::Relaxed) {
                self.waiting.remove(i);
                continue;
            }
            if let Some(l) = &mut self.lora
                && !l.join(self.waiting[i].adapter)
            {
                i += 1;
                continue;
            }
            let Some(s) = self.waiting.remove(i) else {
                break;
            };
            let swap = self.lora.as_mut().map_or(Duration::ZERO, |l| l.load());
            let start = freed_at.map_or(s.arrival, |t| t.max(s.arrival));
            s.progress.scheduled(s.arrival, start);
            let first_due = start + swap + self.ttft;
            let id = self.next_id;
            self.next_id += 1;
            self.heap.push(Reverse((first_due, id)));
            self.running.insert(id, (Req::new(s), first_due, 0));
        }
    }
}
