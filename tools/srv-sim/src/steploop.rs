//! The modelled engine's step loop: continuous batching on any [`Clock`], the server's on the
//! wall clock and `--predict`'s on a virtual one.
//!
//! Each launch admits waiting requests (FCFS) while the running limit and the KV-token budget
//! allow, spends the token budget (one per pipeline micro-batch) on decode tokens first and
//! chunked prefill after, and lasts what the [`CostModel`] says. KV is reserved as a round is
//! launched; when a decode finds no room, the most recently admitted request not in flight is
//! preempted as vLLM does (its KV dropped, back to the head of the queue, its prompt and tokens
//! so far prefilled again when it resumes).
//!
//! Without PP a launch is a step and the next starts when it ends. With PP a launch is a round
//! of up to pp micro-batches: its micro-batches take the first stage one after another, m/pp
//! of the round's time for m of them, and the next round is launched as soon as the first
//! stage is free (vLLM's batch queue schedules its next batch without waiting for the last,
//! SGLang's PP loop runs one micro-batch per stage), with the micro-batches not in flight, so
//! at most pp are. A request in a round in flight is not scheduled again until the round is
//! back; its tokens exist when the round ends.

use crate::clock::{Clock, Wake};
use crate::metrics::Metrics;
use crate::request::{Req, secs};
use crate::selfreport::EngineReport;
use crate::step::{CostModel, StepShape, Submit};
use crate::tokens::{splitmix64, unit};
use std::collections::VecDeque;
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

struct Running {
    req: Req,
    /// Its admission's number: `running` is in this order, and a round in flight names its
    /// requests by it.
    admitted: u64,
    /// In a round in flight: not scheduled again until it is back.
    in_flight: bool,
    prefilled: u32,
    /// Tokens to prefill: the prompt (at least one: an empty prompt still runs one forward
    /// pass), or after a preemption the prompt and every token generated before it.
    prompt_work: u32,
    /// KV-cache tokens the request holds now: what it prefilled and decoded since admission,
    /// and what its round in flight will write.
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
            admitted: 0,
            in_flight: false,
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

/// The modelled engine's settings (what `engine::Timing::Modelled` holds, with the running
/// limit and the seed of the speculative draws), for a step loop on any [`Clock`].
pub struct ModelledConfig {
    pub cost: Box<dyn CostModel>,
    pub max_step_tokens: u32,
    pub kv_cache_tokens: u64,
    pub spec: Option<Spec>,
    pub max_running: Option<u32>,
    pub seed: u64,
    /// What the engine reports about itself (`--enable-*` flags; `--predict` reports nothing).
    pub report: EngineReport,
    pub abandoned: crate::abandoned::Abandoned,
    /// `--lora`: the adapter slots; a step that loads an adapter lasts the swap longer.
    pub lora: Option<crate::lora::Slots>,
}

/// The modelled engine on `clock`: the server's runs on the wall clock on its own thread;
/// `--predict` runs it on a virtual clock, until its load is over.
pub fn run_modelled<C: Clock>(clock: C, metrics: Arc<Mutex<Metrics>>, config: ModelledConfig) {
    StepLoop::new(clock, metrics, config).run()
}

/// The step loop driven one event at a time by a caller that keeps the virtual time (the P/D
/// prediction: several engines on one clock). The caller hands it requests as they arrive and
/// calls [`Stepper::advance`] at its [`Stepper::deadline`] and whenever it handed it work; the
/// engine is the same loop `run_modelled` runs, stopped at each of its waits.
pub struct Stepper {
    engine: StepLoop<Driven>,
    wait: Wait,
}

/// A driven engine's clock: the time its caller last advanced it to; nothing arrives but what
/// the caller hands it.
struct Driven {
    now: Instant,
}

impl Clock for Driven {
    fn now(&mut self) -> Instant {
        self.now
    }

    fn wait_for_work(&mut self, _inbox: &mut VecDeque<Submit>) -> bool {
        false
    }

    fn poll(&mut self, _inbox: &mut VecDeque<Submit>) {}

    fn wait_until(&mut self, deadline: Instant, _inbox: &mut VecDeque<Submit>) -> bool {
        self.now = self.now.max(deadline);
        true
    }

