//! The HTTP side: a hyper 1 HTTP/1.1 server with the routes of vLLM's OpenAI server, and the
//! streaming body that turns the engine's published token counts into SSE events.
//!
//! Speed matters here (srv-sim must never be the bottleneck of a load generator): a stream is a
//! hand-written `Body` that formats events straight into one buffer per poll, as many as are
//! available (up to ~32 KiB), so with `--itl 0` hyper writes large frames and a token costs a
//! few memcpys. No channel, task or timer per token.

use crate::api::{self, ApiError, Endpoint, Formatter, Limits};
use crate::engine::Engine;
use crate::prefix::{self, PrefixCache};
use crate::progress::Progress;
use crate::progress::WaitFor;
use crate::step::Submit;
use crate::tokens::{self, splitmix64, unit};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

/// Injected failures (README "Faults"), as srv-sim's flags give them.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct Faults {
    /// Probability a generation request is answered HTTP 500 or 503 at once
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub fail_rate: f64,
    /// After N generation requests, the next one crashes the process halfway through its stream
    #[arg(long, value_name = "N")]
    pub crash_after: Option<u64>,
    /// After N generation requests, every later one stops sending halfway and keeps the connection open
    #[arg(long, value_name = "N")]
    pub stall_after: Option<u64>,
    /// Probability a generation request's connection is reset (TCP RST) halfway through
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub reset_rate: f64,
    /// After N steps, the modelled engine's thread panics (as an impossible step time once
    /// did): srv-sim exits 101 instead of serving on without an engine
    #[arg(long, value_name = "N")]
    pub engine_panic_after: Option<u64>,
}

/// Everything a request handler needs.
pub struct App {
    /// One engine per data-parallel replica; requests go round-robin.
    pub engines: Vec<Engine>,
    pub limits: Limits,
    /// The served model name as a JSON string literal.
    pub model_json: String,
    pub ready_at: Instant,
    pub faults: Faults,
    pub seed: u64,
    /// Tokens per SSE event when tokens pile up (fixed-latency `--tokens-per-chunk`); the modelled
    /// engine sends each step's tokens as one event (`u32::MAX`).
    pub chunk_cap: u32,
    /// Largest prompt + max_tokens the KV cache can hold (None: unlimited).
    pub kv_cache_tokens: Option<u64>,
    pub spec_decoding: bool,
    /// A request body that stalls this long is answered 408 (`--idle-timeout`).
    pub body_timeout: Option<Duration>,
    /// One prefix cache per engine (empty: prefix caching off); set after [`App::new`].
    pub prefix: Vec<Mutex<PrefixCache>>,
    /// `--enable-prompt-tokens-details`: usage carries the request's cached prompt tokens.
    pub prompt_tokens_details: bool,
    /// `--enable-per-request-metrics`: answers carry the request's `metrics`.
    pub per_request_metrics: bool,
    /// `--self-report-as trtllm`: TensorRT-LLM's self-report; set after [`App::new`].
    pub trtllm: Option<Arc<crate::trtllm::Report>>,
    /// The engine logs each request by the answer's id (SGLang's time stats).
    pub log_rids: bool,
    /// HTTPS (`--ssl-certfile`): connections are served behind this acceptor; set after [`App::new`].
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    pub generation_requests: AtomicU64,
    /// False until `--startup`'s log lines are all written (startup.rs); set after [`App::new`].
    pub startup_logged: Arc<AtomicBool>,
    /// The part of a disaggregated layout this server plays; set after [`App::new`].
    pub pd: crate::pd::Side,
    crashing: AtomicBool,
}

/// What [`App::new`] is built from: the engines and the flags that shape every answer.
pub struct AppConfig {
    pub engines: Vec<Engine>,
    pub limits: Limits,
    pub ready_at: Instant,
    pub faults: Faults,
    pub seed: u64,
    pub chunk_cap: u32,
    pub kv_cache_tokens: Option<u64>,
    pub spec_decoding: bool,
}

impl App {
    pub fn new(c: AppConfig) -> App {
        let model_json = Value::String(c.limits.served_model.clone()).to_string();
        App {
            engines: c.engines,
            limits: c.limits,
            model_json,
            ready_at: c.ready_at,
            faults: c.faults,
            seed: c.seed,
            chunk_cap: c.chunk_cap.max(1),
            kv_cache_tokens: c.kv_cache_tokens,
            spec_decoding: c.spec_decoding,
            body_timeout: None,
            prompt_tokens_details: false,
            per_request_metrics: false,
            trtllm: None,
            log_rids: false,
            prefix: Vec::new(),
            tls: None,
            generation_requests: AtomicU64::new(0),
            startup_logged: Arc::new(AtomicBool::new(true)),
            pd: crate::pd::Side::default(),
            crashing: AtomicBool::new(false),
        }
    }

    fn loading(&self) -> bool {
        Instant::now() < self.ready_at || !self.startup_logged.load(Ordering::SeqCst)
    }
}

