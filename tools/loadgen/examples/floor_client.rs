//! The practical floor of a streaming client's CPU per token, for `scripts/bench-loadgen.sh`:
//! one hyper HTTP/1.1 connection per stream, each stream read to its `[DONE]` with its lines
//! split (memchr), each content chunk timestamped, and nothing else: no records, no
//! statistics. Two ways to see a token in a `data:` line:
//!
//! - `pattern` (the default): the bytes `"text":"` followed by anything but `"`. It never
//!   decodes the content: it cannot tell `"text": "x"` (a space) from no token, takes a
//!   `text` key anywhere (another choice's, a nested object's) for the content, never checks
//!   the chunk is JSON, and never reads the text. It is the floor of splitting the stream,
//!   below what a correct client can do.
//! - `serde`: the line decoded by serde_json into a tiny struct (the first choice's `text`,
//!   borrowed where it has no escape), as a minimal correct client reads it: it counts a
//!   token where the text is non-empty, and adds up the text's length.
//!
//! Closed loop at concurrency C for a time (the connections made first, outside the measured
//! CPU, as loadgen makes its pool before a point), then one line on stdout:
//! `streams=N tokens=T cpu_s=S cpu_s_per_1m_tokens=X` (tokens: streams x max tokens, which
//! srv-sim gives exactly with `ignore_eos`).
//!
//!     cargo run --release -p loadgen --example floor_client -- URL C SECONDS MAX_TOKENS [pattern|serde]

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn cpu_seconds() -> f64 {
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

struct Args {
    host: String,
    port: u16,
    concurrency: usize,
    time: Duration,
    max_tokens: u32,
    decode: bool,
}

fn args() -> Result<Args, String> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let (url, c, secs, max, decode) = match a.as_slice() {
        [url, c, secs, max] => (url, c, secs, max, false),
        [url, c, secs, max, how] => {
            let decode = match how.as_str() {
                "pattern" => false,
                "serde" => true,
                _ => return Err(format!("{how}: pattern or serde")),
            };
            (url, c, secs, max, decode)
        }
        _ => {
            return Err(
                "usage: floor_client URL CONCURRENCY SECONDS MAX_TOKENS [pattern|serde]".into(),
            );
        }
    };
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: an http:// URL"))?;
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .ok_or_else(|| format!("{url}: host:port"))?;
    let num = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{what} '{s}': a count"))
    };
    Ok(Args {
        host: host.to_string(),
        port: num(port, "port")? as u16,
        concurrency: num(c, "concurrency")?.clamp(1, 100_000) as usize,
        time: Duration::from_secs(num(secs, "seconds")?.clamp(1, 3600)),
        max_tokens: num(max, "max tokens")?.clamp(1, 1 << 20) as u32,
        decode,
    })
}

/// A completions chunk's text, where it is not empty.
static TEXT: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
    std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\"text\":\""));

/// What a minimal client decodes of a completions chunk.
#[derive(serde::Deserialize)]
struct Chunk<'a> {
    #[serde(borrow)]
    choices: Vec<Choice<'a>>,
}

#[derive(serde::Deserialize)]
struct Choice<'a> {
    #[serde(borrow, default)]
    text: Option<std::borrow::Cow<'a, str>>,
}

