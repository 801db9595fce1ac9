//! The engine's own timing of one request (the `server_timing` of a `request` record): as the
//! engine sent it in its answer (vLLM's `metrics`, `--enable-per-request-metrics`, srv-sim's
//! the same; llama-server's `timings`), or as it said it apart and loadgen joined it to the
//! request by the id both sides see (SGLang's per-request time stats in its log, TensorRT-LLM's
//! `GET /perf_metrics`). Milliseconds on the engine's clock.
//!
//! A disaggregated (P/D) request's TTFT has five parts: the prefill server's queue
//! (`queue_ms`) and prefill (`prefill_ms`), the KV cache's transfer (`kv_transfer_ms`), the
//! decode server's queue (`decode_queue_ms`) and its first step (`first_decode_ms`), and where
//! the proxy tells its own TTFT, a sixth: the time in the proxy and its hops to the members
//! (`proxy_ms`, the proxy's TTFT less the five); `ttft_ms` is their sum. They come from the
//! decode server's `metrics` and the prefill server's, which the proxy attaches as
//! `prefill_metrics`, and the proxy's `proxy_metrics` (srv-sim's proxy does both).

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
    /// SGLang's `forward_duration`: from leaving its queue to the request's completion (the
    /// prefill and the decode together; SGLang does not split them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward_ms: Option<f64>,
    /// Disaggregated: the KV cache's transfer from the prefill (context) server to the decode
    /// (generation) server (TensorRT-LLM's `kv_cache_transfer_start`/`_end`; srv-sim's decode
    /// `kv_transfer_ms`: from the request's arrival there to its KV's, the link's queue
    /// included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_ms: Option<f64>,
    /// Disaggregated: in the decode server's queue once the KV had arrived (the decode side's
    /// `queue_time_ms`; where the engine does not tell the transfer apart, the transfer too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_queue_ms: Option<f64>,
    /// Disaggregated: the decode server's first step, from first scheduled to the first token
    /// (the decode side's `time_to_first_token_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_decode_ms: Option<f64>,
    /// Disaggregated: the time in the proxy and its HTTP hops to the members, in neither
    /// member's figures: the proxy's TTFT (`proxy_metrics.time_to_first_token_ms`, from the
    /// request's arrival there to its first token's leaving) less the five parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_ms: Option<f64>,
    /// Prompt tokens the engine reused from its cache (llama-server `cache_n`; its `prompt_n`
    /// then counts only the tokens it evaluated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    /// Speculative decoding: draft tokens proposed, and those accepted (llama-server
    /// `draft_n`, `draft_n_accepted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_accepted_tokens: Option<u32>,
}

/// Figures read from one JSON object, and the names of those that were not what they claim.
struct Figures<'a> {
    obj: &'a serde_json::Value,
    bad: &'a mut Vec<String>,
}

impl Figures<'_> {
    /// A time: a finite number of 0 ms or more, up to a year.
    fn ms(&mut self, key: &str) -> Option<f64> {
        let x = self.obj.get(key)?;
        match x.as_f64() {
            Some(f) if (0.0..=MAX_MS).contains(&f) => Some(f),
            _ if x.is_null() => None,
            _ => {
                self.bad.push(format!("{key} {x}"));
                None
            }
        }
    }

    /// A token count: a whole number no request exceeds.
    fn tokens(&mut self, key: &str) -> Option<u32> {
        let x = self.obj.get(key)?;
        match x.as_u64() {
            Some(n) if n <= super::MAX_REQUEST_TOKENS => Some(n as u32),
            _ if x.is_null() => None,
            _ => {
                self.bad.push(format!("{key} {x}"));
                None
            }
        }
    }

    /// A time in seconds on the engine's clock (TensorRT-LLM's steady clock): finite and not
    /// negative.
    fn seconds(&mut self, key: &str) -> Option<f64> {
        let x = self.obj.get(key)?;
        match x.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 => Some(f),
            _ if x.is_null() => None,
            _ => {
                self.bad.push(format!("{key} {x}"));
                None
            }
        }
    }
}

/// The P/D proxy's own TTFT (`proxy_metrics.time_to_first_token_ms`), where it tells it.
fn proxy_ttft(v: &serde_json::Value, bad: &mut Vec<String>) -> Option<f64> {
    let obj = v.get("proxy_metrics").filter(|m| m.is_object())?;
    Figures { obj, bad }.ms("time_to_first_token_ms")
}