    fn wait_for_work_until(&mut self, deadline: Instant, _inbox: &mut VecDeque<Submit>) -> Wake {
        self.now = self.now.max(deadline);
        Wake::Deadline
    }
}

impl Stepper {
    /// An idle engine at `now`.
    pub fn new(metrics: Arc<Mutex<Metrics>>, config: ModelledConfig, now: Instant) -> Stepper {
        Stepper {
            engine: StepLoop::new(Driven { now }, metrics, config),
            wait: Wait::Work,
        }
    }

    /// A request arrives (at its `arrival`, the caller's now): the engine takes it when it is
    /// next advanced.
    pub fn submit(&mut self, s: Submit) {
        self.engine.inbox.push_back(s);
    }

    /// When the engine acts next by itself (a round's end, its first stage freeing); None when
    /// it waits for work alone.
    pub fn deadline(&self) -> Option<Instant> {
        match self.wait {
            Wait::Work => None,
            Wait::Until(t) | Wait::WorkOr(t) => Some(t),
        }
    }

    /// Runs the engine at `now` up to its next wait: its deadline has come, or work it may
    /// take has arrived. False when it had nothing to do at `now`.
    pub fn advance(&mut self, now: Instant) -> bool {
        let e = &mut self.engine;
        e.clock.now = e.clock.now.max(now);
        let work = !e.inbox.is_empty();
        match self.wait {
            Wait::Work if work => e.at = None,
            Wait::Until(t) | Wait::WorkOr(t) if now >= t => e.woke(t),
            Wait::WorkOr(_) if work => e.woke(now),
            Wait::Work | Wait::Until(_) | Wait::WorkOr(_) => return false,
        }
        self.wait = e.until_wait();
        true
    }
}

struct StepLoop<C: Clock> {
    clock: C,
    metrics: Arc<Mutex<Metrics>>,
    cost: Box<dyn CostModel>,
    max_step_tokens: u32,
    kv_cache_tokens: u64,
    spec: Option<Spec>,
    max_running: usize,
    /// Pipeline stages (1 without PP): micro-batches in flight at most.
    stages: u32,
    /// New requests, and preempted ones back at the head.
    waiting: VecDeque<Running>,
    /// In admission order: the last is the first preempted.
    running: Vec<Running>,
    /// The next admission's number.
    admissions: u64,
    /// Launched and not yet back, in launch order.
    rounds: Vec<Round>,
    /// When the first stage takes the next micro-batch: the last launch's start plus its
    /// micro-batches' share of its time.
    stage_free: Option<Instant>,
    rng: u64,
    report: EngineReport,
    abandoned: crate::abandoned::Abandoned,
    lora: Option<crate::lora::Slots>,
    /// Arrived and not yet taken by a launch.
    inbox: VecDeque<Submit>,
    /// The time the loop stands at (a round's end, the first stage freeing, an arrival); None
    /// when idle: the next launch starts when work arrives.
    at: Option<Instant>,
}

/// What the loop waits for between two turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Idle: work.
    Work,
    /// A round's end or the first stage freeing; work arriving meanwhile waits for it.
    Until(Instant),
    /// The first stage is free and has nothing to take: work, or this round's end.
    WorkOr(Instant),
}

/// What a step does to one running request.
#[derive(Clone, Copy)]
enum Work {
    Prefill(u32),
    Decode(u32),
}

/// A step (a pipelined round) in flight: its requests by admission number, and when it ends.
struct Round {
    plan: Vec<(u64, Work)>,
    shape: StepShape,
    /// Micro-batches it holds.
    micro: u32,
    step: Duration,
    end: Instant,
}

impl<C: Clock> StepLoop<C> {
    fn new(clock: C, metrics: Arc<Mutex<Metrics>>, c: ModelledConfig) -> StepLoop<C> {
        let stages = c.cost.micro_batches().max(1);
        StepLoop {
            clock,
            metrics,
            cost: c.cost,
            max_step_tokens: c.max_step_tokens,
            kv_cache_tokens: c.kv_cache_tokens,
            spec: c.spec,
            max_running: c.max_running.map_or(usize::MAX, |n| n as usize),
            stages,
            waiting: VecDeque::new(),
            running: Vec::new(),
            admissions: 0,
            rounds: Vec::new(),
            stage_free: None,
            rng: c.seed,
            report: c.report,
            abandoned: c.abandoned,
            inbox: VecDeque::new(),
            at: None,
            lora: c.lora,
        }
    }

