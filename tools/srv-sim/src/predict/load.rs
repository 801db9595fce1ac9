//! The virtual clock of `--predict` and the modelled client behind it. The clock jumps from one
//! step's deadline to the next and from idle to the next arrival, so a sweep that takes an hour
//! in real time takes seconds. The client sends what loadgen would: closed-loop slots that send
//! again when a request ends, open-loop arrivals (loadgen's arrival processes, from `shared`) with
//! an optional cap in flight, conversations whose turns resend the history after a think
//! time, and a trace's rows (shared's reader) at their offsets with their lengths and shared
//! blocks. It watches each request's published tokens after every step, timing them as loadgen
//! times the chunks it receives, and writes loadgen's `request` records.

use crate::clock::{Clock, Wake};
use crate::prefix::{PrefixCache, block_hashes};
use crate::progress::Progress;
use crate::step::Submit;
use crate::tokens::splitmix64;
use rand::SeedableRng;
use rand::rngs::StdRng;
use servbench::load::trace::Trace;
use servbench::load::{Budget, Load, Think, Turns};
use servbench::record::{ErrorClass, Labels, PointKey, RequestError, RequestRecord, TokenSource};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What the synthetic prompts share, as loadgen builds them.
#[derive(Debug, Clone, Copy)]
pub enum Prompts {
    /// Every prompt unique.
    Unique,
    /// Every prompt starts with the same N tokens (`--shared-prefix`).
    Shared(u32),
    /// Request i is in group i mod G and shares that group's first P tokens (`--prefix-groups`).
    Groups { groups: u32, len: u32 },
}

/// One sweep point as the client applies it.
#[derive(Debug, Clone)]
pub struct PointLoad {
    pub point: PointKey,
    pub labels: Labels,
    /// The point's load (shared's, as loadgen's).
    pub pace: Load,
    pub budget: Budget,
    pub input_len: u32,
    pub max_tokens: u32,
    pub prompts: Prompts,
    pub turns: Option<(Turns, Think)>,
    /// `--trace`: the rows sent (with [`Load::Trace`]); each row's lengths replace
    /// `input_len` and `max_tokens`.
    pub trace: Option<Arc<Trace>>,
    pub seed: u64,
    /// Send to the engine's queue: HTTP and parsing.
    pub request_latency: Duration,
    /// The server's front end: more with the streams in flight and the prompt.
    pub front_end: crate::frontend::FrontEnd,
    /// The client takes streams that end at once one after another, this far apart (it writes
    /// the record and sends the next request for each).
    pub client_gap: Duration,
    /// The server's limits: a request beyond either is answered 400, as srv-sim does.
    pub max_model_len: u32,
    pub kv_cache_tokens: u64,
}

/// A request whose tokens the client is receiving.
struct InFlight {
    progress: Arc<Progress>,
    session: usize,
    id: u64,
    intended: Instant,
    sent: Instant,
    first: Option<Instant>,
    last: Instant,
    seen: u32,
    itl_ms: Vec<f64>,
    chunks: u32,
    prompt_tokens: u32,
    max_tokens: u32,
    cached: u32,
    target: Option<u32>,
}

/// One conversation (a plain request is a session of one turn).
struct Session {
    index: u64,
    turns: u32,
    turn: u32,
    think: Vec<Duration>,
    /// Token identities of the history so far (conversations only).
    history: Vec<u64>,
    /// The trace row it sends (`--trace`).
    row: Option<usize>,
}

