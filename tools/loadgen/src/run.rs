//! The run: finds the target and model, aligns prompt lengths, then walks the sweep matrix.
//! Every load mode feeds one dispatcher loop (a runtime task that decides each intended send
//! time through [`crate::pacing::next_send`] and waits for it precisely); finished requests
//! come back to one collector that writes `request` records and builds the point's `summary`
//! with the shared statistics. Ctrl-C/SIGTERM stops sending, gives in-flight requests
//! `--grace`, writes a partial summary and exits 130; a second one exits at once.

use crate::exec::{Outcome, RequestMeta, stream_into, to_record};
use crate::http::{Failure, Pool, Target, raise_nofile_limit};
use crate::pacing::{Load, next_send};
use crate::ramp::{Rules, Verdict};
use crate::workload::{self, Api, BodySpec, Entry, PromptText, Synthetic};
use crate::{Args, Warmup};
use anyhow::Context;
use bytes::Bytes;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::{Value, json};
use servbench::cli::{self, Exit};
use servbench::jsonl::{self, BackgroundPassThrough, Disposition, RecordWriter};
use servbench::record::{
    ErrorClass, Labels, PointKey, RampLevel, RampRecord, Record, SummaryRecord, inherit_labels,
    now_ts,
};
use servbench::stats::PointStats;
use std::collections::BTreeSet;
use std::io::{IsTerminal, Stdout};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

/// Set by the first Ctrl-C/SIGTERM: stop sending.
static STOP: AtomicBool = AtomicBool::new(false);

/// Entry point from main.
pub fn main(args: Args) -> anyhow::Result<Exit> {
    validate(&args)?;
    let mut out = RecordWriter::stdout();
    let own = args.common.labels();
    // Upstream records go through first, unchanged; a `server` record names the target.
    let mut upstream: Option<(String, Labels)> = None;
    let mut servers = 0;
    // With --url, upstream records still pass on, on a thread of their own: loadgen does not
    // wait for an upstream that may never close (an SSH session's stdin).
    let background = match args.url {
        Some(_) => BackgroundPassThrough::start(args.common.strict),
        None => None,
    };
    if args.url.is_none() {
        jsonl::pass_through(args.common.strict, &mut out, |line| {
            if let Record::Server(s) = &line.record {
                servers += 1;
                if upstream.is_none() {
                    upstream = Some((s.url.clone(), s.labels.clone()));
                }
            }
            Disposition::Forward
        })?;
        if servers > 1 {
            cli::warn(format!(
                "{servers} server records on stdin: loading the first only"
            ));
        }
    }
    let (url, labels) = match (&args.url, upstream) {
        (Some(url), _) => (url.clone(), own),
        (None, Some((url, up))) => (url, inherit_labels(&up, &own)),
        (None, None) => ("http://127.0.0.1:8000".to_string(), own),
    };
    let mut headers = Vec::new();
    for (k, v) in &args.headers {
        let name = hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| cli::usage(format!("--header '{k}': not a header name")))?;
        let value = hyper::header::HeaderValue::from_str(v)
            .map_err(|_| cli::usage(format!("--header '{k}': value is not valid in a header")))?;
        headers.push((name, value));
    }
    if let Some(key) = &args.api_key
        && !headers
            .iter()
            .any(|(k, _)| k == hyper::header::AUTHORIZATION)
        && let Ok(v) = hyper::header::HeaderValue::from_str(&format!("Bearer {key}"))
    {
        headers.push((hyper::header::AUTHORIZATION, v));
    }
    let target = Target::parse(&url, headers).map_err(cli::usage)?;
    raise_nofile_limit();
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(8)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let exit = runtime.block_on(async move {
        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(watch_signals(stop_tx));
        let mut run = Run {
            args,
            pool: Arc::new(Pool::new(target)),
            labels,
            out,
            stop_rx,
            model: String::new(),
            seq: Arc::new(AtomicU64::new(0)),
            first_errors: BTreeSet::new(),
            aligned: Vec::new(),
        };
        run.all().await
    })?;
    if let Some(upstream) = background {
        upstream.finish()?;
    }
    Ok(exit)
}

