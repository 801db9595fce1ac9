//! The simulated engine: one OS thread that owns admission, scheduling and token timing.
//!
//! Requests arrive over a channel; the engine decides when each of their tokens exists and
//! publishes a running count (`Progress::available`) that the HTTP side streams from. Timing
//! follows absolute deadlines on the monotonic clock (`Instant`), waited for with the channel's
//! timed receive (a futex with a timeout), not tokio's 1 ms timer wheel.
//!
//! Two timings:
//! - [`Timing::Modelled`]: a step loop with continuous batching. Each step admits waiting requests
//!   (FCFS) while the running limit and the KV-token budget allow, spends the token budget (one
//!   per pipeline micro-batch) on decode tokens first and chunked prefill after, and lasts what
//!   the [`CostModel`] says. KV is
//!   taken as tokens are computed; when a decode step finds no room, the most recently admitted
//!   request is preempted as vLLM does (its KV dropped, back to the head of the queue, its prompt
//!   and tokens so far prefilled again when it resumes).
//! - [`Timing::Fixed`]: each request has its own schedule, first chunk at arrival + TTFT, then one
//!   chunk every ITL; with ITL 0 every token is available at once.

use crate::clock::{Clock, WallClock, wait_until};
use crate::metrics::{MetricNames, Metrics};
use crate::selfreport::EngineReport;
use crate::step::{CostModel, StepShape, Submit};
use crate::tokens::{splitmix64, unit};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Speculative decoding: `k` draft tokens per step, each accepted with probability `accept`
/// while the previous ones were (the chain stops at the first rejection).
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub tokens: u32,
    pub accept: f64,
}

impl Spec {
    /// Expected tokens emitted per decode step: 1 + a + a^2 + ... + a^k.
    pub fn mean_tokens_per_step(&self) -> f64 {
        (0..=self.tokens).map(|i| self.accept.powi(i as i32)).sum()
    }
}

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
            } => StepLoop::new(
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
                },
            )
            .run(),
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

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Per-request bookkeeping shared by both loops.
struct Req {
    sub: Submit,
    published: u32,
    last_publish: Instant,
}

impl Req {
    fn new(sub: Submit) -> Req {
        let arrival = sub.arrival;
        Req {
            sub,
            published: 0,
            last_publish: arrival,
        }
    }

    fn total(&self) -> u32 {
        self.sub.progress.total
    }

    fn cancelled(&self) -> bool {
        self.sub.progress.cancelled.load(Ordering::Relaxed)
    }