/// The virtual clock and its client, for one point.
pub struct VirtualClock<'a> {
    load: PointLoad,
    cache: Option<&'a mut PrefixCache>,
    start: Instant,
    now: Instant,
    rng: StdRng,
    sessions: Vec<Session>,
    started: u64,
    /// Sends not yet made, by time (ties in order of scheduling).
    due: BinaryHeap<Reverse<(Instant, u64, usize)>>,
    due_seq: u64,
    /// Open loop: the next session's start time, while the budget lasts.
    next_open: Option<Instant>,
    /// Open loop: sessions started so far by the arrival process.
    opened: u64,
    /// Open loop with a cap: the intended starts of sessions waiting for a slot.
    slot_queue: VecDeque<Instant>,
    in_flight_sessions: u32,
    /// Sent to the engine at their arrival time.
    arrivals: BinaryHeap<Reverse<(Instant, u64)>>,
    pending: std::collections::HashMap<u64, Submit>,
    watching: Vec<InFlight>,
    next_id: u64,
    /// When the client can send its next request: it sends one at a time.
    client_free: Instant,
    pub records: Vec<RequestRecord>,
    /// Output tokens asked for by the requests sent so far.
    held_tokens: u64,
}

/// The most output tokens one predicted point asks for: its records (and their inter-token
/// gaps) are held until it ends, so a point stops sending there (about 40 bytes a token).
pub const MAX_POINT_TOKENS: u64 = 20_000_000;

/// The client sends one request at a time, this far apart: a closed loop's first requests
/// reach an idle engine one after another, and the first starts a step alone, as against a
/// real server.
const SEND_GAP: Duration = Duration::from_micros(2);