fn validate(a: &Args) -> anyhow::Result<()> {
    if a.repeat == 0 {
        return Err(cli::usage("--repeat must be at least 1"));
    }
    if a.prompts.is_some() && a.input_len.is_some() {
        return Err(cli::usage(
            "--input-len makes synthetic prompts; it cannot be combined with --prompts",
        ));
    }
    if let Some(r) = &a.rate
        && r.iter().any(|x| !(x.is_finite() && *x > 0.0))
    {
        return Err(cli::usage(
            "--rate values must be positive requests per second",
        ));
    }
    if a.concurrency.as_ref().is_some_and(|c| c.contains(&0)) || a.max_concurrency == Some(0) {
        return Err(cli::usage("concurrency must be at least 1"));
    }
    if a.requests == Some(0) {
        return Err(cli::usage("-n must be at least 1"));
    }
    if a.max_tokens.as_ref().is_some_and(|m| m.contains(&0)) {
        return Err(cli::usage("--max-tokens must be at least 1"));
    }
    Ok(())
}

async fn watch_signals(stop_tx: watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    let mut seen = 0;
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        seen += 1;
        if seen == 1 {
            STOP.store(true, Ordering::SeqCst);
            let _ = stop_tx.send(true);
            cli::info(
                "stopping: no new requests; in-flight ones get --grace, then a partial summary (again to quit now)",
            );
        } else {
            // Hold stdout so no record line is cut in half, then leave at once.
            let _lock = std::io::stdout().lock();
            std::process::exit(Exit::Interrupted as i32);
        }
    }
}

/// How much of a point to run.
#[derive(Debug, Clone, Copy)]
enum Budget {
    Requests(u64),
    Time(Duration),
}

/// Makes request bodies for a point.
struct Maker {
    spec: BodySpec,
    source: Source,
    seed: u64,
    /// `--max-tokens` was given: it overrides a prompt file's own `max_tokens`.
    max_given: bool,
}

enum Source {
    Synthetic(Arc<Synthetic>),
    Listed(Arc<Vec<Entry>>, Arc<Vec<usize>>),
}

/// One request ready to go: its body and what the record should say it asked for.
struct Prepared {
    body: Bytes,
    target: Option<u32>,
    max_tokens: u32,
}

impl Maker {
    fn make(&self, seq: u64) -> Prepared {
        match &self.source {
            Source::Synthetic(s) => Prepared {
                body: workload::body(&self.spec, &PromptText::Text(s.text(Some(seq), self.seed))),
                target: Some(s.target_tokens),
                max_tokens: self.spec.max_tokens,
            },
            Source::Listed(entries, order) => {
                let e = &entries[order[(seq % order.len() as u64) as usize]];
                let mut spec = self.spec.clone();
                if let Some(m) = e.max_tokens.filter(|_| !self.max_given) {
                    spec.max_tokens = m;
                }
                Prepared {
                    body: workload::body(&spec, &e.prompt),
                    target: None,
                    max_tokens: spec.max_tokens,
                }
            }
        }
    }
}

/// A request that finished (or failed, or was cancelled).
struct Finished {
    id: u64,
    intended: Instant,
    dispatched: Instant,
    outcome: Outcome,
    target: Option<u32>,
    max_tokens: u32,
}

struct Run {
    args: Args,
    pool: Arc<Pool>,
    labels: Labels,
    out: RecordWriter<Stdout>,
    stop_rx: watch::Receiver<bool>,
    model: String,
    /// Requests prepared so far in the whole run: synthetic prompts are unique across points.
    seq: Arc<AtomicU64>,
    first_errors: BTreeSet<ErrorClass>,
    /// Aligned synthetic prompts by target length.
    aligned: Vec<(u32, Arc<Synthetic>)>,
}

/// What a point gave.
struct PointOutcome {
    summary: SummaryRecord,
    interrupted: bool,
    first_failure: Option<(ErrorClass, String)>,
}

