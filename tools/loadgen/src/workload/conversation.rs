//! Conversations (`--turns`): sessions of several turns, each turn resending the whole history
//! (every earlier user message and the server's real reply to it) plus a new user message, the
//! way chat and agent traffic reaches a server. A session holds one slot of `-c` from its first
//! turn to its last (think time included), so `-c 8` is eight conversations in flight. Turn k
//! is meant to leave `--think-time` after turn k-1's reply ended; its latency counts from that
//! moment, like any request's from its intended send.
//!
//! What the turns say: synthetic user messages of `--input-len` tokens (unique, like every
//! synthetic prompt), or the human turns of a ShareGPT-style file in order. The replies are the
//! server's own, collected from the stream.

use super::prompts::{Api, PromptText, Synthetic};
use super::{Asked, Budget, Session, Task, Unit, Workload};
use crate::client::body::Bodies;
use crate::pacing::Load;
use crate::run::inflight::{Finished, InFlight, Slot, deliver, execute};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// `--turns`: turns per conversation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Turns {
    Fixed(u32),
    /// Drawn uniformly from `lo..=hi` for each session.
    Range(u32, u32),
    /// A file's conversations with all their turns.
    All,
}

impl Turns {
    /// `3`, `2..6` or `all`.
    pub fn parse(s: &str) -> Result<Turns, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(Turns::All);
        }
        let num = |x: &str| -> Result<u32, String> {
            match x.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "'{s}': turns are a count of at least 1 (3), a range (2..6) or all"
                )),
            }
        };
        match s.split_once("..") {
            Some((a, b)) => {
                let (lo, hi) = (num(a)?, num(b)?);
                if hi < lo {
                    return Err(format!("'{s}': the range must go up, e.g. 2..6"));
                }
                Ok(Turns::Range(lo, hi))
            }
            None => Ok(Turns::Fixed(num(s)?)),
        }
    }

    pub fn text(&self) -> String {
        match *self {
            Turns::Fixed(n) => n.to_string(),
            Turns::Range(a, b) => format!("{a}..{b}"),
            Turns::All => "all".into(),
        }
    }

    /// The most turns a session can have (`None`: as many as a file's conversation has).
    pub fn most(&self) -> Option<u32> {
        match *self {
            Turns::Fixed(n) | Turns::Range(_, n) => Some(n),
            Turns::All => None,
        }
    }

    /// Turns of one session, given the conversation's own count where it has one.
    fn draw(&self, rng: &mut impl Rng, own: Option<u32>) -> u32 {
        let n = match *self {
            Turns::Fixed(n) => n,
            Turns::Range(a, b) => rng.random_range(a..=b),
            Turns::All => own.unwrap_or(1),
        };
        own.map_or(n, |o| n.min(o)).max(1)
    }
}

/// `--think-time`: the pause between a reply's end and the next turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Think {
    pub lo: Duration,
    pub hi: Duration,
}

impl Think {
    /// `2s`, or `500ms..3s` (uniform).
    pub fn parse(s: &str) -> Result<Think, String> {
        let d = servbench::cli::parse_duration;
        match s.split_once("..") {
            Some((a, b)) => {
                let (lo, hi) = (d(a)?, d(b)?);
                if hi < lo {
                    return Err(format!("'{s}': the range must go up, e.g. 500ms..3s"));
                }
                Ok(Think { lo, hi })
            }
            None => {
                let t = d(s)?;
                Ok(Think { lo: t, hi: t })
            }
        }
    }

    pub fn text(&self) -> String {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if self.lo == self.hi {
            show(self.lo)
        } else {
            format!("{}..{}", show(self.lo), show(self.hi))
        }
    }

    pub fn draw(&self, rng: &mut impl Rng) -> Duration {
        if self.hi <= self.lo {
            return self.lo;
        }
        Duration::from_secs_f64(rng.random_range(self.lo.as_secs_f64()..=self.hi.as_secs_f64()))
    }
}

/// Where the user messages come from.
#[derive(Clone)]
pub enum Users {
    /// Synthetic messages of the aligned length, unique per turn.
    Synthetic(Arc<Synthetic>),
    /// A file's conversations, taken in a seeded shuffled order.
    Listed(Arc<Vec<Vec<String>>>, Arc<Vec<usize>>),
}

/// Everything the sessions of a point share.
#[derive(Clone)]
pub struct Sessions {
    pub api: Api,
    pub users: Users,
    pub turns: Turns,
    pub think: Think,
    pub seed: u64,
}

