//! `--pd-role proxy`: the front of a disaggregated layout, speaking vLLM's disaggregated-proxy
//! protocol. Each generation request goes to a prefill server (round-robin) as a
//! non-streaming request for one token with `kv_transfer_params: {"do_remote_decode": true}`;
//! the answer's `kv_transfer_params` then go with the original request to a decode server
//! (round-robin), whose answer streams back to the client as it comes. The prefill side's
//! per-request `metrics` ride along: the event (or the whole answer) that carries the decode
//! side's `metrics` gets the prefill's as `prefill_metrics`, so the client sees both, and, in a
//! stream, the proxy's own `proxy_metrics: {"time_to_first_token_ms"}`: from the request's
//! arrival here to its first token's leaving, so the time in the proxy and its hops to the
//! members (in neither member's figures) is told, not left to the client's TTFT.
//!
//! A member's error answer is passed to the client as it was; a member that cannot be reached,
//! answers with something that is not its part, or overruns `--upstream-timeout` is answered
//! 502 or 504 naming it. `GET /health` is 200 only while every member's is.

use crate::api::ApiError;
use crate::pd::Upstream;
use crate::plan::Plan;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Map, Value, json};
use servbench::cli::{self, Exit};
use std::collections::HashMap;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// The largest request or member answer read whole.
const MAX_BODY: usize = 64 << 20;

/// How long `/health` waits for each member's.
const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

struct Proxy {
    prefill: Vec<Upstream>,
    decode: Vec<Upstream>,
    next: AtomicU64,
    timeout: Duration,
    body_timeout: Option<Duration>,
    /// Idle keep-alive connections to each member (by `HOST:PORT`), so a request does not pay
    /// for a connection on each hop.
    idle: Mutex<HashMap<String, Vec<Sender>>>,
}

/// One HTTP/1.1 connection to a member.
type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// Idle connections kept per member.
const IDLE_PER_MEMBER: usize = 256;

impl Proxy {
    /// An idle connection to `u` that is still open, else a new one.
    async fn connection(&self, u: &Upstream) -> Result<Sender, String> {
        loop {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&u.authority)
                .and_then(Vec::pop);
            let Some(mut s) = idle else {
                return connect(u).await;
            };
            if s.ready().await.is_ok() {
                return Ok(s);
            }
        }
    }

    /// A connection whose answer was read to its end, for the next request.
    fn keep(&self, u: &Upstream, s: Sender) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.entry(u.authority.clone()).or_default();
        if list.len() < IDLE_PER_MEMBER {
            list.push(s);
        }
    }

    /// POSTs `body` to `u`'s `path`: the answer's head, and the connection to keep once its
    /// body is read.
    async fn post(
        &self,
        u: &Upstream,
        path: &str,
        body: &Map<String, Value>,
    ) -> Result<(Response<Incoming>, Sender), String> {
        let bytes = Bytes::from(Value::Object(body.clone()).to_string());
        let req = Request::post(path)
            .header(HOST, &u.authority)
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(bytes))
            .map_err(|e| e.to_string())?;
        let mut s = self.connection(u).await?;
        let r = s
            .send_request(req)
            .await
            .map_err(|e| format!("no answer: {e}"))?;
        Ok((r, s))
    }
}