impl Run {
    async fn all(&mut self) -> anyhow::Result<Exit> {
        self.model = self.find_model().await?;
        let listed = match self.args.prompts.as_deref() {
            None => None,
            Some("builtin") => Some(workload::builtin()),
            Some(path) => Some(workload::read_prompts_file(path).map_err(cli::usage)?),
        };
        let input_lens: Vec<Option<u32>> = match (&self.args.input_len, &listed) {
            (Some(l), _) => l.iter().copied().map(Some).collect(),
            (None, Some(_)) => vec![None],
            // Neither given: synthetic prompts of 256 tokens.
            (None, None) => vec![Some(256)],
        };
        let max_tokens: Vec<Option<u32>> = match &self.args.max_tokens {
            Some(m) => m.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        let mut index = 0u32;
        for &input_len in &input_lens {
            let source = match (input_len, &listed) {
                (Some(n), _) => Source::Synthetic(self.align(n).await?),
                (None, Some(entries)) => Source::Listed(
                    Arc::new(entries.clone()),
                    Arc::new(workload::shuffled_order(entries.len(), self.args.seed)),
                ),
                (None, None) => unreachable!("input_lens has Some when there is no list"),
            };
            let source = Arc::new(source);
            for &max in &max_tokens {
                let spec = BodySpec {
                    api: self.args.api,
                    model: self.model.clone(),
                    max_tokens: max.unwrap_or(256),
                    force_length: input_len.is_some() && !self.args.allow_eos,
                    usage_per_chunk: !self.args.no_usage_per_chunk,
                };
                let key = PointKey {
                    index: 0,
                    concurrency: None,
                    rate_rps: None,
                    input_len,
                    max_tokens: max.or(input_len.map(|_| 256)),
                    repeat: 0,
                };
                if self.args.ramp {
                    let stop = self
                        .ramp(&mut index, key, &spec, &source, max.is_some())
                        .await?;
                    if stop {
                        return Err(cli::Interrupted.into());
                    }
                    continue;
                }
                for load in self.loads() {
                    for repeat in 0..self.args.repeat {
                        let mut key = key.clone();
                        key.index = index;
                        key.repeat = repeat;
                        index += 1;
                        let p = self.point(key, load, &spec, &source, max.is_some()).await?;
                        if p.interrupted {
                            return Err(cli::Interrupted.into());
                        }
                        self.check_point(&p)?;
                    }
                }
            }
        }
        Ok(Exit::Ok)
    }

    fn loads(&self) -> Vec<Load> {
        match (&self.args.rate, &self.args.concurrency) {
            (Some(rates), _) => rates
                .iter()
                .map(|&rate_rps| Load::Open {
                    rate_rps,
                    arrival: self.args.arrival,
                    max_concurrency: self.args.max_concurrency,
                })
                .collect(),
            (None, Some(c)) => c
                .iter()
                .map(|&concurrency| Load::Closed { concurrency })
                .collect(),
            (None, None) => vec![Load::Closed { concurrency: 1 }],
        }
    }

    /// Exit 1 with a clear message when every request of a point failed.
    fn check_point(&self, p: &PointOutcome) -> anyhow::Result<()> {
        if p.summary.ok > 0 || p.summary.requests == 0 {
            return Ok(());
        }
        let (class, msg) = p
            .first_failure
            .clone()
            .unwrap_or((ErrorClass::Other, String::new()));
        Err(cli::failure(if class == ErrorClass::Connect {
            format!("no server answering at {}: {msg}", self.pool.target.url)
        } else {
            format!(
                "every request of point {} failed ({} of them); first: {class}: {msg}",
                p.summary.point.index, p.summary.requests
            )
        }))
    }

    /// The model to name: `--model` checked against /v1/models, else the first it lists.
    async fn find_model(&self) -> anyhow::Result<String> {
        let url = &self.pool.target.url;
        let (status, body) = match self
            .pool
            .exchange(hyper::Method::GET, "/v1/models", Bytes::new())
            .await
        {
            Ok(r) => r,
            Err(f) if f.class == ErrorClass::Connect => {
                return Err(cli::failure(format!(
                    "no server answering at {url}: {}",
                    f.message
                )));
            }
            Err(f) => return Err(cli::failure(format!("{url}/v1/models: {}", f.message))),
        };
        let ids: Vec<String> = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(|m| m.get("id").and_then(Value::as_str).map(String::from))
            .collect();
        match &self.args.model {
            Some(m) if ids.is_empty() || ids.contains(m) => Ok(m.clone()),
            Some(m) => Err(cli::failure(format!(
                "model {m} not found: the server at {url} has {}",
                ids.join(", ")
            ))),
            None => ids.into_iter().next().ok_or_else(|| {
                cli::failure(format!(
                    "{url}/v1/models (HTTP {status}) lists no model: pass --model NAME"
                ))
            }),
        }
    }

    /// A synthetic prompt of `target` tokens as the server counts them.
    async fn align(&mut self, target: u32) -> anyhow::Result<Arc<Synthetic>> {
        if let Some((_, s)) = self.aligned.iter().find(|(t, _)| *t == target) {
            return Ok(s.clone());
        }
        let seed = self.args.seed;
        let mut s = Synthetic::new(
            target,
            target as usize,
            self.args.shared_prefix as usize,
            seed,
        );
        let mut best: Option<(u32, usize)> = None;
        let mut method = "tokenize";
        let mut tried = vec![s.words.len()];
        for _round in 0..8 {
            let text = s.text(None, seed);
            let count = match self.count_tokens(&text, &mut method).await {
                Some(c) => c,
                None => {
                    cli::warn(format!(
                        "cannot learn how {} counts tokens (no /tokenize, no usage in replies): prompts of {target} tokens are {target} words",
                        self.pool.target.url
                    ));
                    break;
                }
            };
            let words = s.words.len();
            if best.is_none_or(|(c, _)| c.abs_diff(target) > count.abs_diff(target)) {
                best = Some((count, words));
            }
            if count == target {
                break;
            }
            // Scale by the observed tokens per word (1 with the usual BPE vocabularies, more
            // with character-level ones), then step one word when scaling stalls.
            let scaled = (words as f64 * f64::from(target) / f64::from(count.max(1))).round();
            let mut next = (scaled as usize).max(1);
            if next == words {
                next = if count < target {
                    words + 1
                } else {
                    words.saturating_sub(1).max(1)
                };
            }
            if next == words || tried.contains(&next) {
                break;
            }
            tried.push(next);
            s.resize(next, seed);
        }
        if let Some((count, words)) = best {
            s.resize(words, seed);
            if count != target {
                cli::warn(format!(
                    "prompt length {target}: closest the server counted was {count} tokens (by {method})"
                ));
            }
        }
        let s = Arc::new(s);
        self.aligned.push((target, s.clone()));
        Ok(s)
    }

    /// The server's token count for a prompt: `/tokenize` in the request's form, else a probe
    /// request's `usage.prompt_tokens`.
    async fn count_tokens(&self, text: &str, method: &mut &'static str) -> Option<u32> {
        let prompt = PromptText::Text(text.to_string());
        if *method == "tokenize" {
            // vLLM and SGLang read `prompt` (or `messages`). llama-server reads `content`, and
            // counts BOS only with `add_special`, as its completions endpoint does; it has no
            // chat form (it answers no tokens, and probes count the templated prompt instead).
            let mut b = json!({"model": self.model});
            if self.args.api == workload::Api::Completions {
                b["content"] = json!(text);
                b["add_special"] = json!(true);
            }
            workload::put_prompt(&mut b, self.args.api, &prompt);
            let body = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
            if let Ok((200, reply)) = self
                .pool
                .exchange(hyper::Method::POST, "/tokenize", body)
                .await
                && let Ok(v) = serde_json::from_slice::<Value>(&reply)
            {
                let count = v.get("count").and_then(Value::as_u64).or_else(|| {
                    v.get("tokens")
                        .and_then(Value::as_array)
                        .map(|t| t.len() as u64)
                });
                // Zero tokens for a non-empty prompt: the server did not understand the form
                // (llama-server given chat messages); count with probe requests instead.
                if let Some(c) = count.filter(|&c| c > 0 || text.is_empty()) {
                    return Some(c as u32);
                }
            }
            *method = "probe requests";
        }
        let mut b =
            json!({"model": self.model, "max_tokens": 1, "stream": false, "temperature": 0.0});
        workload::put_prompt(&mut b, self.args.api, &prompt);
        let body = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
        let (status, reply) = self
            .pool
            .exchange(hyper::Method::POST, self.args.api.path(), body)
            .await
            .ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&reply).ok()?;
        v.get("usage")?
            .get("prompt_tokens")?
            .as_u64()
            .map(|c| c as u32)
    }