/// Accepts connections forever, one task per connection. A connection that sends no complete
/// request head for `idle` (idle between requests, or sending its headers slowly) is closed,
/// so idle and slow clients cannot hold every descriptor.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Arc<App>,
    idle: Option<Duration>,
) -> anyhow::Result<()> {
    let mut refused = AcceptErrors::default();
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: say so (once a second), back off, and
                // keep serving the connections already open; timeouts free descriptors.
                refused.note(&e);
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let fd = stream.as_raw_fd();
        let app = app.clone();
        tokio::spawn(async move {
            match app.tls.clone() {
                None => serve_connection(stream, app, fd, idle).await,
                // A client that fails the handshake (or never finishes it within the idle
                // timeout) has nothing to be served.
                Some(acceptor) => {
                    let handshake = acceptor.accept(stream);
                    let done = match idle {
                        Some(limit) => tokio::time::timeout(limit, handshake).await.ok(),
                        None => Some(handshake.await),
                    };
                    if let Some(Ok(tls)) = done {
                        serve_connection(tls, app, fd, idle).await;
                    }
                }
            }
        });
    }
}

/// Failed accepts, reported at most once a second with how many there were.
#[derive(Default)]
struct AcceptErrors {
    last: Option<Instant>,
    since: u64,
}

impl AcceptErrors {
    fn note(&mut self, e: &std::io::Error) {
        self.since += 1;
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(1))
        {
            servbench::cli::warn(format!(
                "accept failed ({} time(s) since the last report): {e}; serving the open connections",
                self.since
            ));
            self.last = Some(Instant::now());
            self.since = 0;
        }
    }
}