impl Workload for Sessions {
    fn next(&self, seq: u64, _id: u64, bodies: &Arc<Bodies>) -> Unit {
        Unit::Session(Box::new(Conversation {
            script: self.script(seq),
            api: self.api,
            bodies: bodies.clone(),
            target: self.first_target(),
        }))
    }

    /// Sessions per point unless `-n` or `--duration` says: a closed loop runs at least 16 and
    /// 2 per slot, an open loop 10 s of its session rate; `--duration`: a time budget (the
    /// run's rule).
    fn budget(&self, load: &Load, asked: Asked) -> Option<Budget> {
        if asked.duration.is_some() {
            return None;
        }
        Some(Budget::Requests(asked.requests.unwrap_or(match *load {
            Load::Closed { concurrency } => (u64::from(concurrency) * 2).max(16),
            Load::Open { rate_rps, .. } => ((rate_rps * 10.0).ceil() as u64).max(10),
            Load::Trace { .. } => 0,
        })))
    }

    /// The turns and think times asked for, and the sessions started (its turn-1 requests).
    fn describe(&self, _load: &Load, s: &mut servbench::record::SummaryRecord) {
        s.turns = Some(self.turns.text());
        s.think_time = Some(self.think.text());
        s.sessions = Some(
            s.by_turn
                .iter()
                .find(|t| t.turn == 1)
                .map_or(0, |t| t.requests),
        );
    }
}

/// One session's script: its user messages (one per turn) and think times.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    pub users: Vec<String>,
    /// Before turns 2.. (one fewer than the turns).
    pub think: Vec<Duration>,
}

impl Sessions {
    /// The prompt length turn 1 aims for (synthetic messages only).
    pub fn first_target(&self) -> Option<u32> {
        match &self.users {
            Users::Synthetic(s) => Some(s.target_tokens),
            Users::Listed(..) => None,
        }
    }

    /// The script of the run's `seq`-th session (unique across the run, as synthetic
    /// prompts are).
    pub fn script(&self, seq: u64) -> Script {
        let mut rng = StdRng::seed_from_u64(self.seed ^ seq.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let users: Vec<String> = match &self.users {
            Users::Synthetic(s) => {
                let n = self.turns.draw(&mut rng, None);
                (0..n)
                    .map(|t| s.text(Some((seq << 8) ^ u64::from(t)), None, self.seed))
                    .collect()
            }
            Users::Listed(all, order) => {
                let c = &all[order[(seq % order.len() as u64) as usize]];
                let n = self.turns.draw(&mut rng, Some(c.len() as u32));
                c[..n as usize].to_vec()
            }
        };
        let think = (1..users.len())
            .map(|_| self.think.draw(&mut rng))
            .collect();
        Script { users, think }
    }
}

/// A conversation so far: user messages and the replies to them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct History {
    /// (user message, reply), the last reply absent while its turn runs.
    turns: Vec<(String, Option<String>)>,
}

/// Between turns in a completions prompt (chat keeps them as messages).
const SEPARATOR: &str = "\n\n";

impl History {
    pub fn ask(&mut self, user: &str) {
        self.turns.push((user.to_string(), None));
    }

    pub fn answer(&mut self, reply: String) {
        if let Some(last) = self.turns.last_mut() {
            last.1 = Some(reply);
        }
    }

    /// The prompt of the current turn: every earlier turn with its reply, then the new user
    /// message. For completions the reply follows its prompt directly (a completion continues
    /// the text), so each turn's prompt begins with the whole previous prompt and its reply.
    pub fn prompt(&self, api: Api) -> PromptText {
        match api {
            Api::Chat => {
                let mut m = Vec::with_capacity(self.turns.len() * 2);
                for (user, reply) in &self.turns {
                    m.push(json!({"role": "user", "content": user}));
                    if let Some(r) = reply {
                        m.push(json!({"role": "assistant", "content": r}));
                    }
                }
                PromptText::Messages(Value::Array(m))
            }
            Api::Completions => {
                let mut text = String::new();
                for (i, (user, reply)) in self.turns.iter().enumerate() {
                    if i > 0 {
                        text.push_str(SEPARATOR);
                    }
                    text.push_str(user);
                    if let Some(r) = reply {
                        text.push_str(r);
                    }
                }
                PromptText::Text(text)
            }
        }
    }
}

/// One session as the dispatcher starts it.
struct Conversation {
    script: Script,
    api: Api,
    bodies: Arc<Bodies>,
    /// The prompt length turn 1 aims for (synthetic messages only).
    target: Option<u32>,
}

impl Session for Conversation {
    fn run(self: Box<Self>, lane: Arc<InFlight>, slot: Slot) -> Task {
        Box::pin(session(lane, *self, slot))
    }
}