    fn budget(&self, load: &Load) -> Budget {
        if let Some(d) = self.args.duration {
            return Budget::Time(d);
        }
        Budget::Requests(self.args.requests.unwrap_or(match *load {
            Load::Closed { concurrency } => (u64::from(concurrency) * 4).max(100),
            Load::Open { rate_rps, .. } => ((rate_rps * 10.0).ceil() as u64).max(10),
        }))
    }

    /// Runs one sweep point (after its warmup) and writes its summary.
    async fn point(
        &mut self,
        mut key: PointKey,
        load: Load,
        spec: &BodySpec,
        source: &Arc<Source>,
        max_given: bool,
    ) -> anyhow::Result<PointOutcome> {
        match load {
            Load::Closed { concurrency } => key.concurrency = Some(concurrency),
            Load::Open { rate_rps, .. } => key.rate_rps = Some(rate_rps),
        }
        let maker = Arc::new(Maker {
            spec: spec.clone(),
            source: match source.as_ref() {
                Source::Synthetic(s) => Source::Synthetic(s.clone()),
                Source::Listed(e, o) => Source::Listed(e.clone(), o.clone()),
            },
            seed: self.args.seed,
            max_given,
        });
        let pool = self.pool.clone();
        let seq = self.seq.clone();
        let stop_rx = self.stop_rx.clone();
        let (api, timeout, grace) = (self.args.api, self.args.timeout, self.args.grace);
        let seed = self.args.arrival_seed(&key);
        if let Some(w) = self.args.warmup {
            let budget = match w {
                Warmup::Requests(n) => Budget::Requests(n),
                Warmup::Time(d) => Budget::Time(d),
            };
            if !matches!(budget, Budget::Requests(0)) {
                let mut sink = |_: Finished, _: Instant| {};
                let interrupted = phase(
                    &pool,
                    api,
                    timeout,
                    grace,
                    seed ^ 0xa11,
                    &seq,
                    &stop_rx,
                    load,
                    budget,
                    maker.clone(),
                    &mut sink,
                )
                .await;
                if interrupted {
                    let summary = self.summary(&PointStats::new(), key, true, 0.0, &load);
                    self.out.emit(&summary)?;
                    return Ok(PointOutcome {
                        summary,
                        interrupted,
                        first_failure: None,
                    });
                }
            }
        }
        if let Some(n) = load.slots() {
            self.pool.prewarm(n as usize).await;
        }
        let budget = self.budget(&load);
        let cpu_before = cpu_seconds();
        let mut stats = PointStats::new();
        let mut first_failure = None;
        let slo = self.args.slo.clone();
        let labels = self.labels.clone();
        let write_requests = !self.args.no_requests;
        let progress = Progress::new(&key, &budget);
        let out = &mut self.out;
        let first_errors = &mut self.first_errors;
        let mut write_error: Option<anyhow::Error> = None;
        let mut on_done = |f: Finished, point_start: Instant| {
            let meta = RequestMeta {
                point: key.clone(),
                id: f.id,
                point_start,
                intended: f.intended,
                dispatched: f.dispatched,
                prompt_tokens_target: f.target,
                max_tokens: Some(f.max_tokens),
            };
            let rec = to_record(meta, f.outcome, &labels);
            stats.add_request(&rec, slo.as_ref());
            if let Some(e) = &rec.error {
                if first_failure.is_none() {
                    first_failure = Some((e.class, e.message.clone()));
                }
                if first_errors.insert(e.class) {
                    cli::warn(format!(
                        "first {} error: request {}: {}",
                        e.class, rec.id, e.message
                    ));
                }
            }
            progress.tick(&stats);
            if write_requests
                && write_error.is_none()
                && let Err(e) = out.emit(&rec)
            {
                write_error = Some(e.into());
            }
        };
        let interrupted = phase(
            &pool,
            api,
            timeout,
            grace,
            seed,
            &seq,
            &stop_rx,
            load,
            budget,
            maker,
            &mut on_done,
        )
        .await;
        if let Some(e) = write_error {
            return Err(e);
        }
        progress.finish();
        let cpu = cpu_seconds() - cpu_before;
        let summary = self.summary(&stats, key, interrupted, cpu, &load);
        self.out.emit(&summary)?;
        Ok(PointOutcome {
            summary,
            interrupted,
            first_failure,
        })
    }

