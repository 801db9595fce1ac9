//! One generation request served: validated, checked against the faults to inject, queued on an
//! engine, and answered as the engine publishes its tokens: a stream ([`TokenStream`], a
//! hand-written `Body` that formats as many events as are available per poll) or, without
//! `stream`, one whole answer once every token is out.

use super::{App, SimBody, error_response, json_response, read_body, reset, unix_now};
use crate::api::{self, ApiError, Endpoint, Formatter, structured};
use crate::prefix;
use crate::progress::{Progress, WaitFor};
use crate::step::Submit;
use crate::tokens::{self, splitmix64, unit};
use bytes::Bytes;
use hyper::body::{Frame, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Request, Response};
use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Where a faulty stream stops behaving.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CutKind {
    Crash,
    Stall,
    Reset,
}

pub(super) async fn generate(
    app: &Arc<App>,
    fd: RawFd,
    endpoint: Endpoint,
    req: Request<Incoming>,
) -> Response<SimBody> {
    let mut arrival = Instant::now();
    if app.loading() {
        return error_response(&ApiError::new(503, "Loading model"));
    }
    let body = match read_body(app, req).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let mut request = match api::parse_generate(endpoint, &body, &app.limits) {
        Ok(g) => g,
        Err(e) => return error_response(&e),
    };
    if let Some(kv) = app.kv_cache_tokens {
        let need = u64::from(request.prompt_tokens) + u64::from(request.max_tokens);
        if need > kv {
            return error_response(&ApiError::bad_request(format!(
                "the request needs {need} KV-cache tokens (prompt + max_tokens) but the cache holds {kv}; \
                 lower max_tokens or raise --kv-cache-tokens"
            )));
        }
    }
    let n = app.generation_requests.fetch_add(1, Ordering::Relaxed);
    let draw = splitmix64(app.seed ^ n.wrapping_mul(0xA24B_AED4_963E_E407));
    if unit(draw) < app.faults.fail_rate {
        let status = if draw & 1 == 0 { 500 } else { 503 };
        let msg = if status == 500 {
            "srv-sim: injected internal error (--fail-rate)"
        } else {
            "srv-sim: injected overload (--fail-rate)"
        };
        return error_response(&ApiError::new(status, msg));
    }
    // A structured answer: its JSON's tokens, ending where the JSON does, cut at max_tokens.
    let json = request.json_schema.as_ref().map(|schema| {
        let broken = unit(splitmix64(draw ^ INVALID_JSON_SALT)) < app.faults.invalid_json_rate;
        let words: Arc<[String]> =
            structured::answer(schema, request.text_seed ^ app.seed, broken).into();
        words
    });
    if let Some(words) = &json {
        request.max_tokens = request.max_tokens.min(words.len() as u32);
    }
    let cut = if app.faults.crash_after == Some(n) {
        Some(CutKind::Crash)
    } else if app.faults.stall_after.is_some_and(|s| n >= s) {
        Some(CutKind::Stall)
    } else if unit(splitmix64(draw)) < app.faults.reset_rate {
        Some(CutKind::Reset)
    } else {
        None
    };
    // Half the tokens (at least one) go out before a faulty stream misbehaves.
    let cut = cut.map(|kind| (request.max_tokens.div_ceil(2).max(1), kind));

    // A decode server's request from a prefill server queues once its KV has arrived.
    let kv_wait = app.pd.receive_kv(&request, arrival).await;
    arrival += kv_wait.unwrap_or_default();
    // The server's front end (a calibration's), before the engine's queue.
    arrival = app
        .front_end
        .pass(&app.engines, request.prompt_tokens, arrival)
        .await;
    let progress = Progress::new(request.max_tokens);
    let engine = (n % app.engines.len() as u64) as usize;
    let hit = prefix::admit(&app.prefix, engine, &request.blocks, request.prompt_tokens);
    // Transferred KV is the whole prompt's: the first step computes only its last token.
    let cached = kv_wait.map_or(hit, |_| request.prompt_tokens);
    let named = &app.model_json[request.adapter.map_or(0, |k| k as usize + 1)];
    let mut fmt = Formatter::new(endpoint, n, unix_now(), named, &request);
    if app.trtllm.is_some() {
        fmt = fmt.with_trtllm_id(n);
    }
    app.engines[engine].submit(Submit {
        progress: progress.clone(),
        prompt_tokens: request.prompt_tokens,
        cached,
        arrival,
        rid: app.log_rids.then(|| fmt.id().to_string()),
        pooling: false,
        adapter: request.adapter,
    });
    if app.prompt_tokens_details {
        fmt.report_cached(cached);
    }
    fmt.per_request_metrics = app.per_request_metrics;
    app.pd.report(&mut fmt, &request, kv_wait);
    let text_seed = request.text_seed ^ app.seed;
    let stream = TokenStream {
        progress,
        fmt,
        text_seed,
        sent: 0,
        chunk_cap: app.chunk_cap,
        started: false,
        finished: false,
        cut,
        stalled: false,
        reset_timer: None,
        fd,
        words: Vec::new(),
        // A stream's events carry each token inside a JSON string, as the wires write it.
        json: json.map(|words| match request.stream {
            true => words.iter().map(|w| structured::escaped(w)).collect(),
            false => words,
        }),
        app: app.clone(),
        request_no: n,
    };
    if request.stream {
        let mut r = Response::new(SimBody::Stream(Box::new(stream)));
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/event-stream; charset=utf-8"),
        );
        r
    } else {
        whole(stream).await
    }
}