/// Serves the proxy until killed.
pub fn run(plan: &Plan) -> anyhow::Result<Exit> {
    let server = &plan.server;
    let proxy = Arc::new(Proxy {
        prefill: plan.pd.prefill.clone(),
        decode: plan.pd.decode.clone(),
        next: AtomicU64::new(0),
        timeout: plan.pd.upstream_timeout,
        body_timeout: server.idle_timeout,
        idle: Mutex::new(HashMap::new()),
    });
    let runtime = server.runtime()?;
    let addr = format!("{}:{}", server.host, server.port);
    let idle = server.idle_timeout;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| cli::failure(format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr()?;
        let names = |u: &[Upstream]| {
            u.iter()
                .map(|u| u.url.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        };
        cli::info(format!("listening on http://{local}"));
        cli::info(format!(
            "P/D proxy: prefill {}; decode {}",
            names(&proxy.prefill),
            names(&proxy.decode)
        ));
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let _ = stream.set_nodelay(true);
            let proxy = proxy.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let proxy = proxy.clone();
                    async move { Ok::<_, Infallible>(handle(&proxy, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(idle)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    })
}

/// A proxy answer: whole, or the decode side's stream as it comes.
enum ProxyBody {
    Full(Option<Bytes>),
    Stream(tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>),
}

impl Body for ProxyBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        match self.get_mut() {
            ProxyBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            ProxyBody::Stream(rx) => rx.poll_recv(cx).map(|o| o.map(|r| r.map(Frame::data))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ProxyBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProxyBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            ProxyBody::Full(None) => SizeHint::with_exact(0),
            ProxyBody::Stream(_) => SizeHint::default(),
        }
    }
}

fn answer(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::Full(Some(body.into())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn error(status: u16, message: String) -> Response<ProxyBody> {
    answer(
        status,
        "application/json",
        ApiError::new(status, message).body(),
    )
}

async fn handle(p: &Arc<Proxy>, req: Request<Incoming>) -> Response<ProxyBody> {
    let path = req.uri().path().to_string();
    let (get, post) = (req.method() == Method::GET, req.method() == Method::POST);
    match path.as_str() {
        "/health" | "/v1/health" if get => health(p).await,
        "/v1/models" if get => {
            let d = &p.decode[0];
            match timeout_at(Instant::now() + HEALTH_TIMEOUT, get_body(d, "/v1/models")).await {
                Ok(Ok((status, body))) => answer(status, "application/json", body),
                Ok(Err(e)) => error(502, format!("decode {}: {e}", d.url)),
                Err(_) => error(504, format!("decode {}: no answer to /v1/models", d.url)),
            }
        }
        "/v1/completions" | "/v1/chat/completions" if post => disaggregated(p, &path, req).await,
        "/metrics" => error(
            404,
            "the P/D proxy keeps no metrics: scrape its prefill and decode servers".into(),
        ),
        _ => error(
            404,
            format!("no route {} {path} on the P/D proxy", req.method()),
        ),
    }
}

/// 200 while every member answers its `/health` 200.
async fn health(p: &Proxy) -> Response<ProxyBody> {
    let members = p
        .prefill
        .iter()
        .map(|u| ("prefill", u))
        .chain(p.decode.iter().map(|u| ("decode", u)));
    for (role, u) in members {
        let why = match timeout_at(Instant::now() + HEALTH_TIMEOUT, get_body(u, "/health")).await {
            Ok(Ok((200, _))) => continue,
            Ok(Ok((status, _))) => format!("answers /health {status}"),
            Ok(Err(e)) => e,
            Err(_) => format!("no /health answer within {} s", HEALTH_TIMEOUT.as_secs()),
        };
        return error(503, format!("{role} {}: {why}", u.url));
    }
    answer(200, "application/json", Bytes::new())
}

/// A new connection to `u`.
async fn connect(u: &Upstream) -> Result<Sender, String> {
    let stream = tokio::net::TcpStream::connect(&u.authority)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
    tokio::spawn(conn);
    Ok(sender)
}

/// An answer's body, whole (at most [`MAX_BODY`]).
async fn whole(r: Response<Incoming>) -> Result<(u16, Bytes), String> {
    let status = r.status().as_u16();
    let body = Limited::new(r.into_body(), MAX_BODY)
        .collect()
        .await
        .map_err(|e| format!("reading its answer: {e}"))?;
    Ok((status, body.to_bytes()))
}

async fn get_body(u: &Upstream, path: &str) -> Result<(u16, Bytes), String> {
    let req = Request::get(path)
        .header(HOST, &u.authority)
        .body(Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    let answer = connect(u)
        .await?
        .send_request(req)
        .await
        .map_err(|e| format!("no answer: {e}"))?;
    whole(answer).await
}

/// What the decode side is told of the prefill's KV: the prefill answer's `kv_transfer_params`
/// object; none where it has none or `null`, as vLLM's own proxy does (a connector that finds
/// the KV by the prompt, like vLLM's file-system ExampleConnector, answers none); anything
/// else is not a prefill server's answer.
fn kv_transfer_params(prefill_answer: &Value) -> Result<Option<&Value>, String> {
    match prefill_answer.get("kv_transfer_params") {
        None | Some(Value::Null) => Ok(None),
        Some(p) if p.is_object() => Ok(Some(p)),
        Some(p) => Err(format!(
            "its answer's kv_transfer_params is {p}, not an object (is it a prefill server, srv-sim --pd-role prefill or vLLM with a KV connector?)"
        )),
    }
}

/// The request for the prefill side: one token, not streamed, asking for a remote decode
/// (`min_tokens` dropped: loadgen's `min_tokens = max_tokens` would refuse one token).
fn prefill_request(original: &Map<String, Value>) -> Map<String, Value> {
    let mut body = original.clone();
    body.insert("max_tokens".into(), 1.into());
    if body.contains_key("max_completion_tokens") {
        body.insert("max_completion_tokens".into(), 1.into());
    }
    body.insert("stream".into(), false.into());
    body.remove("stream_options");
    body.remove("min_tokens");
    body.insert(
        "kv_transfer_params".into(),
        json!({"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": null,
               "remote_block_ids": null, "remote_host": null, "remote_port": null}),
    );
    body
}

async fn disaggregated(p: &Arc<Proxy>, path: &str, req: Request<Incoming>) -> Response<ProxyBody> {
    let arrived = Instant::now();
    let read = Limited::new(req.into_body(), MAX_BODY).collect();
    let body = match p.body_timeout {
        Some(limit) => match tokio::time::timeout(limit, read).await {
            Ok(r) => r,
            Err(_) => return error(408, "the request body stalled (--idle-timeout)".into()),
        },
        None => read.await,
    };
    let body = match body {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            return error(
                413,
                format!("cannot read the request body (at most 64 MiB): {e}"),
            );
        }
    };
    let original = match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Object(m)) => m,
        Ok(_) => return error(400, "the request body must be a JSON object".into()),
        Err(e) => return error(400, format!("invalid JSON body: {e}")),
    };
    let n = p.next.fetch_add(1, Ordering::Relaxed) as usize;
    let (pre, dec) = (
        &p.prefill[n % p.prefill.len()],
        &p.decode[n % p.decode.len()],
    );
    let deadline = Instant::now() + p.timeout;
    let late = |role: &str, u: &Upstream| {
        error(
            504,
            format!(
                "{role} {}: no answer within {} s (--upstream-timeout)",
                u.url,
                p.timeout.as_secs_f64()
            ),
        )
    };

    let prefilled = timeout_at(deadline, async {
        let (answer, conn) = p.post(pre, path, &prefill_request(&original)).await?;
        let read = whole(answer).await?;
        p.keep(pre, conn);
        Ok::<_, String>(read)
    })
    .await;
    let (status, answer_bytes) = match prefilled {
        Err(_) => return late("prefill", pre),
        Ok(Err(e)) => return error(502, format!("prefill {}: {e}", pre.url)),
        Ok(Ok(a)) => a,
    };
    if status != 200 {
        return answer(status, "application/json", answer_bytes);
    }
    let prefill_answer: Value = match serde_json::from_slice(&answer_bytes) {
        Ok(v) => v,
        Err(e) => {
            return error(
                502,
                format!("prefill {}: its answer is not JSON: {e}", pre.url),
            );
        }
    };
    let params = match kv_transfer_params(&prefill_answer) {
        Ok(p) => p.cloned(),
        Err(why) => return error(502, format!("prefill {}: {why}", pre.url)),
    };
    let prefill_metrics = prefill_answer.get("metrics").cloned();
    let mut decode_body = original;
    if let Some(params) = params {
        decode_body.insert("kv_transfer_params".into(), params);
    }

    let (decoded, conn) = match timeout_at(deadline, p.post(dec, path, &decode_body)).await {
        Err(_) => return late("decode", dec),
        Ok(Err(e)) => return error(502, format!("decode {}: {e}", dec.url)),
        Ok(Ok(r)) => r,
    };
    let streaming = decoded
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if decoded.status() != StatusCode::OK || !streaming {
        return match timeout_at(deadline, whole(decoded)).await {
            Err(_) => late("decode", dec),
            Ok(Err(e)) => error(502, format!("decode {}: {e}", dec.url)),
            Ok(Ok((status, bytes))) => {
                p.keep(dec, conn);
                let bytes = match (&prefill_metrics, status) {
                    (Some(m), 200) => with_metrics(&bytes, Some(m), None).unwrap_or(bytes),
                    _ => bytes,
                };
                answer(status, "application/json", bytes)
            }
        };
    }
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let upstream = decoded.into_body();
    let (proxy, member) = (p.clone(), dec.clone());
    tokio::spawn(async move {
        // Kept only when the stream ended: a client that left has its member's connection
        // closed, which cancels the request there.
        let beside = Beside {
            prefill: prefill_metrics,
            arrived,
            first: None,
        };
        if forward(upstream, tx, beside, deadline, &member.url).await {
            proxy.keep(&member, conn);
        }
    });
    let mut r = Response::new(ProxyBody::Stream(rx));
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    r
}

/// What the proxy puts beside the decode side's `metrics` in its stream: the prefill side's
/// `metrics`, and its own TTFT (from `arrived` to `first`, the first token's leaving).
struct Beside {
    prefill: Option<Value>,
    arrived: Instant,
    first: Option<Instant>,
}

impl Beside {
    /// `proxy_metrics`, vLLM-shaped: the proxy's TTFT so far (its first token leaves now when
    /// none has yet).
    fn proxy_metrics(&self) -> Value {
        let first = self.first.unwrap_or_else(Instant::now);
        let ms = first.saturating_duration_since(self.arrived).as_nanos() as f64 / 1e6;
        json!({ "time_to_first_token_ms": ms })
    }
}

/// A whole answer (or one SSE event's JSON) with `prefill_metrics` and `proxy_metrics` (those
/// given) beside its `metrics`; None when it has no `metrics` or is not a JSON object.
fn with_metrics(json: &[u8], prefill: Option<&Value>, proxy: Option<Value>) -> Option<Bytes> {
    let mut v: Value = serde_json::from_slice(json).ok()?;
    v.get("metrics")?;
    let obj = v.as_object_mut()?;
    if let Some(prefill) = prefill {
        obj.insert("prefill_metrics".into(), prefill.clone());
    }
    if let Some(proxy) = proxy {
        obj.insert("proxy_metrics".into(), proxy);
    }
    Some(Bytes::from(v.to_string()))
}

/// The complete SSE events at the front of `pending` (taken out), the one with the decode
/// side's `metrics` given the prefill's and the proxy's beside them.
fn take_events(pending: &mut Vec<u8>, beside: &Beside) -> Vec<u8> {
    let Some(end) = pending.windows(2).rposition(|w| w == b"\n\n") else {
        return Vec::new();
    };
    let rest = pending.split_off(end + 2);
    let events = std::mem::replace(pending, rest);
    let mut out = Vec::with_capacity(events.len() + 256);
    for event in events.split_inclusive(|&b| b == b'\n') {
        let changed = event
            .strip_prefix(b"data: ")
            .filter(|e| e.windows(10).any(|w| w == b"\"metrics\":"))
            .and_then(|e| {
                with_metrics(
                    e.trim_ascii_end(),
                    beside.prefill.as_ref(),
                    Some(beside.proxy_metrics()),
                )
            });
        match changed {
            Some(json) => {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&json);
                out.push(b'\n');
            }
            None => out.extend_from_slice(event),
        }
    }
    out
}

/// Passes the decode side's stream to the client, event by event, until it ends, the client
/// goes (the member's connection is then closed, which cancels its request) or the deadline.
async fn forward(
    mut upstream: Incoming,
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    mut beside: Beside,
    deadline: Instant,
    url: &str,
) -> bool {
    let mut pending = Vec::new();
    loop {
        let frame = match timeout_at(deadline, upstream.frame()).await {
            Ok(None) => break,
            Ok(Some(Ok(f))) => f,
            Ok(Some(Err(e))) => {
                let _ = tx
                    .send(Err(std::io::Error::other(format!("decode {url}: {e}"))))
                    .await;
                return false;
            }
            Err(_) => {
                let _ = tx
                    .send(Err(std::io::Error::other(format!(
                        "decode {url}: the stream overran --upstream-timeout"
                    ))))
                    .await;
                return false;
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        let out = take_events(&mut pending, &beside);
        if out.is_empty() {
            continue;
        }
        if tx.send(Ok(Bytes::from(out))).await.is_err() {
            return false;
        }
        beside.first.get_or_insert_with(Instant::now);
    }
    pending.is_empty() || tx.send(Ok(Bytes::from(pending))).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefill_asks_one_token_for_a_remote_decode_even_with_min_tokens() {
        let orig: Map<String, Value> = serde_json::from_value(json!({"prompt": "a b",
            "max_tokens": 50, "min_tokens": 50, "stream": true,
            "stream_options": {"include_usage": true}}))
        .unwrap();
        let p = prefill_request(&orig);
        assert_eq!(p["max_tokens"], 1);
        assert_eq!(p["stream"], false);
        assert!(!p.contains_key("stream_options") && !p.contains_key("min_tokens"));
        assert_eq!(p["kv_transfer_params"]["do_remote_decode"], true);
    }

    #[test]
    fn a_prefill_answer_without_kv_transfer_params_sends_the_decode_without_them() {
        let none = json!({"choices": [], "kv_transfer_params": null});
        assert_eq!(kv_transfer_params(&none), Ok(None));
        assert_eq!(kv_transfer_params(&json!({"choices": []})), Ok(None));
        let some = json!({"kv_transfer_params": {"do_remote_prefill": true}});
        assert_eq!(
            kv_transfer_params(&some),
            Ok(Some(&some["kv_transfer_params"]))
        );
        let bad = kv_transfer_params(&json!({"kv_transfer_params": 3})).unwrap_err();
        assert!(bad.contains("is 3, not an object"), "{bad}");
    }

    #[test]
    fn the_event_with_metrics_gets_the_prefills_and_the_proxys_beside_them() {
        let arrived = Instant::now();
        let beside = Beside {
            prefill: Some(json!({"queue_time_ms": 1.0})),
            arrived,
            first: Some(arrived + Duration::from_micros(2500)),
        };
        let mut pending = b"data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"metrics\":{\"queue_time_ms\":2.0}}\n\ndata: [DO".to_vec();
        let out = String::from_utf8(take_events(&mut pending, &beside)).unwrap();
        assert_eq!(pending, b"data: [DO");
        let events: Vec<&str> = out.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events[0], "data: {\"choices\":[]}");
        let v: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(v["prefill_metrics"]["queue_time_ms"], 1.0);
        assert_eq!(v["metrics"]["queue_time_ms"], 2.0);
        assert_eq!(v["proxy_metrics"]["time_to_first_token_ms"], 2.5);
    }
}