    fn summary(
        &self,
        stats: &PointStats,
        key: PointKey,
        partial: bool,
        cpu: f64,
        load: &Load,
    ) -> SummaryRecord {
        let mut s = stats.to_summary(key, self.labels.clone(), partial, self.args.slo.as_ref());
        s.client_cpu_s = Some(cpu);
        s.model = Some(self.model.clone());
        s.api = Some(self.args.api.name().to_string());
        s.seed = Some(self.args.seed);
        if let Load::Open {
            arrival,
            max_concurrency,
            ..
        } = load
        {
            s.arrival = Some(arrival.name());
            s.max_concurrency = *max_concurrency;
        }
        s
    }

    /// `--ramp`: doubles the concurrency until a rule stops it; writes the `ramp` record.
    /// Returns true when interrupted.
    async fn ramp(
        &mut self,
        index: &mut u32,
        key: PointKey,
        spec: &BodySpec,
        source: &Arc<Source>,
        max_given: bool,
    ) -> anyhow::Result<bool> {
        let first = self
            .args
            .concurrency
            .as_ref()
            .and_then(|c| c.first().copied())
            .unwrap_or(1);
        let rules = Rules {
            max_error_rate: self.args.max_error_rate,
            slo_attainment: self.args.slo_attainment,
            min_gain: self.args.min_gain,
            max_concurrency: self.args.ramp_max,
        };
        let mut levels: Vec<RampLevel> = Vec::new();
        let mut concurrency = first;
        let (stopped_by, reason, interrupted) = loop {
            let mut tok_s = 0.0;
            let mut req_s = 0.0;
            let (mut requests, mut errors, mut good) = (0u64, 0u64, 0.0f64);
            let mut interrupted = false;
            for repeat in 0..self.args.repeat {
                let mut k = key.clone();
                k.index = *index;
                k.repeat = repeat;
                *index += 1;
                let p = self
                    .point(k, Load::Closed { concurrency }, spec, source, max_given)
                    .await?;
                if !p.interrupted {
                    self.check_point(&p)?;
                }
                let s = &p.summary;
                tok_s += s.output_tok_s / f64::from(self.args.repeat);
                req_s += s.req_s / f64::from(self.args.repeat);
                requests += s.requests;
                errors += s.errors;
                good += s.goodput_req_s.unwrap_or(0.0) * s.duration_s;
                if p.interrupted {
                    interrupted = true;
                    break;
                }
            }
            let error_rate = if requests > 0 {
                errors as f64 / requests as f64
            } else {
                0.0
            };
            let slo_attainment = self.args.slo.as_ref().map(|_| {
                if requests > 0 {
                    (good / requests as f64).min(1.0)
                } else {
                    0.0
                }
            });
            levels.push(RampLevel {
                concurrency,
                output_tok_s: tok_s,
                req_s,
                error_rate,
                slo_attainment,
            });
            if interrupted {
                break (
                    "interrupted".to_string(),
                    format!("interrupted at concurrency {concurrency}"),
                    true,
                );
            }
            match rules.judge(&levels) {
                Verdict::Next(next) => concurrency = next,
                Verdict::Stop { rule, reason } => break (rule.to_string(), reason, false),
            }
        };
        let best = rules.best(&levels);
        let record = RampRecord {
            v: servbench::record::SCHEMA_VERSION,
            ts: now_ts(),
            labels: self.labels.clone(),
            point: key,
            best_concurrency: best.map(|l| l.concurrency),
            best_output_tok_s: best.map(|l| l.output_tok_s),
            levels,
            stopped_by,
            reason,
            extra: Default::default(),
        };
        cli::info(format!(
            "ramp stopped ({}): {}; best concurrency {}",
            record.stopped_by,
            record.reason,
            record
                .best_concurrency
                .map_or("none".to_string(), |c| c.to_string())
        ));
        self.out.emit(&record)?;
        Ok(interrupted)
    }
}