    /// Launches whenever the first stage is free and there is work not in flight; completes
    /// each round at its end. Without PP: one step after another, the next starting when the
    /// last was due to end (absolute deadlines).
    fn run(mut self) {
        loop {
            match self.until_wait() {
                Wait::Work => {
                    // Idle: the next step starts when work arrives.
                    if !self.clock.wait_for_work(&mut self.inbox) {
                        return;
                    }
                    self.at = None;
                }
                Wait::Until(next) => {
                    if !self.clock.wait_until(next, &mut self.inbox) {
                        return;
                    }
                    self.woke(next);
                }
                // The first stage is free and has nothing to take: new work may arrive
                // before the next round is back.
                Wait::WorkOr(end) => match self.clock.wait_for_work_until(end, &mut self.inbox) {
                    Wake::Gone => return,
                    Wake::Work => {
                        let now = self.clock.now();
                        self.woke(now.min(end));
                    }
                    Wake::Deadline => self.woke(end),
                },
            }
        }
    }

    fn idle(&self) -> bool {
        self.rounds.is_empty()
            && self.running.is_empty()
            && self.waiting.is_empty()
            && self.inbox.is_empty()
    }

    /// Runs the loop up to its next wait and says what it waits for.
    fn until_wait(&mut self) -> Wait {
        loop {
            if self.idle() {
                return Wait::Work;
            }
            self.clock.poll(&mut self.inbox);
            if let Some(wait) = self.turn() {
                return wait;
            }
        }
    }

    /// The loop stands at `t` (a round's end, the first stage freeing, an arrival): the rounds
    /// ended by then are back.
    fn woke(&mut self, t: Instant) {
        self.at = Some(t);
        self.complete(t);
    }

    /// One launch, where the first stage is free, and the wait after it; None when no round is
    /// in flight (the next launch starts when work arrives).
    fn turn(&mut self) -> Option<Wait> {
        let start = self.at.unwrap_or_else(|| self.clock.now());
        let stage_busy = self.stage_free.is_some_and(|t| t > start);
        let launched = !stage_busy && self.launch(start);
        let Some(end) = self.rounds.iter().map(|r| r.end).min() else {
            self.at = None;
            return None;
        };
        Some(match self.stage_free {
            Some(free) if launched || stage_busy => Wait::Until(end.min(free)),
            _ if launched || stage_busy => Wait::Until(end),
            _ => Wait::WorkOr(end),
        })
    }

