//! The TTFT split of one point from its requests' server timing ([`TtftSplit`]): sums kept
//! exactly so points merge (ranks, repeats); rebuilt from a summary's means times its count.

use crate::record::{RequestRecord, TimingSource, TtftSplit};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SplitAcc {
    source: Option<TimingSource>,
    n: u64,
    client: f64,
    queue_n: u64,
    queue: f64,
    prefill: f64,
    outside: f64,
    generation_n: u64,
    generation: f64,
    /// The P/D parts: (count, sum) of the KV transfer, the decode queue, the first decode step
    /// and the proxy's hops.
    pd: [(u64, f64); 4],
    over: u64,
    over_max: Option<f64>,
}

impl SplitAcc {
    pub fn add(&mut self, r: &RequestRecord) {
        let (Some(t), Some(client), true) = (&r.server_timing, r.ttft_ms, r.is_ok()) else {
            return;
        };
        let (Some(server), Some(prefill)) = (t.ttft_ms, t.prefill_ms) else {
            return;
        };
        self.source.get_or_insert_with(|| t.source.clone());
        // A server time above the client's for the same span (TTFT; generation, which the
        // client's whole request contains) means the clocks or the definitions differ.
        let generation_over = match (t.generation_ms, r.e2e_ms) {
            (Some(g), Some(e2e)) if g > e2e => g - e2e,
            _ => 0.0,
        };
        if server > client || generation_over > 0.0 {
            self.over += 1;
            let by = (server - client).max(generation_over);
            self.over_max = Some(self.over_max.map_or(by, |m| m.max(by)));
            return;
        }
        self.n += 1;
        self.client += client;
        self.prefill += prefill;
        self.outside += client - server;
        if let Some(q) = t.queue_ms {
            self.queue_n += 1;
            self.queue += q;
        }
        if let Some(g) = t.generation_ms {
            self.generation_n += 1;
            self.generation += g;
        }
        for (acc, part) in self.pd.iter_mut().zip([
            t.kv_transfer_ms,
            t.decode_queue_ms,
            t.first_decode_ms,
            t.proxy_ms,
        ]) {
            if let Some(x) = part {
                *acc = (acc.0 + 1, acc.1 + x);
            }
        }
    }

    pub fn merge(&mut self, o: &SplitAcc) {
        if self.source.is_none() {
            self.source.clone_from(&o.source);
        }
        self.n += o.n;
        self.client += o.client;
        self.queue_n += o.queue_n;
        self.queue += o.queue;
        self.prefill += o.prefill;
        self.outside += o.outside;
        self.generation_n += o.generation_n;
        self.generation += o.generation;
        for (a, b) in self.pd.iter_mut().zip(o.pd) {
            *a = (a.0 + b.0, a.1 + b.1);
        }
        self.over += o.over;
        self.over_max = match (self.over_max, o.over_max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
    }

    /// From a summary's means (each times the count it is over).
    pub fn from_record(s: Option<&TtftSplit>) -> SplitAcc {
        let Some(s) = s else {
            return SplitAcc::default();
        };
        let n = s.requests as f64;
        SplitAcc {
            source: Some(s.source.clone()),
            n: s.requests,
            client: s.client_ttft_ms * n,
            queue_n: if s.engine_queue_ms.is_some() {
                s.requests
            } else {
                0
            },
            queue: s.engine_queue_ms.unwrap_or(0.0) * n,
            prefill: s.engine_prefill_ms * n,
            outside: s.outside_ms * n,
            generation_n: if s.engine_generation_ms.is_some() {
                s.requests
            } else {
                0
            },
            generation: s.engine_generation_ms.unwrap_or(0.0) * n,
            pd: [
                s.kv_transfer_ms,
                s.decode_queue_ms,
                s.first_decode_ms,
                s.proxy_ms,
            ]
            .map(|m| m.map_or((0, 0.0), |m| (s.requests, m * n))),
            over: s.server_over_client,
            over_max: s.server_over_client_max_ms,
        }
    }

    /// The summary's `ttft_split`; None when no request carried server timing.
    pub fn record(&self) -> Option<TtftSplit> {
        let source = self.source.clone()?;
        let n = self.n.max(1) as f64;
        let mean = |count: u64, sum: f64| (count > 0).then(|| sum / count as f64);
        Some(TtftSplit {
            source,
            requests: self.n,
            client_ttft_ms: self.client / n,
            engine_queue_ms: mean(self.queue_n, self.queue),
            engine_prefill_ms: self.prefill / n,
            outside_ms: self.outside / n,
            engine_generation_ms: mean(self.generation_n, self.generation),
            kv_transfer_ms: mean(self.pd[0].0, self.pd[0].1),
            decode_queue_ms: mean(self.pd[1].0, self.pd[1].1),
            first_decode_ms: mean(self.pd[2].0, self.pd[2].1),
            proxy_ms: mean(self.pd[3].0, self.pd[3].1),
            server_over_client: self.over,
            server_over_client_max_ms: self.over_max,
        })
    }
}
