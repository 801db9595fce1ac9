//! TensorRT-LLM's self-report, read once per point: where the upstream `server` record says
//! the server takes TensorRT-LLM's LLM-API options (`--extra_llm_api_options`, which srv-launch
//! `--self-report` writes; srv-sim speaking it the same), loadgen empties `GET /perf_metrics`
//! and `GET /metrics` when the point starts (what they held is an earlier point's) and reads
//! them when it ends: the per-request timing records, joined to the point's request records by
//! the id both sides see (the answer's `chatcmpl-42` is request 42: `server_timing` with source
//! `trtllm`), and the iteration stats, the point's steps (`engine_steps`).
//!
//! Both endpoints are emptied by each read (trtllm-serve keeps the last
//! `perf_metrics_max_requests` records and its stats queue): one reader per server, so a run of
//! several ranks does not read them. Every read is bounded (the scrape's timeout, at most
//! [`MAX_REPORT_BYTES`]); an answer that is not a JSON list, a record without an id or timing,
//! a figure that is not a time: one note each per run, never fatal.

use crate::client::http::Pool;
use bytes::Bytes;
use servbench::cli;
use servbench::jsonl::excerpt;
use servbench::record::EngineSteps;
use servbench::record::{ServerRecord, ServerTiming};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// The most of one `/perf_metrics` or `/metrics` answer read: 65,536 records of ~400 bytes.
pub const MAX_REPORT_BYTES: usize = 32 << 20;
/// A reason quoted in a note is cut to this many characters.
const REASON: usize = 160;

/// The server's TensorRT-LLM self-report, read at each point's edges.
pub struct TrtllmReport {
    /// Notes already given (each once per run).
    noted: BTreeSet<String>,
    /// When the point's window opened (its reads at the start done).
    started: Option<Instant>,
}

/// What a point's end read.
#[derive(Debug, Default)]
pub struct PointReport {
    /// Each finished request's timing, by the engine's request id.
    pub timing: HashMap<String, ServerTiming>,
    /// The iteration stats, one object per step.
    pub stats: Vec<serde_json::Value>,
    /// The point's window: from its start's reads to its end's.
    pub window_s: f64,
}

impl PointReport {
    /// The timing of the request the client's answer named `answer_id`.
    pub fn timing_of(&self, answer_id: &str) -> Option<&ServerTiming> {
        if let Some(t) = self.timing.get(answer_id) {
            return Some(t);
        }
        // `chatcmpl-42`, `cmpl-42`: the engine's id after the answer's prefix.
        let (_, id) = answer_id.rsplit_once('-')?;
        self.timing
            .get(id)
            .filter(|_| ServerTiming::same_request(answer_id, id))
    }
}

impl TrtllmReport {
    /// For a server whose record says it takes TensorRT-LLM's options; `None` otherwise.
    pub fn for_server(server: Option<&ServerRecord>) -> Option<TrtllmReport> {
        let s = server?;
        let argv: Vec<String> = if s.argv.is_empty() {
            s.command.split_whitespace().map(str::to_string).collect()
        } else {
            s.argv.clone()
        };
        servbench::steplog::trtllm::self_reports(&argv).then(|| TrtllmReport {
            noted: BTreeSet::new(),
            started: None,
        })
    }

    /// Says `why` about `what`, once per run for each `kind` of trouble.
    fn note(&mut self, kind: &str, what: &str, why: &str) {
        if self.noted.insert(kind.to_string()) {
            cli::info(format!(
                "note: TensorRT-LLM self-report {what}: {}",
                excerpt(why, REASON)
            ));
        }
    }

    /// The JSON list at `path`, or a note and an empty list.
    async fn list(&mut self, pool: &Pool, path: &str, timeout: Duration) -> Vec<serde_json::Value> {
        let got = pool
            .exchange_bounded(
                hyper::Method::GET,
                path,
                Bytes::new(),
                timeout,
                MAX_REPORT_BYTES,
            )
            .await;
        match got {
            Ok((200, body)) => match serde_json::from_slice(&body) {
                Ok(serde_json::Value::Array(list)) => list,
                Ok(other) => {
                    let kind = if other.is_object() {
                        "an object"
                    } else {
                        "not a list"
                    };
                    self.note(
                        path,
                        &format!("GET {path}"),
                        &format!("the answer is {kind}, not TensorRT-LLM's JSON list; not read"),
                    );
                    Vec::new()
                }
                Err(e) => {
                    self.note(
                        path,
                        &format!("GET {path}"),
                        &format!("the answer is not JSON ({e}); not read"),
                    );
                    Vec::new()
                }
            },
            Ok((status, _)) => {
                self.note(
                    path,
                    &format!("GET {path}"),
                    &format!("HTTP {status}; the points have none of it"),
                );
                Vec::new()
            }
            Err(f) => {
                self.note(path, &format!("GET {path}"), &f.message);
                Vec::new()
            }
        }
    }

    /// The point starts: what the server kept before it is emptied (an earlier point's).
    pub async fn begin(&mut self, pool: &Pool, timeout: Duration) {
        self.list(pool, "/perf_metrics", timeout).await;
        self.list(pool, "/metrics", timeout).await;
        self.started = Some(Instant::now());
    }

    /// The point ends: its requests' timing and its iteration stats.
    pub async fn end(&mut self, pool: &Pool, timeout: Duration) -> PointReport {
        let window_s = self
            .started
            .take()
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let records = self.list(pool, "/perf_metrics", timeout).await;
        let stats = self.list(pool, "/metrics", timeout).await;
        let mut report = PointReport {
            timing: HashMap::with_capacity(records.len()),
            stats,
            window_s,
        };
        let mut unread = 0;
        for r in &records {
            match ServerTiming::from_trtllm_perf(r) {
                Some((id, t, bad)) => {
                    if !bad.is_empty() {
                        self.note(
                            "bad",
                            "/perf_metrics",
                            &format!("figures that are not times, left out: {}", bad.join(", ")),
                        );
                    }
                    report.timing.insert(id, t);
                }
                None => unread += 1,
            }
        }
        if unread > 0 {
            self.note(
                "unread",
                "/perf_metrics",
                &format!(
                    "{unread} record(s) without a request_id or perf_metrics.timing_metrics; left out"
                ),
            );
        }
        report
    }

    /// Requests of a point that found no record (more than `perf_metrics_max_requests`, or the
    /// server kept none): said once.
    pub fn unjoined(&mut self, missing: u64, requests: u64) {
        if missing > 0 {
            self.note(
                "missing",
                "/perf_metrics",
                &format!(
                    "{missing} of a point's {requests} requests have no record there (it keeps the last perf_metrics_max_requests); their records have no server_timing"
                ),
            );
        }
    }

    /// The point's steps from its iteration stats (`busy_s` of its window with a request in
    /// flight); `None` where the server gave none.
    pub fn steps(&mut self, r: &PointReport, point: u32, busy_s: f64) -> Option<EngineSteps> {
        let w =
            servbench::steplog::trtllm::stats_window(&r.stats, r.window_s, busy_s.min(r.window_s))?;
        if let Some(why) = &w.first_malformed {
            self.note(
                "stats",
                "GET /metrics",
                &format!(
                    "{} iteration stats of point {point} could not be read (first: {why}); left out",
                    w.steps.malformed_lines
                ),
            );
        }
        for why in &w.implausible {
            self.note(
                "implausible",
                "GET /metrics",
                &format!("point {point}: {why}"),
            );
        }
        (w.steps.steps > 0).then_some(w.steps)
    }
}