/// `later - earlier` in ms, when both are there and it is a time.
fn between(earlier: Option<f64>, later: Option<f64>) -> Option<f64> {
    let d = (later? - earlier?) * 1e3;
    (0.0..=MAX_MS).contains(&d).then_some(d)
}

impl ServerTiming {
    /// Reads the `metrics` (vLLM) or `timings` (llama-server) object of an answer or chunk;
    /// None when it has neither. A figure that is not a finite number of 0 ms or more (up to a
    /// year), or a count that is not one, is left out, and named in the second value.
    pub fn from_answer(v: &serde_json::Value) -> Option<(ServerTiming, Vec<String>)> {
        let mut bad = Vec::new();
        let prefill_side = v.get("prefill_metrics").filter(|m| m.is_object());
        let t = if let (Some(d), Some(p)) =
            (v.get("metrics").filter(|m| m.is_object()), prefill_side)
        {
            let mut f = Figures {
                obj: p,
                bad: &mut bad,
            };
            let (queue_ms, prefill_ms) = (f.ms("queue_time_ms"), f.ms("time_to_first_token_ms"));
            let mut f = Figures {
                obj: d,
                bad: &mut bad,
            };
            let (kv_transfer_ms, decode_queue_ms, first_decode_ms) = (
                f.ms("kv_transfer_ms"),
                f.ms("queue_time_ms"),
                f.ms("time_to_first_token_ms"),
            );
            let parts = [queue_ms, kv_transfer_ms, decode_queue_ms];
            let members = prefill_ms
                .zip(first_decode_ms)
                .map(|(p, d)| p + d + parts.iter().flatten().sum::<f64>());
            let (generation_ms, mean_itl_ms) = (f.ms("generation_time_ms"), f.ms("mean_itl_ms"));
            let proxy_ms = members.zip(proxy_ttft(v, &mut bad)).and_then(|(m, t)| {
                (t >= m).then_some(t - m).or_else(|| {
                    bad.push(format!(
                        "proxy_metrics.time_to_first_token_ms {t}, under the members' {m} ms"
                    ));
                    None
                })
            });
            ServerTiming {
                source: TimingSource::Vllm,
                queue_ms,
                prefill_ms,
                ttft_ms: members.map(|m| m + proxy_ms.unwrap_or(0.0)),
                generation_ms,
                mean_itl_ms,
                kv_transfer_ms,
                decode_queue_ms,
                first_decode_ms,
                proxy_ms,
                ..ServerTiming::default()
            }
        } else if let Some(m) = v.get("metrics").filter(|m| m.is_object()) {
            let mut f = Figures {
                obj: m,
                bad: &mut bad,
            };
            let queue_ms = f.ms("queue_time_ms");
            let prefill_ms = f.ms("time_to_first_token_ms");
            ServerTiming {
                source: TimingSource::Vllm,
                queue_ms,
                prefill_ms,
                ttft_ms: prefill_ms.map(|p| p + queue_ms.unwrap_or(0.0)),
                generation_ms: f.ms("generation_time_ms"),
                mean_itl_ms: f.ms("mean_itl_ms"),
                ..ServerTiming::default()
            }
        } else if let Some(t) = v.get("timings").filter(|t| t.is_object()) {
            let mut f = Figures {
                obj: t,
                bad: &mut bad,
            };
            let prefill_ms = f.ms("prompt_ms");
            ServerTiming {
                source: TimingSource::Llamacpp,
                prefill_ms,
                ttft_ms: prefill_ms,
                generation_ms: f.ms("predicted_ms"),
                mean_itl_ms: f.ms("predicted_per_token_ms"),
                cached_tokens: f.tokens("cache_n"),
                draft_tokens: f.tokens("draft_n"),
                draft_accepted_tokens: f.tokens("draft_n_accepted"),
                ..ServerTiming::default()
            }
        } else {
            return None;
        };
        Some((t, bad))
    }