/// Serves HTTP/1.1 requests on one connection (plain or TLS) until it closes.
async fn serve_connection<I>(io: I, app: Arc<App>, fd: RawFd, idle: Option<Duration>)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let app = app.clone();
        async move { Ok::<_, Infallible>(handle(&app, fd, req).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(idle)
        .serve_connection(hyper_util::rt::TokioIo::new(io), service)
        .await;
}

/// A response body: a whole buffer, an SSE stream, or a connection reset.
pub enum SimBody {
    Full(Option<Bytes>),
    Stream(Box<TokenStream>),
    Reset(RawFd),
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            SimBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Stream(s) => s.poll_next(cx),
            SimBody::Reset(fd) => Poll::Ready(Some(Err(reset(*fd)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, SimBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            _ => SizeHint::default(),
        }
    }
}

/// Arms SO_LINGER 0 so closing the socket sends RST, and returns the error that makes hyper close it.
fn reset(fd: RawFd) -> std::io::Error {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on the connection's own socket, which hyper still holds open (the body
    // is polled by that connection); a plain struct passed by pointer and size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    std::io::Error::new(
        std::io::ErrorKind::ConnectionReset,
        "srv-sim: injected connection reset (--reset-rate)",
    )
}

fn json_response(status: u16, body: String) -> Response<SimBody> {
    let mut r = Response::new(SimBody::Full(Some(Bytes::from(body))));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(e: &ApiError) -> Response<SimBody> {
    json_response(e.status, e.body())
}

async fn read_body(app: &App, req: Request<Incoming>) -> Result<Bytes, ApiError> {
    const MAX_BODY: usize = 64 << 20;
    let read = Limited::new(req.into_body(), MAX_BODY).collect();
    let collected = match app.body_timeout {
        Some(limit) => tokio::time::timeout(limit, read).await.map_err(|_| {
            ApiError::new(
                408,
                format!(
                    "the request body stalled for {} s (--idle-timeout)",
                    limit.as_secs_f64()
                ),
            )
        })?,
        None => read.await,
    };
    match collected {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(ApiError::new(
            413,
            format!("cannot read the request body (at most 64 MiB): {e}"),
        )),
    }
}

async fn handle(app: &Arc<App>, fd: RawFd, req: Request<Incoming>) -> Response<SimBody> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let post = method == Method::POST;
    let get = method == Method::GET;
    match path.as_str() {
        "/health" | "/v1/health" if get => {
            if app.loading() {
                error_response(&ApiError::new(503, "Loading model"))
            } else {
                json_response(200, String::new())
            }
        }
        "/v1/models" if get => json_response(200, models(app)),
        // trtllm-serve's: its JSON iteration stats at /metrics, request timing at /perf_metrics.
        "/metrics" | "/perf_metrics" if get && let Some(t) = &app.trtllm => json_response(
            200,
            match path.as_str() {
                "/metrics" => t.iteration_stats(),
                _ => t.perf_metrics(),
            },
        ),
        "/metrics" if get => {
            let snapshots: Vec<_> = app
                .engines
                .iter()
                .enumerate()
                .map(|(i, e)| {
                    let mut m = e.metrics.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    if let Some(c) = app.prefix.get(i) {
                        let c = c.lock().unwrap_or_else(|p| p.into_inner());
                        (m.prefix_queries, m.prefix_hits, m.prefix_resets) =
                            (c.queries, c.hits, c.resets);
                        m.prefix_last_hit_rate = c.last_hit_rate;
                    }
                    m
                })
                .collect();
            let text =
                crate::metrics::render(&snapshots, &app.limits.served_model, app.spec_decoding);
            let mut r = json_response(200, text);
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        "/version" if get => json_response(
            200,
            json!({"version": env!("CARGO_PKG_VERSION")}).to_string(),
        ),
        // vLLM's (served there only with VLLM_SERVER_DEV_MODE=1): 200, empty body.
        "/reset_prefix_cache" if post => {
            prefix::reset_all(&app.prefix);
            json_response(200, String::new())
        }
        // SGLang's.
        "/flush_cache" if post || get => {
            prefix::reset_all(&app.prefix);
            let mut r = json_response(200, "Cache flushed.\n".to_string());
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
            r
        }
        "/v1/completions" if post => generate(app, fd, Endpoint::Completions, req).await,
        "/v1/chat/completions" if post => generate(app, fd, Endpoint::Chat, req).await,
        "/tokenize" | "/v1/tokenize" if post => match read_body(app, req).await {
            Ok(body) => match crate::textapi::tokenize(app.limits.max_model_len, &body) {
                Ok(json) => json_response(200, json),
                Err(e) => error_response(&e),
            },
            Err(e) => error_response(&e),
        },
        "/detokenize" | "/v1/detokenize" if post => match read_body(app, req).await {
            Ok(body) => match crate::textapi::detokenize(&body) {
                Ok(json) => json_response(200, json),
                Err(e) => error_response(&e),
            },
            Err(e) => error_response(&e),
        },
        "/health"
        | "/v1/health"
        | "/v1/models"
        | "/metrics"
        | "/version"
        | "/v1/completions"
        | "/v1/chat/completions"
        | "/tokenize"
        | "/v1/tokenize"
        | "/detokenize"
        | "/v1/detokenize"
        | "/reset_prefix_cache"
        | "/flush_cache" => error_response(&ApiError::new(
            405,
            format!("method {method} not allowed on {path}"),
        )),
        _ => error_response(&ApiError::new(404, format!("no route {path}"))),
    }
}

fn models(app: &App) -> String {
    let name = &app.limits.served_model;
    json!({"object": "list", "data": [{
        "id": name, "object": "model", "created": unix_now(), "owned_by": "srv-sim", "root": name,
        "parent": null, "max_model_len": app.limits.max_model_len, "permission": []
    }]})
    .to_string()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Where a faulty stream stops behaving.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CutKind {
    Crash,
    Stall,
    Reset,
}

async fn generate(
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
    let request = match api::parse_generate(endpoint, &body, &app.limits) {
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
    let progress = Progress::new(request.max_tokens);
    let engine = (n % app.engines.len() as u64) as usize;
    let hit = prefix::admit(&app.prefix, engine, &request.blocks, request.prompt_tokens);
    // Transferred KV is the whole prompt's: the first step computes only its last token.
    let cached = kv_wait.map_or(hit, |_| request.prompt_tokens);
    let mut fmt = Formatter::new(endpoint, n, unix_now(), &app.model_json, &request);
    if app.trtllm.is_some() {
        fmt = fmt.with_trtllm_id(n);
    }
    app.engines[engine].submit(Submit {
        progress: progress.clone(),
        prompt_tokens: request.prompt_tokens,
        cached,
        arrival,
        rid: app.log_rids.then(|| fmt.id().to_string()),
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
        role_pending: endpoint == Endpoint::Chat,
        include_usage: request.include_usage,
        finished: false,
        cut,
        stalled: false,
        reset_timer: None,
        fd,
        words: Vec::new(),
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
    let text: String = (0..total)
        .map(|p| tokens::generated(stream.text_seed, p))
        .collect();
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
    role_pending: bool,
    include_usage: bool,
    finished: bool,
    cut: Option<(u32, CutKind)>,
    stalled: bool,
    reset_timer: Option<Pin<Box<tokio::time::Sleep>>>,
    fd: RawFd,
    words: Vec<&'static str>,
    app: Arc<App>,
    request_no: u64,
}

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

    fn poll_next(
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
        if self.role_pending {
            self.fmt.role_chunk(&mut buf);
            self.role_pending = false;
        }
        while self.sent < available && buf.len() < FRAME_BYTES {
            let n = (available - self.sent).min(self.chunk_cap);
            self.words.clear();
            let seed = self.text_seed;
            self.words
                .extend((self.sent..self.sent + n).map(|p| tokens::generated(seed, p)));
            self.sent += n;
            self.fmt
                .token_chunk(&mut buf, &self.words, self.sent == total, self.sent);
        }
        if self.sent == total {
            if self.include_usage {
                self.fmt.usage_chunk(&mut buf, total, &self.progress);
            }
            Formatter::done(&mut buf);
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