impl Args {
    fn arrival_seed(&self, key: &PointKey) -> u64 {
        self.seed ^ (u64::from(key.index) << 32) ^ u64::from(key.repeat)
    }
}

/// Runs requests under `load` until `budget` is spent (or a stop), calling `each` for every
/// finished request with the phase's start. Returns true when stopped by a signal.
#[allow(clippy::too_many_arguments)]
async fn phase(
    pool: &Arc<Pool>,
    api: Api,
    timeout: Duration,
    grace: Duration,
    arrival_seed: u64,
    seq: &Arc<AtomicU64>,
    stop_rx: &watch::Receiver<bool>,
    load: Load,
    budget: Budget,
    maker: Arc<Maker>,
    each: &mut dyn FnMut(Finished, Instant),
) -> bool {
    let (tx, mut rx) = mpsc::unbounded_channel::<Finished>();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    // A moment's head start so the first deadline is not already past when the thread starts.
    let start = Instant::now() + Duration::from_millis(1);
    let dispatcher = tokio::spawn(
        Dispatcher {
            pool: pool.clone(),
            path: api.path(),
            timeout,
            load,
            budget,
            start,
            maker,
            seq: seq.clone(),
            stop_rx: stop_rx.clone(),
            cancel_rx,
            tx,
            arrival_seed,
        }
        .run(),
    );
    let mut stop_rx = stop_rx.clone();
    let mut stopping = STOP.load(Ordering::SeqCst);
    let mut cancel_at = tokio::time::Instant::now() + grace;
    if stopping {
        let _ = cancel_tx.send(true);
    }
    loop {
        tokio::select! {
            msg = rx.recv() => match msg {
                Some(f) => each(f, start),
                None => break,
            },
            _ = stop_rx.wait_for(|s| *s), if !stopping => {
                stopping = true;
                cancel_at = tokio::time::Instant::now() + grace;
            }
            _ = tokio::time::sleep_until(cancel_at), if stopping && !*cancel_tx.borrow() => {
                let _ = cancel_tx.send(true);
            }
        }
    }
    let _ = dispatcher.await;
    stopping
}