    /// Takes the inbox, admits, preempts, and launches what is not in flight into the free
    /// micro-batches at `start`; false when nothing was launched.
    fn launch(&mut self, start: Instant) -> bool {
        let metrics = self.metrics.clone();
        {
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            for s in self.inbox.drain(..) {
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
        let held: u32 = self.rounds.iter().map(|r| r.micro).sum();
        let lanes = self.stages.saturating_sub(held);
        if lanes == 0 {
            return false;
        }
        let (plan, mut shape) = self.plan(lanes);
        if plan.is_empty() {
            return false;
        }
        shape.max_micro_batches = Some(lanes);
        // The batch's adapters not loaded are copied in before it runs.
        let swap = self.lora.as_mut().map_or(Duration::ZERO, |l| l.load());
        let step = self.cost.step_time(&shape) + swap;
        let micro = shape.split_seqs().clamp(1, lanes);
        // The first stage takes the round's micro-batches one after another, a stage-time each.
        self.stage_free = Some(start + step * micro / self.stages);
        // KV is reserved as the round is scheduled.
        let mut named = Vec::with_capacity(plan.len());
        for (i, work) in plan {
            let r = &mut self.running[i];
            r.in_flight = true;
            r.kv += match work {
                Work::Prefill(n) => u64::from(n) + u64::from(r.prefilled + n >= r.prompt_work),
                Work::Decode(n) => u64::from(n),
            };
            named.push((r.admitted, work));
        }
        self.rounds.push(Round {
            plan: named,
            shape,
            micro,
            step,
            end: start + step,
        });
        true
    }

    /// Brings back every round that has ended by `t`, in the order they end.
    fn complete(&mut self, t: Instant) {
        while let Some(k) = (0..self.rounds.len())
            .filter(|&k| self.rounds[k].end <= t)
            .min_by_key(|&k| self.rounds[k].end)
        {
            let round = self.rounds.remove(k);
            let now = self.clock.now();
            let metrics = self.metrics.clone();
            let mut m = metrics.lock().unwrap_or_else(|e| e.into_inner());
            m.late(secs(now.saturating_duration_since(round.end)));
            self.apply(&round.plan, now, &mut m);
            m.step_done();
            let (drafts, counts) = (
                self.spec.map_or(0, |s| s.tokens),
                self.cost.step_counts(&round.shape),
            );
            self.report
                .step(&round.shape, drafts, round.step, counts, &mut m);
        }
        if self.rounds.is_empty() && self.stage_free.is_some_and(|f| f <= t) {
            self.stage_free = None;
        }
    }

    /// Drops the requests whose client went away: waiting ones at once, running ones as
    /// `--decode-abandoned` says.
    fn drop_cancelled(&mut self, m: &mut Metrics) {
        let before = self.running.len() + self.waiting.len();
        let policy = self.abandoned;
        self.running.retain_mut(|r| !r.req.drop_now(policy));
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
    /// admission does not preempt at once. With `--lora`, a request whose adapter the batch
    /// has no room for (`--max-loras`) is passed over, as vLLM's scheduler skips it.
    fn admit(&mut self) {
        if let Some(l) = &mut self.lora {
            l.begin(self.running.iter().map(|r| r.req.sub.adapter));
        }
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
        let mut i = 0;
        while self.running.len() < self.max_running {
            let Some(r) = self.waiting.get(i) else { break };
            let need = u64::from(r.prompt_work) + 1;
            if used + need > self.kv_cache_tokens && !self.running.is_empty() {
                break;
            }
            if let Some(l) = &mut self.lora
                && !l.join(r.req.sub.adapter)
            {
                i += 1;
                continue;
            }
            let Some(mut r) = self.waiting.remove(i) else {
                break;
            };
            used += need;
            r.admitted = self.admissions;
            self.admissions += 1;
            self.running.push(r);
        }
    }

    /// Before a launch: when the next tokens of the decoding requests not in flight do not fit,
    /// preempt the most recently admitted request not in flight until they do (one request
    /// alone always fits: the HTTP side refuses a prompt + max_tokens over the budget).
    fn preempt_for_decode(&mut self, m: &mut Metrics) {
        while self.running.len() > 1 {
            let need: u64 = self
                .running
                .iter()
                .filter(|r| r.decoding() && !r.in_flight)
                .map(|r| self.decode_need(r))
                .sum();
            if self.kv_used() + need <= self.kv_cache_tokens {
                break;
            }
            let Some(last) = self.running.iter().rposition(|r| !r.in_flight) else {
                break;
            };
            let mut victim = self.running.remove(last);
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

    /// Decides the step's work: decode for every request past prefill and not in flight, then
    /// prefill chunks in admission order within what is left of the step's token budget. A
    /// pipelined step is a round of up to `lanes` micro-batches (the stages' free ones), each
    /// with the whole budget (vLLM schedules each batch
    /// of its PP batch queue, SGLang each PP micro-batch, with its own `max_num_batched_tokens`
    /// / chunked-prefill size): the decode tokens spread over them as the cost model's round
    /// splits them, and each prompt chunk goes into the micro-batch with the most room, at most
    /// its budget (one request is in one micro-batch of a round).
    fn plan(&mut self, lanes: u32) -> (Vec<(usize, Work)>, StepShape) {
        let mut plan = Vec::with_capacity(self.running.len());
        let mut shape = StepShape::default();
        let drafts = self.spec.map_or(0, |s| s.tokens);
        let lanes = lanes.max(1) as usize;
        let mut budgets = vec![self.max_step_tokens; lanes];
        for i in 0..self.running.len() {
            let r = &self.running[i];
            if !r.decoding() || r.in_flight {
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
            if r.decoding() || r.in_flight {
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

    /// A round is back at `now`: its prompt chunks are prefilled (the chunk that ends a prompt
    /// samples its first token) and its decode tokens exist. Requests cancelled meanwhile are
    /// gone.
    fn apply(&mut self, plan: &[(u64, Work)], now: Instant, m: &mut Metrics) {
        for &(admitted, work) in plan {
            let Ok(i) = self.running.binary_search_by_key(&admitted, |r| r.admitted) else {
                continue;
            };
            let r = &mut self.running[i];
            r.in_flight = false;
            match work {
                Work::Prefill(n) => {
                    r.prefilled += n;
                    if r.prefilled >= r.prompt_work {
                        // The step that finishes the prompt samples the first token (after a
                        // preemption: the next one).
                        r.req.publish(1, now, m);
                    }
                }
                Work::Decode(n) => {
                    if let Some(spec) = self.spec {
                        m.spec_step(spec.tokens, n.saturating_sub(1));
                    }
                    r.req.publish(n, now, m);
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
