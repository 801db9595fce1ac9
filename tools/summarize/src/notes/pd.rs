//! Notes from a disaggregated (P/D) layout's TTFT split (the summaries' `ttft_split` with the
//! KV transfer and the decode side's parts): each point's TTFT by role (the prefill servers'
//! queue and prefill, the KV transfer, the decode servers' queue and first step), and which of
//! the three limits it.

use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::render::human;
use servbench::record::TtftSplit;

/// The three parts of a P/D TTFT a layout can change: more prefill servers, a faster link,
/// more decode servers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PdPart {
    Prefill,
    Transfer,
    Decode,
}

/// The five parts of a P/D TTFT, in the order a request meets them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TtftPart {
    PrefillQueue,
    Prefill,
    KvTransfer,
    DecodeQueue,
    FirstDecode,
}

impl TtftPart {
    pub fn name(self) -> &'static str {
        match self {
            TtftPart::PrefillQueue => "prefill queue",
            TtftPart::Prefill => "prefill",
            TtftPart::KvTransfer => "KV transfer",
            TtftPart::DecodeQueue => "decode queue",
            TtftPart::FirstDecode => "first decode step",
        }
    }

    /// What would shorten the part, for a layout it limits.
    pub fn remedy(self) -> &'static str {
        match self {
            TtftPart::PrefillQueue => "add a prefill instance",
            TtftPart::Prefill => {
                "more prefill instances where prompts share its steps, else more TP on the prefill side"
            }
            TtftPart::KvTransfer => {
                "a faster link between the instances (NVLink), or fewer KV bytes (an FP8 KV cache)"
            }
            TtftPart::DecodeQueue => "add a decode instance",
            TtftPart::FirstDecode => {
                "the decode step itself, long in a full batch: add a decode instance"
            }
        }
    }
}

/// One point's P/D split, means over its repeats (ms).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PdSplit {
    pub client: f64,
    pub prefill_queue: f64,
    pub prefill: f64,
    pub transfer: f64,
    pub decode_queue: f64,
    pub first_decode: f64,
    /// The time in the proxy and its hops to the members, where the proxy told it.
    pub proxy: Option<f64>,
    pub outside: f64,
}

impl PdSplit {
    /// A point's split, where its repeats carry the P/D parts.
    pub fn of(p: &Point) -> Option<PdSplit> {
        let splits: Vec<&TtftSplit> = p
            .repeats
            .iter()
            .filter_map(|s| s.ttft_split.as_ref())
            .filter(|t| t.requests > 0 && t.kv_transfer_ms.is_some() && t.first_decode_ms.is_some())
            .collect();
        if splits.is_empty() {
            return None;
        }
        let n = splits.len() as f64;
        let mean = |f: &dyn Fn(&TtftSplit) -> f64| splits.iter().map(|t| f(t)).sum::<f64>() / n;
        Some(PdSplit {
            client: mean(&|t| t.client_ttft_ms),
            prefill_queue: mean(&|t| t.engine_queue_ms.unwrap_or(0.0)),
            prefill: mean(&|t| t.engine_prefill_ms),
            transfer: mean(&|t| t.kv_transfer_ms.unwrap_or(0.0)),
            decode_queue: mean(&|t| t.decode_queue_ms.unwrap_or(0.0)),
            first_decode: mean(&|t| t.first_decode_ms.unwrap_or(0.0)),
            proxy: splits
                .iter()
                .all(|t| t.proxy_ms.is_some())
                .then(|| mean(&|t| t.proxy_ms.unwrap_or(0.0))),
            outside: mean(&|t| t.outside_ms),
        })
    }

    /// The five parts (ms), in the order a request meets them.
    pub fn parts(&self) -> [(TtftPart, f64); 5] {
        [
            (TtftPart::PrefillQueue, self.prefill_queue),
            (TtftPart::Prefill, self.prefill),
            (TtftPart::KvTransfer, self.transfer),
            (TtftPart::DecodeQueue, self.decode_queue),
            (TtftPart::FirstDecode, self.first_decode),
        ]
    }

    /// The largest of the five parts, and its share of the client TTFT.
    pub fn largest(&self) -> (TtftPart, f64) {
        let (part, ms) = self
            .parts()
            .into_iter()
            .fold(
                (TtftPart::Prefill, f64::MIN),
                |a, b| if b.1 > a.1 { b } else { a },
            );
        (part, ms / self.client.max(f64::MIN_POSITIVE))
    }

    /// The largest of the prefill side (its queue and prefill), the transfer and the decode
    /// side (its queue and first step), and its share of the client TTFT.
    pub fn limit(&self) -> (PdPart, f64) {
        let parts = [
            (PdPart::Prefill, self.prefill_queue + self.prefill),
            (PdPart::Transfer, self.transfer),
            (PdPart::Decode, self.decode_queue + self.first_decode),
        ];
        let (part, ms) =
            parts.into_iter().fold(
                (PdPart::Prefill, f64::MIN),
                |a, b| if b.1 > a.1 { b } else { a },
            );
        (part, ms / self.client.max(f64::MIN_POSITIVE))
    }
}

fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// Each P/D point's TTFT by role, and what limits it.
pub fn ttft_by_role(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    points
        .iter()
        .filter_map(|p| {
            let s = PdSplit::of(p)?;
            let at = point_name(p, &keys.varying);
            let proxy = s
                .proxy
                .map(|ms| format!(", the proxy and its hops {} ms", human(ms)))
                .unwrap_or_default();
            let parts = format!(
                "P/D TTFT at {at}: {} ms = prefill servers {} ms queue + {} ms prefill, KV transfer {} ms, decode servers {} ms queue + {} ms first step{proxy}, {} ms outside",
                human(s.client),
                human(s.prefill_queue),
                human(s.prefill),
                human(s.transfer),
                human(s.decode_queue),
                human(s.first_decode),
                human(s.outside)
            );
            let (limit, share) = s.limit();
            let verdict = match limit {
                PdPart::Transfer => format!(
                    "KV transfer is {} of TTFT at {at}: the link, not the prefill, limits",
                    pct(share)
                ),
                PdPart::Prefill => format!(
                    "The prefill servers are {} of TTFT at {at}: prefill limits, not the link (KV transfer {}); more prefill servers would shorten it",
                    pct(share),
                    pct(s.transfer / s.client.max(f64::MIN_POSITIVE))
                ),
                PdPart::Decode => format!(
                    "The decode servers' queue and first step are {} of TTFT at {at}: the decode side limits; more decode servers would shorten it",
                    pct(share)
                ),
            };
            Some(format!("{parts}. {verdict}"))
        })
        .collect()
}