/// The one dispatch loop every load mode feeds. It runs as a task on the runtime, so a freed
/// slot wakes it without a thread switch and its requests start on the same worker.
struct Dispatcher {
    pool: Arc<Pool>,
    path: &'static str,
    timeout: Duration,
    load: Load,
    budget: Budget,
    start: Instant,
    maker: Arc<Maker>,
    seq: Arc<AtomicU64>,
    stop_rx: watch::Receiver<bool>,
    cancel_rx: watch::Receiver<bool>,
    tx: mpsc::UnboundedSender<Finished>,
    arrival_seed: u64,
}

impl Dispatcher {
    async fn run(self) {
        let mut rng = StdRng::seed_from_u64(self.arrival_seed);
        let slots = self
            .load
            .slots()
            .map(|n| Arc::new(Semaphore::new(n as usize)));
        let end = match self.budget {
            Budget::Time(d) => Some(self.start + d),
            Budget::Requests(_) => None,
        };
        let mut prev: Option<f64> = None;
        let mut id = 0u64;
        loop {
            if STOP.load(Ordering::SeqCst)
                || matches!(self.budget, Budget::Requests(n) if id >= n)
                || end.is_some_and(|e| Instant::now() >= e)
            {
                break;
            }
            let prepared = self.maker.make(self.seq.fetch_add(1, Ordering::Relaxed));
            let draw = match self.load {
                Load::Open { arrival, .. } => arrival.draw(&mut rng),
                Load::Closed { .. } => 1.0,
            };
            let (intended, permit) = match next_send(&self.load, prev, draw) {
                Some(t) => {
                    prev = Some(t);
                    let deadline = self.start + Duration::from_secs_f64(t);
                    if end.is_some_and(|e| deadline >= e) || !self.wait_until(deadline).await {
                        break;
                    }
                    // The latency clock started at the deadline, slot or no slot.
                    match self.acquire(&slots, end).await {
                        Some(p) => (deadline, p),
                        None => break,
                    }
                }
                None => match self.acquire(&slots, end).await {
                    Some(p) => (Instant::now(), p),
                    None => break,
                },
            };
            tokio::spawn(request_task(
                self.pool.clone(),
                self.path,
                self.timeout,
                prepared,
                id,
                intended,
                permit,
                self.tx.clone(),
                self.cancel_rx.clone(),
            ));
            id += 1;
            // Let the new request go out before preparing the next: when many slots free at
            // once, each request leaves as soon as its slot is taken instead of queueing behind
            // the whole burst's preparation.
            tokio::task::yield_now().await;
        }
    }

    /// Waits until `deadline` without the runtime timer's millisecond rounding: the timer
    /// sleeps to within 1.5 ms, then the task yields (letting every other task and the I/O
    /// driver run) until the deadline passes. False when a stop came first.
    async fn wait_until(&self, deadline: Instant) -> bool {
        const COARSE: Duration = Duration::from_micros(1500);
        let mut stop_rx = self.stop_rx.clone();
        loop {
            if STOP.load(Ordering::SeqCst) {
                return false;
            }
            let now = Instant::now();
            if now >= deadline {
                return true;
            }
            if deadline - now > COARSE {
                tokio::select! {
                    _ = tokio::time::sleep_until((deadline - COARSE).into()) => {}
                    _ = stop_rx.wait_for(|s| *s) => return false,
                }
            } else {
                tokio::task::yield_now().await;
            }
        }
    }