    /// One record of TensorRT-LLM's `GET /perf_metrics` (`{"request_id": N, "perf_metrics":
    /// {"timing_metrics": {"arrival_time", "first_scheduled_time", "first_token_time",
    /// "last_token_time", "kv_cache_transfer_start"/"_end"}}}`, seconds on its steady clock):
    /// its request id and timing. None for a record without a request id or timing.
    pub fn from_trtllm_perf(v: &serde_json::Value) -> Option<(String, ServerTiming, Vec<String>)> {
        let id = match v.get("request_id")? {
            serde_json::Value::Number(n) => n.to_string(),
            serde_json::Value::String(s) => s.chars().take(128).collect(),
            _ => return None,
        };
        let tm = v.get("perf_metrics")?.get("timing_metrics")?;
        let mut bad = Vec::new();
        let mut f = Figures {
            obj: tm,
            bad: &mut bad,
        };
        let arrival = f.seconds("arrival_time");
        let scheduled = f.seconds("first_scheduled_time");
        let first = f.seconds("first_token_time");
        let last = f.seconds("last_token_time");
        let kv = between(
            f.seconds("kv_cache_transfer_start"),
            f.seconds("kv_cache_transfer_end"),
        );
        let t = ServerTiming {
            source: TimingSource::Trtllm,
            queue_ms: between(arrival, scheduled),
            prefill_ms: between(scheduled, first),
            ttft_ms: between(arrival, first),
            generation_ms: between(first, last),
            kv_transfer_ms: kv,
            ..ServerTiming::default()
        };
        Some((id, t, bad))
    }

    /// SGLang's per-request time stats as its log line gives them (`queue_duration=1.23ms,
    /// forward_duration=45.67ms`): the queue, and the forward (prefill and decode together).
    pub fn sglang(queue_ms: Option<f64>, forward_ms: Option<f64>) -> ServerTiming {
        ServerTiming {
            source: TimingSource::Sglang,
            queue_ms,
            forward_ms,
            ..ServerTiming::default()
        }
    }

    /// Whether `answer_id` (the `id` of the answer the client got) is the request the engine
    /// calls `engine_id`: the same, or the engine's id after the answer's prefix
    /// (`chatcmpl-42` for TensorRT-LLM's request 42).
    pub fn same_request(answer_id: &str, engine_id: &str) -> bool {
        answer_id == engine_id
            || answer_id
                .strip_suffix(engine_id)
                .is_some_and(|p| p.ends_with('-'))
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
    /// Disaggregated (P/D): the means of the KV transfer, the decode server's queue and its
    /// first step, over the requests that told each; `engine_queue_ms` and
    /// `engine_prefill_ms` are then the prefill server's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_queue_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_decode_ms: Option<f64>,
    /// Disaggregated: the mean time in the proxy and its hops to the members (over the
    /// requests whose proxy told its TTFT), in neither member's parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_ms: Option<f64>,
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
    fn llama_servers_cache_and_draft_counts_are_read() {
        let l = json!({"timings": {"prompt_n": 12, "prompt_ms": 3.0, "cache_n": 1073,
            "predicted_n": 20, "predicted_ms": 40.0, "draft_n": 24, "draft_n_accepted": 18}});
        let (t, bad) = ServerTiming::from_answer(&l).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            (t.cached_tokens, t.draft_tokens, t.draft_accepted_tokens),
            (Some(1073), Some(24), Some(18))
        );
        let (_, bad) = ServerTiming::from_answer(&json!({"timings": {"cache_n": -1}})).unwrap();
        assert_eq!(bad, ["cache_n -1"]);
    }

    #[test]
    fn the_verbatim_llama_server_chunk_reads_as_llama_means_it() {
        let sample = include_str!(
            "../../tests/fixtures/engine-self-report/llamacpp_timings_and_startup.txt"
        );
        let chunk = sample.lines().find(|l| l.starts_with('{')).unwrap();
        let (t, bad) = ServerTiming::from_answer(&serde_json::from_str(chunk).unwrap()).unwrap();
        assert!(bad.is_empty());
        assert_eq!(t.source, "llamacpp");
        assert_eq!(
            (t.prefill_ms, t.generation_ms),
            (Some(203.378), Some(933.63))
        );
        assert_eq!(t.mean_itl_ms, Some(3.7798785425101213));
        // No queue in llama-server's timings: its TTFT is its prompt time.
        assert_eq!(
            (t.queue_ms, t.ttft_ms, t.cached_tokens),
            (None, Some(203.378), None)
        );
    }