impl<'a> VirtualClock<'a> {
    pub fn new(load: PointLoad, cache: Option<&'a mut PrefixCache>) -> VirtualClock<'a> {
        // Any base instant will do: only differences are read.
        let start = Instant::now();
        let rng = StdRng::seed_from_u64(load.seed ^ u64::from(load.point.index));
        let mut clock = VirtualClock {
            cache,
            start,
            now: start,
            rng,
            sessions: Vec::new(),
            started: 0,
            due: BinaryHeap::new(),
            due_seq: 0,
            next_open: None,
            opened: 0,
            slot_queue: VecDeque::new(),
            in_flight_sessions: 0,
            arrivals: BinaryHeap::new(),
            pending: std::collections::HashMap::new(),
            watching: Vec::new(),
            next_id: 0,
            client_free: start,
            records: Vec::new(),
            held_tokens: 0,
            load,
        };
        match clock.load.pace {
            Load::Closed { concurrency } => {
                for _ in 0..concurrency.max(1) {
                    clock.start_closed(start);
                }
            }
            Load::Open { .. } | Load::Trace { .. } => clock.next_open = clock.open_at(start),
        }
        clock
    }

    /// When the open loop's next session starts (`prev`: the last one's start; the first's at
    /// the point's start), while the budget lasts: a rate's gap drawn from the arrival process,
    /// or the next trace row's offset at the played speed.
    fn open_at(&mut self, prev: Instant) -> Option<Instant> {
        let at = match self.load.pace {
            Load::Closed { .. } => return None,
            Load::Open {
                rate_rps, arrival, ..
            } if self.opened > 0 => {
                prev + Duration::from_secs_f64(arrival.draw(&mut self.rng) / rate_rps)
            }
            Load::Open { .. } => prev,
            Load::Trace { speed, .. } => {
                let row = self.load.trace.as_ref()?.rows.get(self.opened as usize)?;
                // A row beyond any duration at this speed never comes: the point ends there.
                self.start + Duration::try_from_secs_f64(row.at_s / speed).ok()?
            }
        };
        self.budget_allows(self.opened, at).then_some(at)
    }

    /// Whether the budget lets a session start at `at` after `count` others (and the point
    /// holds fewer than [`MAX_POINT_TOKENS`]).
    fn budget_allows(&self, count: u64, at: Instant) -> bool {
        if self.capped() {
            return false;
        }
        match self.load.budget {
            Budget::Requests(n) => count < n,
            Budget::Time(d) => at - self.start < d,
        }
    }

    /// Whether the point reached [`MAX_POINT_TOKENS`]: it sends no more.
    pub fn capped(&self) -> bool {
        self.held_tokens >= MAX_POINT_TOKENS
    }

    /// Whether a later turn may still be sent at `at` (no turn after `--duration`).
    fn may_send(&self, at: Instant) -> bool {
        if self.capped() {
            return false;
        }
        match self.load.budget {
            Budget::Requests(_) => true,
            Budget::Time(d) => at - self.start < d,
        }
    }

    /// A new session (its turns and think times drawn as loadgen draws them).
    fn new_session(&mut self) -> usize {
        let (turns, think) = match self.load.turns {
            None => (1, Vec::new()),
            Some((turns, think)) => {
                let n = turns.draw(&mut self.rng, None);
                let gaps = (1..n).map(|_| think.draw(&mut self.rng)).collect();
                (n, gaps)
            }
        };
        let row = matches!(self.load.pace, Load::Trace { .. }).then_some(self.started as usize);
        self.sessions.push(Session {
            index: self.started,
            turns,
            turn: 0,
            think,
            history: Vec::new(),
            row,
        });
        self.started += 1;
        self.in_flight_sessions += 1;
        self.sessions.len() - 1
    }

    /// Closed loop: a slot starts a session at `at`, if the budget allows.
    fn start_closed(&mut self, at: Instant) {
        if self.budget_allows(self.started, at) {
            let s = self.new_session();
            self.schedule(at, s);
        }
    }

    fn schedule(&mut self, at: Instant, session: usize) {
        self.due.push(Reverse((at, self.due_seq, session)));
        self.due_seq += 1;
    }

    /// Open loop: the sessions whose start time has come by `until` (waiting for a slot when
    /// `--max-concurrency` is reached: their latency runs from their intended start).
    fn open_arrivals(&mut self, until: Instant) {
        let max_concurrency = match self.load.pace {
            Load::Closed { .. } => return,
            Load::Open {
                max_concurrency, ..
            }
            | Load::Trace {
                max_concurrency, ..
            } => max_concurrency,
        };
        while let Some(at) = self.next_open.filter(|&t| t <= until) {
            self.opened += 1;
            if max_concurrency.is_some_and(|m| self.in_flight_sessions >= m) {
                self.slot_queue.push_back(at);
            } else {
                let s = self.new_session();
                self.schedule(at, s);
            }
            self.next_open = self.open_at(at);
        }
    }

    /// Moves the sends due by `until` to the engine's arrivals.
    fn send_due(&mut self, until: Instant) {
        self.open_arrivals(until);
        while let Some(&Reverse((at, _, session))) = self.due.peek() {
            if at > until {
                break;
            }
            self.due.pop();
            self.send(at, at, session);
        }
    }

    /// Sends session `s`'s next turn, intended at `intended`, leaving the client at `at`.
    fn send(&mut self, intended: Instant, at: Instant, s: usize) {
        let at = at.max(self.client_free);
        self.client_free = at + SEND_GAP;
        let load = &self.load;
        let id = self.next_id;
        self.next_id += 1;
        let session = &mut self.sessions[s];
        session.turn += 1;
        let trace_row = session
            .row
            .and_then(|i| Some((i, load.trace.as_ref()?.rows.get(i)?)));
        let (input_len, max_tokens) = match trace_row {
            Some((_, row)) => (row.input_len, row.output_len),
            None => (load.input_len, load.max_tokens),
        };
        let user = token_run(
            load.seed,
            0x05e5_5101 ^ (u64::from(load.point.index) << 40) ^ id,
        );
        let mut tokens: Vec<u64> = match load.turns {
            Some(_) => session.history.clone(),
            None => Vec::new(),
        };
        let (shared, shared_ns) = match load.prompts {
            _ if load.turns.is_some() || trace_row.is_some() => (0, 0),
            Prompts::Unique => (0, 0),
            Prompts::Shared(n) => (n.min(load.input_len), 0x5a4e_d000),
            Prompts::Groups { groups, len } => (
                len.min(load.input_len),
                0x6e0u64 << 32 | (session.index % u64::from(groups.max(1))),
            ),
        };
        let shared_ns = token_run(load.seed, shared_ns);
        tokens.extend((0..shared).map(|i| splitmix64(shared_ns ^ u64::from(i))));
        // A trace row's blocks: equal hash ids, equal tokens (a partial last block is a prefix
        // of the whole one), so the prefix cache finds what the trace says was shared.
        let mut from = shared;
        if let Some((_, row)) = trace_row {
            let block = load.trace.as_ref().map_or(1, |t| t.block.max(1));
            for &id in &row.hash_ids {
                let ns = token_run(load.seed, 0x7ace_b10c_0000_0000 ^ id);
                let n = block.min(input_len - from);
                tokens.extend((0..n).map(|i| splitmix64(ns ^ u64::from(i))));
                from += n;
            }
        }
        // A row's own tokens are the row's, whatever the point: loadgen sends a row the same
        // words at every speed, so a later point finds it cached.
        let user = match trace_row {
            Some((i, _)) => token_run(load.seed, 0x7ace_0000_0000_0001 ^ ((i as u64) << 16)),
            None => user,
        };
        tokens.extend((from..input_len).map(|i| splitmix64(user ^ u64::from(i))));
        let prompt_tokens = tokens.len() as u32;
        self.held_tokens += u64::from(max_tokens);
        let target = (session.turn == 1).then_some(input_len);
        let is_conversation = load.turns.is_some();
        let point = load.point.clone();
        let (session_index, turn) = (session.index, session.turn);
        if is_conversation {
            session.history = tokens.clone();
        }
        let total = u64::from(prompt_tokens) + u64::from(max_tokens);
        let refusal = if total > u64::from(load.max_model_len) {
            Some(format!(
                "This model's maximum context length is {} tokens. However, you requested {total} tokens",
                load.max_model_len
            ))
        } else if total > load.kv_cache_tokens {
            Some(format!(
                "prompt + max_tokens = {total} tokens exceed the KV cache ({} tokens)",
                load.kv_cache_tokens
            ))
        } else {
            None
        };
        if let Some(message) = refusal {
            let mut r = self.record(id, point, intended, at);
            r.prompt_tokens = Some(prompt_tokens);
            r.prompt_tokens_target = target;
            r.max_tokens = Some(max_tokens);
            r.e2e_ms = Some(0.0);
            r.error = Some(RequestError {
                class: ErrorClass::Http4xx,
                message,
                http_status: Some(400),
            });
            if is_conversation {
                r.session = Some(session_index);
                r.turn = Some(turn);
            }
            self.records.push(r);
            // A failed turn ends its session (there is no reply to build on).
            self.sessions[s].turns = self.sessions[s].turn;
            // The refusal comes back after a round trip (and time moves on: a budget of time
            // refused at every send still ends).
            let answered = at + self.load.request_latency.max(Duration::from_micros(1)) * 2;
            self.session_over(s, answered);
            return;
        }
        let cached = match self.cache.as_deref_mut() {
            Some(c) => c.admit(&block_hashes(tokens.iter().copied()), prompt_tokens),
            None => 0,
        };
        let progress = Progress::new(max_tokens);
        let streams = u32::try_from(self.watching.len() + 1).unwrap_or(u32::MAX);
        let arrive =
            at + self.load.request_latency + self.load.front_end.delay(streams, prompt_tokens);
        self.arrivals.push(Reverse((arrive, id)));
        self.pending.insert(
            id,
            Submit {
                progress: progress.clone(),
                prompt_tokens,
                cached,
                arrival: arrive,
                rid: None,
                pooling: false,
                adapter: None,
            },
        );
        self.watching.push(InFlight {
            progress,
            session: s,
            id,
            intended,
            sent: at,
            first: None,
            last: at,
            seen: 0,
            itl_ms: Vec::new(),
            chunks: 0,
            prompt_tokens,
            max_tokens,
            cached,
            target,
        });
    }

    fn record(&self, id: u64, point: PointKey, intended: Instant, sent: Instant) -> RequestRecord {
        RequestRecord::started(
            self.load.labels.clone(),
            point,
            id,
            ms(intended - self.start),
            ms(sent - intended),
        )
    }

    /// Reads every watched request's published tokens at `now`: a change is one chunk, as the
    /// stream would carry it; a request with all its tokens ends.
    fn observe(&mut self) {
        let now = self.now;
        let mut ended = 0u32;
        let mut i = 0;
        while i < self.watching.len() {
            let w = &mut self.watching[i];
            let available = w.progress.available.load(Ordering::Acquire);
            if available > w.seen {
                if w.first.is_none() {
                    w.first = Some(now);
                } else {
                    w.itl_ms.push(ms(now - w.last));
                }
                w.last = now;
                w.seen = available;
                w.chunks += 1;
            }
            if w.seen >= w.progress.total {
                let w = self.watching.swap_remove(i);
                // The client takes the streams that ended together one after another.
                let seen_at = now + self.load.client_gap * ended;
                ended += 1;
                self.finish(w, seen_at);
                continue;
            }
            i += 1;
        }
    }

    fn finish(&mut self, w: InFlight, now: Instant) {
        let mut r = self.record(w.id, self.load.point.clone(), w.intended, w.sent);
        let first = w.first.unwrap_or(now);
        let ttft = ms(first - w.intended);
        let e2e = ms(now - w.intended);
        r.ttft_ms = Some(ttft);
        r.ttfo_ms = None;
        r.e2e_ms = Some(e2e);
        r.tpot_ms = (w.seen > 1).then(|| (e2e - ttft) / f64::from(w.seen - 1));
        r.itl_ms = w.itl_ms;
        r.chunks = w.chunks;
        r.output_tokens = w.seen;
        r.output_tokens_source = Some(TokenSource::Usage);
        r.prompt_tokens = Some(w.prompt_tokens);
        r.prompt_tokens_target = w.target;
        r.max_tokens = Some(w.max_tokens);
        if self.load.turns.is_some() {
            let s = &self.sessions[w.session];
            r.session = Some(s.index);
            r.turn = Some(s.turn);
            r.cached_tokens = Some(w.cached);
            // The reply joins the history the next turn resends.
            let reply = token_run(self.load.seed, 0x4e91_7000 ^ w.id);
            let history = &mut self.sessions[w.session].history;
            history.extend((0..w.seen).map(|i| splitmix64(reply ^ u64::from(i))));
        }
        self.records.push(r);
        self.session_over(w.session, now);
    }

    /// Session `s`'s turn ended at `at`: its next turn after the think time, or its slot freed.
    fn session_over(&mut self, s: usize, at: Instant) {
        let session = &self.sessions[s];
        if session.turn < session.turns {
            let think = session.think[session.turn as usize - 1];
            let next = at + think;
            if self.may_send(next) {
                self.schedule(next, s);
                return;
            }
        }
        self.in_flight_sessions -= 1;
        match self.load.pace {
            Load::Closed { .. } => self.start_closed(at),
            Load::Open { .. } | Load::Trace { .. } => {
                if let Some(intended) = self.slot_queue.pop_front() {
                    let s = self.new_session();
                    self.send(intended, at, s);
                }
            }
        }
    }

    /// Moves the engine arrivals due by `until` into the inbox.
    fn deliver(&mut self, until: Instant, inbox: &mut VecDeque<Submit>) {
        while let Some(&Reverse((at, id))) = self.arrivals.peek() {
            if at > until {
                break;
            }
            self.arrivals.pop();
            if let Some(due) = self.front_end_due(id)
                && due > at
            {
                if let Some(s) = self.pending.get_mut(&id) {
                    s.arrival = due;
                }
                self.arrivals.push(Reverse((due, id)));
                continue;
            }
            if let Some(s) = self.pending.remove(&id) {
                inbox.push_back(s);
            }
        }
    }

    /// When request `id` leaves the front end at the streams in flight now (the rest of a
    /// closed loop's wave, sent after it, included), as the served engine's gate decides it;
    /// None without a front end.
    fn front_end_due(&self, id: u64) -> Option<Instant> {
        if self.load.front_end.is_zero() {
            return None;
        }
        let w = self.watching.iter().find(|w| w.id == id)?;
        let streams = u32::try_from(self.watching.len()).unwrap_or(u32::MAX);
        Some(
            w.sent
                + self.load.request_latency
                + self.load.front_end.delay(streams, w.prompt_tokens),
        )
    }

    /// The earliest thing that will happen: a send or an arrival.
    fn next_event(&self) -> Option<Instant> {
        let due = self.due.peek().map(|Reverse((t, _, _))| *t);
        let arrival = self.arrivals.peek().map(|Reverse((t, _))| *t);
        [due, arrival, self.next_open].into_iter().flatten().min()
    }
}

/// The client alone, for a driver that keeps the time of several engines (`--pd`): it moves
/// the client to `now`, takes the requests that reach the front by then (with their ids), and
/// reads the streams after the engines moved.
impl VirtualClock<'_> {
    /// The client's time moves to `now` (never back).
    pub fn move_to(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// The requests sent and arrived by now, each with its id (its record's).
    pub fn arrived(&mut self) -> Vec<(u64, Submit)> {
        self.send_due(self.now);
        let mut out = Vec::new();
        while let Some(&Reverse((at, id))) = self.arrivals.peek() {
            if at > self.now {
                break;
            }
            self.arrivals.pop();
            if let Some(s) = self.pending.remove(&id) {
                out.push((id, s));
            }
        }
        out
    }

    /// Reads the streams at now (see [`VirtualClock::observe`]).
    pub fn read_streams(&mut self) {
        self.observe();
    }

    /// When the client acts next by itself: a send or an arrival; None when its load is over
    /// or waits on the engines.
    pub fn next_send(&self) -> Option<Instant> {
        self.next_event()
    }
}

impl Clock for VirtualClock<'_> {
    fn now(&mut self) -> Instant {
        self.now
    }

