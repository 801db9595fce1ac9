//! The HTTP side: a hyper 1 HTTP/1.1 server with the routes of vLLM's OpenAI server;
//! `generate.rs` serves a generation request, with the streaming body that turns the engine's
//! published token counts into SSE events.
//!
//! Speed matters here (srv-sim must never be the bottleneck of a load generator): a stream is a
//! hand-written `Body` that formats events straight into one buffer per poll, as many as are
//! available (up to ~32 KiB), so with `--itl 0` hyper writes large frames and a token costs a
//! few memcpys. No channel, task or timer per token.

use crate::api::{ApiError, Endpoint, Limits};
use crate::engine::Engine;
use crate::prefix::{self, PrefixCache};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

mod embed;
mod generate;

pub use generate::TokenStream;

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
    /// Share of structured-output requests (`response_format` json_schema) answered with
    /// broken JSON (its last token left out), drawn from --seed per request
    #[arg(long, value_name = "P", default_value_t = 0.0)]
    pub invalid_json_rate: f64,
}

/// Everything a request handler needs.
pub struct App {
    /// One engine per data-parallel replica; requests go round-robin.
    pub engines: Vec<Engine>,
    pub limits: Limits,
    /// The served model's name, then each `--lora` adapter's, as JSON string literals.
    pub model_json: Vec<String>,
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
    /// The engine's front end (a calibration's); set after [`App::new`].
    pub front_end: crate::frontend::Gate,
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
        let model_json = std::iter::once(&c.limits.served_model)
            .chain(&c.limits.adapters)
            .map(|name| Value::String(name.clone()).to_string())
            .collect();
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
            front_end: Default::default(),
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
        p if post && let Some(endpoint) = Endpoint::at(p) => {
            generate::generate(app, fd, endpoint, req).await
        }
        "/tokenize" | "/v1/tokenize" if post => match read_body(app, req).await {
            Ok(body) => match crate::textapi::tokenize(&app.limits, &body) {
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
        "/v1/embeddings" if post => embed::embeddings(app, req).await,
        p if Endpoint::at(p).is_some() => error_response(&ApiError::new(
            405,
            format!("method {method} not allowed on {path}"),
        )),
        "/health"
        | "/v1/health"
        | "/v1/models"
        | "/metrics"
        | "/version"
        | "/v1/embeddings"
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

/// The served model, then its `--lora` adapters (vLLM lists each with its base as `parent`).
fn models(app: &App) -> String {
    let (base, max_model_len) = (&app.limits.served_model, app.limits.max_model_len);
    let card = |name: &String, parent: Option<&String>| {
        json!({"id": name, "object": "model", "created": unix_now(), "owned_by": "srv-sim",
               "root": name, "parent": parent, "max_model_len": max_model_len, "permission": []})
    };
    let data: Vec<Value> = std::iter::once(card(base, None))
        .chain(app.limits.adapters.iter().map(|a| card(a, Some(base))))
        .collect();
    json!({"object": "list", "data": data}).to_string()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