    #[test]
    fn a_tensorrt_llm_perf_record_gives_queue_prefill_and_generation() {
        let v = json!({"request_id": 42, "perf_metrics": {"first_iter": 3, "last_iter": 9,
            "timing_metrics": {"arrival_time": 100.0, "first_scheduled_time": 100.002,
            "first_token_time": 100.012, "last_token_time": 100.112,
            "kv_cache_transfer_start": 100.003, "kv_cache_transfer_end": 100.0035}}});
        let (id, t, bad) = ServerTiming::from_trtllm_perf(&v).unwrap();
        assert!(bad.is_empty());
        assert_eq!((id.as_str(), t.source.as_str()), ("42", "trtllm"));
        let r = |x: Option<f64>| (x.unwrap() * 1e3).round() / 1e3;
        assert_eq!(
            (
                r(t.queue_ms),
                r(t.prefill_ms),
                r(t.ttft_ms),
                r(t.generation_ms)
            ),
            (2.0, 10.0, 12.0, 100.0)
        );
        assert_eq!(r(t.kv_transfer_ms), 0.5);
        assert!(ServerTiming::same_request("chatcmpl-42", "42"));
        assert!(!ServerTiming::same_request("chatcmpl-142", "42"));
        assert!(ServerTiming::same_request("abc", "abc"));
    }

    #[test]
    fn a_disaggregated_answer_splits_its_ttft_in_five() {
        let v = json!({"metrics": {"queue_time_ms": 0.5, "time_to_first_token_ms": 9.0,
            "kv_transfer_ms": 14.0, "generation_time_ms": 30.0, "mean_itl_ms": 10.0},
            "prefill_metrics": {"queue_time_ms": 2.0, "time_to_first_token_ms": 100.0,
            "generation_time_ms": 0.0}});
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(
            (t.queue_ms, t.prefill_ms, t.kv_transfer_ms),
            (Some(2.0), Some(100.0), Some(14.0))
        );
        assert_eq!(
            (t.decode_queue_ms, t.first_decode_ms),
            (Some(0.5), Some(9.0))
        );
        assert_eq!(t.ttft_ms, Some(2.0 + 100.0 + 14.0 + 0.5 + 9.0));
        assert_eq!((t.generation_ms, t.mean_itl_ms), (Some(30.0), Some(10.0)));
        assert_eq!(t.proxy_ms, None, "no proxy_metrics, no sixth part");
        // A colocated answer has none of the decode side's parts.
        let (c, _) = ServerTiming::from_answer(&json!({"metrics": {"queue_time_ms": 1.0,
            "time_to_first_token_ms": 5.0}}))
        .unwrap();
        assert_eq!((c.kv_transfer_ms, c.first_decode_ms), (None, None));
    }

    #[test]
    fn the_proxys_own_ttft_makes_its_hops_a_sixth_part() {
        let mut v = json!({"metrics": {"queue_time_ms": 0.5, "time_to_first_token_ms": 9.0,
            "kv_transfer_ms": 14.0},
            "prefill_metrics": {"queue_time_ms": 2.0, "time_to_first_token_ms": 100.0},
            "proxy_metrics": {"time_to_first_token_ms": 126.0}});
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(t.proxy_ms, Some(126.0 - 125.5));
        assert_eq!(
            t.ttft_ms,
            Some(126.0),
            "the six parts add up to the proxy's TTFT"
        );
        // A proxy's TTFT under its members' parts is not a time in it: named, left out.
        v["proxy_metrics"]["time_to_first_token_ms"] = json!(120.0);
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert_eq!((t.proxy_ms, t.ttft_ms), (None, Some(125.5)));
        assert_eq!(
            bad,
            ["proxy_metrics.time_to_first_token_ms 120, under the members' 125.5 ms"]
        );
    }

    #[test]
    fn a_figure_that_is_not_a_time_is_left_out_and_named() {
        let v = json!({"metrics": {"queue_time_ms": -1.0, "time_to_first_token_ms": "x"}});
        let (t, bad) = ServerTiming::from_answer(&v).unwrap();
        assert_eq!((t.queue_ms, t.prefill_ms, t.ttft_ms), (None, None, None));
        assert_eq!(bad, ["queue_time_ms -1.0", "time_to_first_token_ms \"x\""]);
    }
}
