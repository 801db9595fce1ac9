//! The engine's own timing of one request (the `server_timing` of a `request` record), as the
//! engine sent it in its answer: vLLM's `metrics` (`--enable-per-request-metrics`; srv-sim's
//! the same) or llama-server's `timings`. Milliseconds on the engine's clock.

use super::TimingSource;
use serde::{Deserialize, Serialize};

/// One request's server-side times. A figure the engine did not send is absent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ServerTiming {
    /// Whose figures: `vllm` (the `metrics` object: vLLM, srv-sim) or `llamacpp` (`timings`).
    pub source: TimingSource,
    /// In the engine's queue before it was first scheduled (vLLM `queue_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ms: Option<f64>,
    /// From first scheduled to the first token: the prefill (vLLM `time_to_first_token_ms`,
    /// which leaves the queue out; llama-server `prompt_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_ms: Option<f64>,
    /// The engine's TTFT from its receipt of the request: queue + prefill (prefill alone where
    /// the engine does not tell its queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// From the first token to the last (vLLM `generation_time_ms`, llama-server
    /// `predicted_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_ms: Option<f64>,
    /// vLLM `mean_itl_ms` (generation time over tokens − 1); llama-server
    /// `predicted_per_token_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_itl_ms: Option<f64>,
}

impl ServerTiming {
    /// Reads the `metrics` (vLLM) or `timings` (llama-server) object of an answer or chunk;
    /// None when it has neither. A figure that is not a finite number of 0 ms or more (up to a
    /// year) is left out, and named in the second value.
    pub fn from_answer(v: &serde_json::Value) -> Option<(ServerTiming, Vec<String>)> {
        let mut bad = Vec::new();
        let mut num = |obj: &serde_json::Value, key: &str| -> Option<f64> {
            let x = obj.get(key)?;
            match x.as_f64() {
                Some(f) if (0.0..=MAX_MS).contains(&f) => Some(f),
                _ if x.is_null() => None,
                _ => {
                    bad.push(format!("{key} {x}"));
                    None
                }
            }
        };
        let t = if let Some(m) = v.get("metrics").filter(|m| m.is_object()) {
            let queue_ms = num(m, "queue_time_ms");
            let prefill_ms = num(m, "time_to_first_token_ms");
            ServerTiming {
                source: TimingSource::Vllm,
                queue_ms,
                prefill_ms,
                ttft_ms: prefill_ms.map(|p| p + queue_ms.unwrap_or(0.0)),
                generation_ms: num(m, "generation_time_ms"),
                mean_itl_ms: num(m, "mean_itl_ms"),
            }
        } else if let Some(t) = v.get("timings").filter(|t| t.is_object()) {
            let prefill_ms = num(t, "prompt_ms");
            ServerTiming {
                source: TimingSource::Llamacpp,
                queue_ms: None,
                prefill_ms,
                ttft_ms: prefill_ms,
                generation_ms: num(t, "predicted_ms"),
                mean_itl_ms: num(t, "predicted_per_token_ms"),
            }
        } else {
            return None;
        };
        Some((t, bad))
    }
}

/// A point's TTFT split by the engine's own timing (the `ttft_split` of a `summary`): means
/// over the point's successful requests that carried a server TTFT no larger than their client
/// TTFT and a server generation time no larger than their client end-to-end time. A request
/// whose server time exceeds the client's (the clocks or the definitions differ) is counted in
/// `server_over_client`, not in the split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct TtftSplit {
    /// Whose figures (`vllm`, `llamacpp`), as [`ServerTiming::source`].
    pub source: TimingSource,
    /// Requests the means are over.
    pub requests: u64,
    /// Mean client TTFT of those requests.
    pub client_ttft_ms: f64,
    /// Mean time in the engine's queue (absent where the engine does not tell it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_queue_ms: Option<f64>,
    /// Mean prefill: from first scheduled to the first token.
    pub engine_prefill_ms: f64,
    /// Mean client TTFT minus server TTFT: the network, the frontend (tokenization, HTTP) and
    /// the client.
    pub outside_ms: f64,
    /// Mean server generation time (first token to last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_generation_ms: Option<f64>,
    /// Requests whose server TTFT exceeded their client TTFT, or whose server generation time
    /// exceeded their client end-to-end time, and by how much at most.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub server_over_client: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_over_client_max_ms: Option<f64>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A year in milliseconds.
const MAX_MS: f64 = 365.0 * 24.0 * 3600.0 * 1000.0;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn vllm_metrics_and_llama_timings_read_into_one_shape() {
        let v = json!({"metrics": {"queue_time_ms": 2.0, "time_to_first_token_ms": 5.5,
            "generation_time_ms": 30.0, "mean_itl_ms": 10.0, "tokens_per_second": 100.0}});
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert!(bad.is_empty());
        assert_eq!(t.source, "vllm");
        assert_eq!(
            (t.queue_ms, t.prefill_ms, t.ttft_ms),
            (Some(2.0), Some(5.5), Some(7.5))
        );
        let l = json!({"timings": {"prompt_n": 8, "prompt_ms": 3.25, "predicted_n": 4,
            "predicted_ms": 12.0, "predicted_per_token_ms": 3.0}});
        let (t, _) = ServerTiming::from_answer(&l).unwrap();
        assert_eq!(t.source, "llamacpp");
        assert_eq!((t.queue_ms, t.ttft_ms), (None, Some(3.25)));
        assert!(ServerTiming::from_answer(&json!({"usage": {}})).is_none());
    }

    #[test]
    fn a_figure_that_is_not_a_time_is_left_out_and_named() {
        let v = json!({"metrics": {"queue_time_ms": -1.0, "time_to_first_token_ms": "x"}});
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert_eq!((t.queue_ms, t.prefill_ms, t.ttft_ms), (None, None, None));
        assert_eq!(bad, ["queue_time_ms -1.0", "time_to_first_token_ms \"x\""]);
    }
}