    /// Waits for a free slot; `None` when stopped or the time budget ran out meanwhile.
    async fn acquire(
        &self,
        slots: &Option<Arc<Semaphore>>,
        end: Option<Instant>,
    ) -> Option<Option<OwnedSemaphorePermit>> {
        let Some(sem) = slots else { return Some(None) };
        if let Ok(p) = sem.clone().try_acquire_owned() {
            return Some(Some(p));
        }
        let mut stop_rx = self.stop_rx.clone();
        let until = async {
            match end {
                Some(e) => tokio::time::sleep_until(e.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            p = sem.clone().acquire_owned() => p.ok().map(Some),
            _ = stop_rx.wait_for(|s| *s) => None,
            _ = until => None,
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn request_task(
    pool: Arc<Pool>,
    path: &'static str,
    timeout: Duration,
    prepared: Prepared,
    id: u64,
    intended: Instant,
    permit: Option<OwnedSemaphorePermit>,
    tx: mpsc::UnboundedSender<Finished>,
    mut cancel_rx: watch::Receiver<bool>,
) {
    let dispatched = Instant::now();
    let mut o = Outcome::default();
    enum End {
        Done,
        TimedOut,
        Cancelled,
    }
    let end = {
        let deadline = tokio::time::Instant::from_std(intended + timeout);
        let work =
            tokio::time::timeout_at(deadline, stream_into(&pool, path, prepared.body, &mut o));
        tokio::select! {
            r = work => if r.is_ok() { End::Done } else { End::TimedOut },
            _ = cancel_rx.wait_for(|c| *c) => End::Cancelled,
        }
    };
    match end {
        End::Done => {}
        End::TimedOut => {
            o.end = Instant::now();
            o.failure = Some(Failure::new(
                ErrorClass::Timeout,
                format!(
                    "no complete answer within --timeout {}",
                    humantime_secs(timeout)
                ),
            ));
        }
        End::Cancelled => {
            o.end = Instant::now();
            o.failure = Some(Failure::new(
                ErrorClass::Cancelled,
                "still running when the --grace period after Ctrl-C ended",
            ));
        }
    }
    drop(permit);
    let _ = tx.send(Finished {
        id,
        intended,
        dispatched,
        outcome: o,
        target: prepared.target,
        max_tokens: prepared.max_tokens,
    });
}

fn humantime_secs(d: Duration) -> String {
    format!("{}s", d.as_secs_f64())
}

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct we own.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut ru) != 0 {
            return 0.0;
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(ru.ru_utime) + tv(ru.ru_stime)
    }
}

/// The live progress line on stderr, only when stderr is a terminal.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    started: Instant,
    last: std::cell::Cell<Instant>,
}

impl Progress {
    fn new(key: &PointKey, budget: &Budget) -> Progress {
        let started = Instant::now();
        if !std::io::stderr().is_terminal() {
            return Progress {
                bar: None,
                started,
                last: started.into(),
            };
        }
        let load = match (key.concurrency, key.rate_rps) {
            (Some(c), _) => format!("c={c}"),
            (None, Some(r)) => format!("r={r}/s"),
            _ => String::new(),
        };
        let bar = match budget {
            Budget::Requests(n) => indicatif::ProgressBar::new(*n),
            Budget::Time(_) => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        let done = match budget {
            Budget::Requests(_) => "{pos}/{len}, {elapsed},".to_string(),
            Budget::Time(d) => format!("{{pos}} done, {{elapsed}} of {}s,", d.as_secs()),
        };
        bar.set_style(
            indicatif::ProgressStyle::with_template(&format!(
                "point {} {load} {done} {{msg}}",
                key.index
            ))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Progress {
            bar: Some(bar),
            started,
            last: started.into(),
        }
    }

    fn tick(&self, stats: &PointStats) {
        let Some(bar) = &self.bar else { return };
        bar.inc(1);
        let now = Instant::now();
        if now - self.last.get() > Duration::from_millis(200) {
            self.last.set(now);
            let secs = (now - self.started).as_secs_f64().max(1e-3);
            bar.set_message(format!(
                "{:.0} tok/s, {} errors",
                stats.output_tokens as f64 / secs,
                stats.errors()
            ));
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