/// Runs one session, turn after turn, holding its slot throughout: each turn's prompt is the
/// history so far plus the next user message, and is meant to leave `think` after the previous
/// reply ended (no further turn after a stop, after the time budget's end, or once a turn
/// failed: there is no reply to build on). Every turn's record goes to the collector as it
/// finishes.
async fn session(shared: Arc<InFlight>, c: Conversation, mut slot: Slot) {
    let Conversation {
        script,
        api,
        bodies,
        target,
    } = c;
    let max_tokens = bodies.max_tokens;
    let mut history = History::default();
    let mut intended = slot.intended;
    for (k, user) in script.users.iter().enumerate() {
        if k > 0 && (slot.end.is_some_and(|e| intended >= e) || !shared.wait_until(intended).await)
        {
            return;
        }
        history.ask(user);
        let body = bodies.build(&history.prompt(api), max_tokens);
        let id = shared.requests.fetch_add(1, Ordering::Relaxed);
        let (mut o, dispatched, cancelled) =
            execute(&shared, body, intended, Some(String::new())).await;
        let reply = o.reply.take().unwrap_or_default();
        let last = o.failure.is_some() || k + 1 == script.users.len();
        let next = o.end + script.think.get(k).copied().unwrap_or_default();
        let finished = Finished {
            id,
            intended,
            dispatched,
            outcome: o,
            target: target.filter(|_| k == 0),
            max_tokens,
            turn: Some((slot.id, k as u32 + 1)),
        };
        if last {
            deliver(&shared, finished, slot.permit.take(), cancelled).await;
            return;
        }
        let _ = shared.tx.send(finished);
        history.answer(reply);
        intended = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn turns_and_think_times_parse() {
        assert_eq!(Turns::parse("3").unwrap(), Turns::Fixed(3));
        assert_eq!(Turns::parse("2..6").unwrap(), Turns::Range(2, 6));
        assert_eq!(Turns::parse("all").unwrap(), Turns::All);
        for bad in ["0", "6..2", "x", "1..0"] {
            assert!(Turns::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Turns::Range(2, 6).text(), "2..6");
        let t = Think::parse("500ms..2s").unwrap();
        assert_eq!(
            (t.lo, t.hi),
            (Duration::from_millis(500), Duration::from_secs(2))
        );
        assert_eq!(t.text(), "500ms..2s");
        assert_eq!(Think::parse("0").unwrap().text(), "0s");
        assert!(Think::parse("2s..1s").is_err());
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let d = t.draw(&mut rng);
            assert!(d >= t.lo && d <= t.hi);
            let n = Turns::Range(2, 6).draw(&mut rng, None);
            assert!((2..=6).contains(&n));
            assert_eq!(
                Turns::Fixed(5).draw(&mut rng, Some(3)),
                3,
                "a file's own turns"
            );
            assert_eq!(Turns::All.draw(&mut rng, Some(4)), 4);
        }
    }

    #[test]
    fn each_turns_prompt_holds_the_earlier_turns_and_their_replies() {
        let mut h = History::default();
        h.ask("u1");
        assert_eq!(h.prompt(Api::Completions), PromptText::Text("u1".into()));
        h.answer(" r1".into());
        h.ask("u2");
        h.answer(" r2".into());
        h.ask("u3");
        assert_eq!(
            h.prompt(Api::Completions),
            PromptText::Text("u1 r1\n\nu2 r2\n\nu3".into())
        );
        assert_eq!(
            h.prompt(Api::Chat),
            PromptText::Messages(json!([
                {"role": "user", "content": "u1"},
                {"role": "assistant", "content": " r1"},
                {"role": "user", "content": "u2"},
                {"role": "assistant", "content": " r2"},
                {"role": "user", "content": "u3"},
            ]))
        );
    }

    #[test]
    fn scripts_follow_the_seed_and_keep_synthetic_turns_unique() {
        let mut syn = Synthetic::new(32, 32, 0, 7);
        syn.resize(32, 7);
        let sessions = Sessions {
            api: Api::Chat,
            users: Users::Synthetic(Arc::new(syn)),
            turns: Turns::Range(2, 4),
            think: Think::parse("1s..2s").unwrap(),
            seed: 7,
        };
        let a = sessions.script(5);
        assert_eq!(a, sessions.script(5), "reproducible");
        assert!((2..=4).contains(&a.users.len()));
        assert_eq!(a.think.len(), a.users.len() - 1);
        let b = sessions.script(6);
        for u in &a.users {
            assert_eq!(u.split(' ').count(), 32);
            assert!(!b.users.contains(u), "no two turns alike");
        }
        assert_ne!(a.users[0], a.users[1]);
    }
}