/// A non-streaming answer: waits for every token, then sends one JSON body. Faults apply at
/// the halfway point as for streams (crash, stall forever, reset before any byte).
async fn whole(mut stream: TokenStream) -> Response<SimBody> {
    let total = stream.progress.total;
    let wait_for = stream.cut.map_or(total, |(at, _)| at);
    WaitFor {
        progress: &stream.progress,
        count: wait_for,
    }
    .await;
    match stream.cut {
        Some((_, CutKind::Crash)) => {
            stream.crash();
            std::future::pending::<()>().await;
        }
        Some((_, CutKind::Stall)) => std::future::pending::<()>().await,
        Some((_, CutKind::Reset)) => {
            stream.finished = true;
            return Response::new(SimBody::Reset(stream.fd));
        }
        None => {}
    }
    stream.done();
    let text: String = match &stream.json {
        Some(words) => words[..total as usize].concat(),
        None => (0..total)
            .map(|p| tokens::generated(stream.text_seed, p))
            .collect(),
    };
    json_response(
        200,
        stream.fmt.full_response(&text, total, &stream.progress),
    )
}

/// One request's SSE stream.
pub struct TokenStream {
    progress: Arc<Progress>,
    fmt: Formatter,
    text_seed: u64,
    sent: u32,
    chunk_cap: u32,
    /// The events before the first token are out.
    started: bool,
    finished: bool,
    cut: Option<(u32, CutKind)>,
    stalled: bool,
    reset_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    fd: RawFd,
    words: Vec<&'static str>,
    /// A structured answer's tokens (`response_format`), instead of the seeded words; a
    /// stream's JSON-escaped.
    json: Option<Arc<[String]>>,
    app: Arc<App>,
    request_no: u64,
}

/// Keeps the --invalid-json-rate draw apart from the other draws of a request.
const INVALID_JSON_SALT: u64 = 0x6A73_6F6E_5F62_6164;

/// A poll writes events until the buffer passes this size, so hyper sends large frames.
const FRAME_BYTES: usize = 32 << 10;

impl TokenStream {
    /// Every token is out: the request is finished (TensorRT-LLM keeps its timing then).
    fn done(&mut self) {
        self.finished = true;
        if let Some(t) = &self.app.trtllm {
            let times = self.progress.read_times();
            t.finished(self.request_no, &times, self.fmt.kv_transfer_ms);
        }
    }

    fn crash(&self) {
        if self.app.crashing.swap(true, Ordering::SeqCst) {
            return;
        }
        // Leave the bytes already written a moment to reach the client, then die abruptly.
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            servbench::cli::info("crashing on purpose (--crash-after)");
            std::process::exit(1);
        });
    }

    pub(super) fn poll_next(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if self.finished {
            return Poll::Ready(None);
        }
        if let Some(timer) = self.reset_timer.as_mut() {
            return match timer.as_mut().poll(cx) {
                Poll::Ready(()) => {
                    self.finished = true;
                    Poll::Ready(Some(Err(reset(self.fd))))
                }
                Poll::Pending => Poll::Pending,
            };
        }
        if self.stalled {
            // Hold the connection open and never write again.
            return Poll::Pending;
        }
        let total = self.progress.total;
        let limit = self.cut.map_or(total, |(at, _)| at);
        let mut available = self.progress.available.load(Ordering::Acquire).min(limit);
        if available == self.sent {
            self.progress.waker.register(cx.waker());
            available = self.progress.available.load(Ordering::Acquire).min(limit);
            if available == self.sent {
                return Poll::Pending;
            }
        }
        let mut buf = Vec::with_capacity(FRAME_BYTES + 1024);
        if !self.started {
            self.fmt.start(&mut buf);
            self.started = true;
        }
        while self.sent < available && buf.len() < FRAME_BYTES {
            let n = (available - self.sent).min(self.chunk_cap);
            let (from, to) = (self.sent, self.sent + n);
            self.sent = to;
            if let Some(json) = &self.json {
                let words: Vec<&str> = json[from as usize..to as usize]
                    .iter()
                    .map(String::as_str)
                    .collect();
                self.fmt.token_chunk(&mut buf, &words, to == total, to);
                continue;
            }
            self.words.clear();
            let seed = self.text_seed;
            self.words
                .extend((from..to).map(|p| tokens::generated(seed, p)));
            self.fmt
                .token_chunk(&mut buf, &self.words, self.sent == total, self.sent);
        }
        if self.sent == total {
            self.fmt.finish(&mut buf, total, &self.progress);
            self.done();
        } else if let Some((at, kind)) = self.cut
            && self.sent >= at
        {
            match kind {
                CutKind::Crash => {
                    self.crash();
                    self.stalled = true;
                }
                CutKind::Stall => self.stalled = true,
                CutKind::Reset => {
                    self.reset_timer =
                        Some(Box::pin(tokio::time::sleep(Duration::from_millis(20))));
                }
            }
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
    }
}

impl Drop for TokenStream {
    fn drop(&mut self) {
        // The client went away before the end: free the engine slot.
        if !self.finished && self.progress.available.load(Ordering::Acquire) < self.progress.total {
            self.progress.cancelled.store(true, Ordering::Relaxed);
        }
    }
}