/// The length of a `data:` line's content text, decoded; 0 for none (and for `[DONE]`).
fn decoded_text(line: &[u8]) -> Result<usize, String> {
    let Some(payload) = line.strip_prefix(b"data:") else {
        return Ok(0);
    };
    let payload = payload.trim_ascii();
    if payload == b"[DONE]" {
        return Ok(0);
    }
    let chunk: Chunk = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    Ok(chunk
        .choices
        .first()
        .and_then(|c| c.text.as_ref())
        .map_or(0, |t| t.len()))
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A connection of its own, its driver spawned.
async fn connect(a: &Args) -> Result<Sender, String> {
    let tcp = tokio::net::TcpStream::connect((a.host.as_str(), a.port))
        .await
        .map_err(|e| e.to_string())?;
    tcp.set_nodelay(true).map_err(|e| e.to_string())?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// One slot: a connection of its own, then (once every slot has one) streams one after another
/// for the time asked.
async fn slot(
    a: Arc<Args>,
    body: Bytes,
    ready: Arc<tokio::sync::Barrier>,
    streams: Arc<AtomicU64>,
) -> Result<(), String> {
    let connected = tokio::time::timeout(Duration::from_secs(30), connect(&a)).await;
    // Every slot passes the barrier, connected or not, so a failure cannot hang the others.
    ready.wait().await;
    let mut send = connected.map_err(|_| "no connection within 30 s".to_string())??;
    let authority = format!("{}:{}", a.host, a.port);
    let end = Instant::now() + a.time;
    while Instant::now() < end {
        let req = Request::post("/v1/completions")
            .header("host", &authority)
            .header("content-type", "application/json")
            .body(Full::new(body.clone()))
            .map_err(|e| e.to_string())?;
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status()));
        }
        let mut incoming = resp.into_body();
        let mut partial: Vec<u8> = Vec::new();
        let mut done = false;
        let (mut first, mut last, mut chunks, mut text_bytes) = (None, None, 0u32, 0usize);
        while let Some(frame) = incoming.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            let now = Instant::now();
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let mut bytes: &[u8] = &data;
            while let Some(i) = memchr::memchr(b'\n', bytes) {
                let line: &[u8] = if partial.is_empty() {
                    &bytes[..i]
                } else {
                    partial.extend_from_slice(&bytes[..i]);
                    &partial
                };
                done |= line.starts_with(b"data: [DONE]");
                let token = if a.decode {
                    let n = decoded_text(line)?;
                    text_bytes += n;
                    n > 0
                } else {
                    TEXT.find(line)
                        .is_some_and(|i| line.get(i + TEXT.needle().len()) != Some(&b'"'))
                };
                if token {
                    first.get_or_insert(now);
                    last = Some(now);
                    chunks += 1;
                }
                partial.clear();
                bytes = &bytes[i + 1..];
            }
            partial.extend_from_slice(bytes);
        }
        if !done {
            return Err("a stream ended without [DONE]".into());
        }
        std::hint::black_box((first, last, chunks, text_bytes));
        streams.fetch_add(1, Ordering::Relaxed);
        send.ready().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    let a = match args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("floor_client: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let body = Bytes::from(format!(
        r#"{{"prompt":"the of and to in is that for it as was with be by on not he this are or his from at which but have an had they you were their one all we can her has there been if more when will would who so no time people year new first","max_tokens":{m},"min_tokens":{m},"ignore_eos":true,"temperature":0,"stream":true,"stream_options":{{"include_usage":true,"continuous_usage_stats":true}}}}"#,
        m = a.max_tokens
    ));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime");
    let streams = Arc::new(AtomicU64::new(0));
    let ready = Arc::new(tokio::sync::Barrier::new(a.concurrency + 1));
    // Bounded: a server that never ends its streams ends this a while after the time asked.
    let bound = a.time + Duration::from_secs(60);
    let result: Result<f64, String> = runtime.block_on(async {
        let tasks: Vec<_> = (0..a.concurrency)
            .map(|_| {
                tokio::spawn(slot(
                    a.clone(),
                    body.clone(),
                    ready.clone(),
                    streams.clone(),
                ))
            })
            .collect();
        ready.wait().await;
        let cpu0 = cpu_seconds();
        let all = async {
            for t in tasks {
                t.await.map_err(|e| e.to_string())??;
            }
            Ok::<(), String>(())
        };
        match tokio::time::timeout(bound, all).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(format!(
                    "streams still open {} s after the end",
                    bound.as_secs()
                ));
            }
        }
        Ok(cpu_seconds() - cpu0)
    });
    let cpu = match result {
        Ok(cpu) => cpu,
        Err(e) => {
            eprintln!("floor_client: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let n = streams.load(Ordering::Relaxed);
    let tokens = n * u64::from(a.max_tokens);
    println!(
        "streams={n} tokens={tokens} cpu_s={cpu:.3} cpu_s_per_1m_tokens={:.3}",
        if tokens > 0 {
            cpu / tokens as f64 * 1e6
        } else {
            f64::NAN
        }
    );
    std::process::ExitCode::SUCCESS
}
