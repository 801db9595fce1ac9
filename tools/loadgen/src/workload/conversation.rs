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

use super::prompts::Synthetic;
use super::{Session, Task, Unit, Workload};
use crate::client::body::Bodies;
use crate::client::body::{Api, PromptText};
use crate::client::inflight::{Finished, InFlight, Slot, deliver, execute};
use crate::client::request::Outcome;
use crate::client::wire::Form;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub use servbench::load::{Think, Turns};

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
        match api.wire().form() {
            Form::Messages => {
                let mut m = Vec::with_capacity(self.turns.len() * 2);
                for (user, reply) in &self.turns {
                    m.push(json!({"role": "user", "content": user}));
                    if let Some(r) = reply {
                        m.push(json!({"role": "assistant", "content": r}));
                    }
                }
                PromptText::Messages(Value::Array(m))
            }
            Form::Text => {
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
        let id = shared.requests.fetch_add(1, Ordering::Relaxed);
        let body = bodies.build(id, &history.prompt(api), max_tokens);
        let asked = if shared.record_text {
            Outcome::recording(max_tokens)
        } else {
            Outcome {
                reply: Some(String::new()),
                ..Outcome::expecting(max_tokens)
            }
        };
        let (mut o, dispatched, cancelled) = execute(&shared, body, intended, asked, None).await;
        // Its record keeps the text too where --record-text asks for it.
        let reply = match shared.record_text {
            true => o.reply.clone(),
            false => o.reply.take(),
        }
        .unwrap_or_default();
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
            question: None,
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