    fn wait_for_work(&mut self, inbox: &mut VecDeque<Submit>) -> bool {
        self.observe();
        loop {
            self.send_due(self.now);
            self.deliver(self.now, inbox);
            if !inbox.is_empty() {
                return true;
            }
            match self.next_event() {
                Some(t) => self.now = self.now.max(t),
                None => return false,
            }
        }
    }

    fn poll(&mut self, inbox: &mut VecDeque<Submit>) {
        self.observe();
        self.send_due(self.now);
        self.deliver(self.now, inbox);
    }

    fn wait_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> bool {
        self.observe();
        // Sends made during the step (a think time ending, an open-loop arrival) reach the
        // engine by its end.
        self.send_due(deadline);
        self.deliver(deadline, inbox);
        self.now = self.now.max(deadline);
        true
    }

    fn wait_for_work_until(&mut self, deadline: Instant, inbox: &mut VecDeque<Submit>) -> Wake {
        self.observe();
        loop {
            self.send_due(self.now);
            self.deliver(self.now, inbox);
            if !inbox.is_empty() {
                return Wake::Work;
            }
            match self.next_event() {
                Some(t) if t < deadline => self.now = self.now.max(t),
                _ => {
                    self.now = self.now.max(deadline);
                    return Wake::Deadline;
                }
            }
        }
    }
}

/// Milliseconds of a duration.
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The seed of a run of token identities: equal seeds, equal tokens (a shared prefix).
fn token_run(seed: u64, namespace: u64) -> u64 {
    splitmix64(seed ^ splitmix64(namespace))
}
