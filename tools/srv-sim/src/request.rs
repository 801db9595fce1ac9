//! One request as both engine loops (fixed latency and modelled steps) keep it: what it has
//! published so far, and the TTFT, ITL and end-to-end figures each publication records.

use crate::abandoned::Abandoned;
use crate::metrics::Metrics;
use crate::step::Submit;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// Per-request bookkeeping shared by both loops.
pub struct Req {
    pub sub: Submit,
    pub published: u32,
    last_publish: Instant,
    /// Steps it ran since its client went away.
    abandoned_steps: u32,
}

impl Req {
    pub fn new(sub: Submit) -> Req {
        let arrival = sub.arrival;
        Req {
            sub,
            published: 0,
            last_publish: arrival,
            abandoned_steps: 0,
        }
    }

    pub fn total(&self) -> u32 {
        self.sub.progress.total
    }

    pub fn cancelled(&self) -> bool {
        self.sub.progress.cancelled.load(Ordering::Relaxed)
    }

    /// Before a step of a running request: whether to drop it now, its client gone.
    pub fn drop_now(&mut self, policy: Abandoned) -> bool {
        self.cancelled() && policy.drop_now(&mut self.abandoned_steps)
    }

    /// Makes `n` more tokens available at `now`, and records TTFT/ITL/e2e.
    pub fn publish(&mut self, n: u32, now: Instant, m: &mut Metrics) {
        if n == 0 {
            return;
        }
        if self.sub.pooling {
            // The prefill's end, not a generated token.
        } else if self.published == 0 {
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
        if !self.sub.pooling {
            m.generation_tokens += u64::from(n);
        }
        self.sub.progress.publish(self.published);
        if self.published >= self.total() {
            m.finished_length += 1;
            m.e2e.observe(secs(now - self.sub.arrival));
        }
    }
}