    /// Makes `n` more tokens available at `now`, and records TTFT/ITL/e2e.
    fn publish(&mut self, n: u32, now: Instant, m: &mut Metrics) {
        if n == 0 {
            return;
        }
        if self.published == 0 {
            m.ttft.observe(secs(now - self.sub.arrival));
            if n > 1 {
                m.itl.observe_n(0.0, u64::from(n - 1));
            }
        } else {
            m.itl
                .observe_n(secs(now - self.last_publish) / f64::from(n), u64::from(n));
        }
        self.published += n;
        self.last_publish = now;
        self.sub.progress.tokens_at(now);
        m.generation_tokens += u64::from(n);
        self.sub.progress.publish(self.published);
        if self.published >= self.total() {
            m.finished_length += 1;
            m.e2e.observe(secs(now - self.sub.arrival));
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
                if req.cancelled() {
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

    /// Starts waiting requests while slots are free; `freed_at` is when the slot opened.
    fn admit(&mut self, freed_at: Option<Instant>) {
        while self.running.len() < self.max_running {
            let Some(s) = self.waiting.pop_front() else {
                break;
            };
            if s.progress.cancelled.load(Ordering::Relaxed) {
                continue;
            }
            let start = freed_at.map_or(s.arrival, |t| t.max(s.arrival));
            s.progress.scheduled(s.arrival, start);
            let first_due = start + self.ttft;
            let id = self.next_id;
            self.next_id += 1;
            self.heap.push(Reverse((first_due, id)));
            self.running.insert(id, (Req::new(s), first_due, 0));
        }
    }
}

struct Running {
    req: Req,
    prefilled: u32,
    /// Tokens to prefill: the prompt (at least one: an empty prompt still runs one forward
    /// pass), or after a preemption the prompt and every token generated before it.
    prompt_work: u32,
    /// KV-cache tokens the request holds now: what it prefilled and decoded since admission.
    kv: u64,
}

impl Running {
    fn new(sub: Submit) -> Running {
        let prompt_work = sub.prompt_tokens.max(1);
        // Cached tokens are prefilled already and held in the KV cache like computed ones; at
        // least one token is always computed.
        let prefilled = sub.cached.min(prompt_work - 1);
        Running {
            req: Req::new(sub),
            prefilled,
            prompt_work,
            kv: u64::from(prefilled),
        }
    }

    fn decoding(&self) -> bool {
        self.prefilled >= self.prompt_work
    }

    /// Preempted (recompute, as vLLM): the KV is dropped; on resumption the prompt and the
    /// tokens generated so far are prefilled again, and the step that finishes that samples the
    /// next token. What the client already has stays sent.
    fn preempt(&mut self) {
        self.kv = 0;
        self.prefilled = 0;
        self.prompt_work = self.req.sub.prompt_tokens.max(1) + self.req.published;
    }
}

/// The modelled engine's settings (what [`Timing::Modelled`] holds, with the running limit and
/// the seed of the speculative draws), for a step loop on any [`Clock`].
pub struct ModelledConfig {
    pub cost: Box<dyn CostModel>,
    pub max_step_tokens: u32,
    pub kv_cache_tokens: u64,
    pub spec: Option<Spec>,
    pub max_running: Option<u32>,
    pub seed: u64,
    /// What the engine reports about itself (`--enable-*` flags; `--predict` reports nothing).
    pub report: EngineReport,
}

/// The modelled engine on `clock`: the server's runs on the wall clock on its own thread;
/// `--predict` runs it on a virtual clock, until its load is over.
pub fn run_modelled<C: Clock>(clock: C, metrics: Arc<Mutex<Metrics>>, config: ModelledConfig) {
    StepLoop::new(clock, metrics, config).run()
}

struct StepLoop<C: Clock> {
    clock: C,
    metrics: Arc<Mutex<Metrics>>,
    cost: Box<dyn CostModel>,
    max_step_tokens: u32,
    kv_cache_tokens: u64,
    spec: Option<Spec>,
    max_running: usize,
    /// New requests, and preempted ones back at the head.
    waiting: VecDeque<Running>,
    /// In admission order: the last is the first preempted.
    running: Vec<Running>,
    rng: u64,
    report: EngineReport,
}

/// What a step does to one running request.
#[derive(Clone, Copy)]
enum Work {
    Prefill(u32),
    Decode(u32),
}

impl<C: Clock> StepLoop<C> {
    fn new(clock: C, metrics: Arc<Mutex<Metrics>>, c: ModelledConfig) -> StepLoop<C> {
        StepLoop {
            clock,
            metrics,
            cost: c.cost,
            max_step_tokens: c.max_step_tokens,
            kv_cache_tokens: c.kv_cache_tokens,
            spec: c.spec,
            max_running: c.max_running.map_or(usize::MAX, |n| n as usize),
            waiting: VecDeque::new(),
            running: Vec::new(),
            rng: c.seed,
            report: c.report,
        }
    }

    fn run(mut self) {
        let mut step_start: Option<Instant> = None;
        let mut inbox = VecDeque::new();
        loop {
            if self.running.is_empty() && self.waiting.is_empty() && inbox.is_empty() {
                // Idle: the next step starts when work arrives.
                if !self.clock.wait_for_work(&mut inbox) {
                    return;
                }
                step_start = None;
            }
            self.clock.poll(&mut inbox);
            let start = step_start.unwrap_or_else(|| self.clock.now());
            let metrics = self.metrics.clone();
            {
                let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
                for s in inbox.drain(..) {
                    m.prompt_tokens += u64::from(s.prompt_tokens);
                    self.waiting.push_back(Running::new(s));
                }
                self.drop_cancelled(&mut m);
                self.admit();
                for r in &self.running {
                    r.req.sub.progress.scheduled(r.req.sub.arrival, start);
                }
                self.preempt_for_decode(&mut m);
                self.gauges(&mut m);
            }
            let (plan, shape) = self.plan();
            if plan.is_empty() {
                step_start = None;
                continue;
            }
            let step = self.cost.step_time(&shape);
            let deadline = start + step;
            if !self.clock.wait_until(deadline, &mut inbox) {
                return;
            }
            let now = self.clock.now();
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            m.late(secs(now.saturating_duration_since(deadline)));
            self.apply(&plan, now, &mut m);
            m.step_done();
            let (drafts, counts) = (
                self.spec.map_or(0, |s| s.tokens),
                self.cost.step_counts(&shape),
            );
            self.report.step(&shape, drafts, step, counts, &mut m);
            // Absolute deadlines: the next step starts when this one was due to end.
            step_start = Some(deadline);
        }
    }

    fn drop_cancelled(&mut self, m: &mut Metrics) {
        let before = self.running.len() + self.waiting.len();
        self.running.retain(|r| !r.req.cancelled());
        self.waiting.retain(|r| !r.req.cancelled());
        m.aborted += (before - self.running.len() - self.waiting.len()) as u64;
    }

    fn kv_used(&self) -> u64 {
        self.running.iter().map(|r| r.kv).sum()
    }

    /// KV slots a decoding request may write this step: its verify tokens (1 + drafts), as
    /// vLLM allocates lookahead slots, but never past the tokens it still has to generate.
    fn decode_need(&self, r: &Running) -> u64 {
        let verify = 1 + self.spec.map_or(0, |s| s.tokens);
        u64::from(verify.min(r.req.total() - r.req.published))
    }

    /// FCFS admission: the head of the queue waits until a slot is free and its prompt (and its
    /// first token) fits in the KV cache beside what the running requests hold or were promised
    /// (a prompt still being prefilled counts whole) and their next decode tokens, so an
    /// admission does not preempt at once.
    fn admit(&mut self) {
        let mut used: u64 = self
            .running
            .iter()
            .map(|r| {
                if r.decoding() {
                    r.kv + self.decode_need(r)
                } else {
                    r.kv.max(u64::from(r.prompt_work) + 1)
                }
            })
            .sum();
        while self.running.len() < self.max_running {
            let Some(r) = self.waiting.front() else { break };
            let need = u64::from(r.prompt_work) + 1;
            if used + need > self.kv_cache_tokens && !self.running.is_empty() {
                break;
            }
            let Some(r) = self.waiting.pop_front() else {
                break;
            };
            used += need;
            self.running.push(r);
        }
    }

    /// Before a step: when the decoding requests' next tokens do not fit, preempt the most
    /// recently admitted request until they do (one request alone always fits: the HTTP side
    /// refuses a prompt + max_tokens over the budget).
    fn preempt_for_decode(&mut self, m: &mut Metrics) {
        while self.running.len() > 1 {
            let need: u64 = self
                .running
                .iter()
                .filter(|r| r.decoding())
                .map(|r| self.decode_need(r))
                .sum();
            if self.kv_used() + need <= self.kv_cache_tokens {
                break;
            }
            let Some(mut victim) = self.running.pop() else {
                break;
            };
            victim.preempt();
            m.preemptions += 1;
            self.waiting.push_front(victim);
        }
    }

    fn gauges(&self, m: &mut Metrics) {
        let used = self.kv_used();
        m.kv_used_tokens = used;
        m.kv_usage = used as f64 / self.kv_cache_tokens.max(1) as f64;
        m.running = self.running.len() as u64;
        m.waiting = self.waiting.len() as u64;
    }

    fn draw(&mut self) -> f64 {
        self.rng = splitmix64(self.rng);
        unit(self.rng)
    }

    /// Decides the step's work: decode for every request past prefill, then prefill chunks in
    /// admission order within what is left of the step's token budget. A pipelined step is a
    /// round of up to pp micro-batches, each with the whole budget (vLLM schedules each batch
    /// of its PP batch queue, SGLang each PP micro-batch, with its own `max_num_batched_tokens`
    /// / chunked-prefill size): the decode tokens spread over them as the cost model's round
    /// splits them, and each prompt chunk goes into the micro-batch with the most room, at most
    /// its budget (one request is in one micro-batch of a round).
    fn plan(&mut self) -> (Vec<(usize, Work)>, StepShape) {
        let mut plan = Vec::with_capacity(self.running.len());
        let mut shape = StepShape::default();
        let drafts = self.spec.map_or(0, |s| s.tokens);
        let lanes = self.cost.micro_batches().max(1) as usize;
        let mut budgets = vec![self.max_step_tokens; lanes];
        for i in 0..self.running.len() {
            let r = &self.running[i];
            if !r.decoding() {
                continue;
            }
            let remaining = r.req.total() - r.req.published;
            let context = u64::from(r.prompt_work + r.req.published);
            let emitted = match self.spec {
                None => 1,
                Some(spec) => {
                    let mut accepted = 0;
                    while accepted < spec.tokens && self.draw() < spec.accept {
                        accepted += 1;
                    }
                    1 + accepted
                }
            };
            let lane = shape.work.decode_seqs as usize % lanes;
            budgets[lane] = budgets[lane].saturating_sub(1 + drafts);
            shape.seqs += 1;
            shape.work.decode_seqs += 1;
            shape.work.prefill_tokens += drafts;
            shape.work.kv_tokens += context;
            plan.push((i, Work::Decode(emitted.min(remaining))));
        }
        // Prefill takes only the KV left after this step's decode tokens.
        let decode_kv: u64 = plan
            .iter()
            .map(|&(_, w)| match w {
                Work::Decode(n) => u64::from(n),
                Work::Prefill(_) => 0,
            })
            .sum();
        let mut kv_free = self
            .kv_cache_tokens
            .saturating_sub(self.kv_used() + decode_kv);
        for (i, r) in self.running.iter().enumerate() {
            // The micro-batch with the most room (the first of equals).
            let (lane, &budget) = budgets
                .iter()
                .enumerate()
                .rev()
                .max_by_key(|&(_, b)| *b)
                .unwrap_or((0, &0));
            if budget == 0 || kv_free == 0 {
                break;
            }
            if r.decoding() {
                continue;
            }
            let chunk = (r.prompt_work - r.prefilled)
                .min(budget)
                .min(u32::try_from(kv_free).unwrap_or(u32::MAX));
            kv_free -= u64::from(chunk);
            budgets[lane] -= chunk;
            shape.seqs += 1;
            shape.work.prefill_tokens += chunk;
            shape.work.kv_tokens += u64::from(r.prefilled);
            shape.prefill_attention_pairs +=
                u64::from(chunk) * (u64::from(r.prefilled) + u64::from(chunk).div_ceil(2));
            plan.push((i, Work::Prefill(chunk)));
        }
        (plan, shape)
    }

    fn apply(&mut self, plan: &[(usize, Work)], now: Instant, m: &mut Metrics) {
        for &(i, work) in plan {
            let r = &mut self.running[i];
            match work {
                Work::Prefill(n) => {
                    r.prefilled += n;
                    r.kv += u64::from(n);
                    if r.prefilled >= r.prompt_work {
                        // The step that finishes the prompt samples the first token (after a
                        // preemption: the next one).
                        r.req.publish(1, now, m);
                        r.kv += 1;
                    }
                }
                Work::Decode(n) => {
                    if let Some(spec) = self.spec {
                        m.spec_step(spec.tokens, n.saturating_sub(1));
                    }
                    r.req.publish(n, now, m);
                    r.kv += u64::from(n);
                }
            }
            if r.req.published >= r.req.total() {
                let sub = &r.req.sub;
                self.report.finished(
                    sub.rid.as_deref(),
                    sub.prompt_tokens,
                    r.req.published,
                    &sub.progress.read_times(),
                );
            }
        }
        self.running.retain(|r| r.req.published < r.req.total());
        self.gauges(m);
    }
}
