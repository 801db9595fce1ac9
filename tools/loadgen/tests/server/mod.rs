//! A raw-socket OpenAI-style streaming server inside the test process, for the cases srv-sim
//! cannot produce (role-only first chunk, usage placement, multi-token chunks, malformed SSE,
//! error events, resets) and to know the truth: it records when it actually wrote each chunk.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Usage {
    None,
    /// A `choices: []` chunk after the last content chunk, `delay` later.
    Final {
        delay: Duration,
    },
    /// On the last content chunk (llama-server's completions).
    LastContent,
    /// Cumulative usage on every content chunk (vLLM continuous_usage_stats).
    PerChunk,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fault {
    None,
    Status(u16),
    Malformed,
    ErrorEvent,
    Reset,
    Stall,
    /// HTTP 500 whose plain-text body carries terminal control sequences and a fake line.
    Hostile,
}

/// What [`Fault::Hostile`] answers: clears the screen, retitles the terminal, rings the bell
/// and fakes a line of loadgen's own.
pub const HOSTILE_MESSAGE: &str = "\u{1b}[2J\u{1b}]0;owned\u{7}boom\nloadgen: error: fake";

#[derive(Clone)]
pub struct Behavior {
    pub ttft: Duration,
    pub itl: Duration,
    pub tokens_per_chunk: u32,
    /// Chat: a role-only chunk first (sent at once, before the TTFT wait).
    pub role_first: bool,
    pub usage: Usage,
    pub tokenize: bool,
    pub fault: fn(usize) -> Fault,
    /// One generation at a time (others wait for the lock).
    pub serial: bool,
    /// End streams with `data: [DONE]`.
    pub done: bool,
    /// Put `finish_reason: "length"` on the last content chunk.
    pub finish_reason: bool,
    /// The token count the server answers (/tokenize and usage) for a real count: a server
    /// that counts wrong.
    pub counts: fn(u32) -> u32,
    /// The word each token of the reply to a request is (conversations trace replies back).
    pub reply: fn(&serde_json::Value) -> String,
    /// `usage.prompt_tokens_details.cached_tokens` the final usage chunk reports, from the
    /// prompt tokens (None: not reported, as most servers by default).
    pub cached: fn(u32) -> Option<u32>,
}

impl Default for Behavior {
    fn default() -> Self {
        Behavior {
            ttft: Duration::from_millis(50),
            itl: Duration::from_millis(10),
            tokens_per_chunk: 1,
            role_first: false,
            usage: Usage::Final {
                delay: Duration::ZERO,
            },
            tokenize: true,
            fault: |_| Fault::None,
            serial: false,
            done: true,
            finish_reason: false,
            counts: |n| n,
            reply: |_| "tok".to_string(),
            cached: |_| None,
        }
    }
}

/// What the server actually did for one generation request.
#[derive(Clone, Debug)]
pub struct Truth {
    /// Request read -> first content chunk written, ms.
    pub ttft_ms: f64,
    /// Gaps between content chunk writes, ms.
    pub itl_ms: Vec<f64>,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
}

/// One request as the server read it, in arrival order.
#[derive(Clone, Debug)]
pub struct Captured {
    pub method: String,
    pub path: String,
    pub body: serde_json::Value,
}

pub struct TestServer {
    pub port: u16,
    pub truth: Arc<Mutex<Vec<Truth>>>,
    pub requests: Arc<AtomicUsize>,
    /// Every request read, in order (the capture server of the workload tests).
    pub log: Arc<Mutex<Vec<Captured>>>,
}

impl TestServer {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
    pub fn truths(&self) -> Vec<Truth> {
        self.truth.lock().unwrap().clone()
    }
    pub fn captured(&self) -> Vec<Captured> {
        self.log.lock().unwrap().clone()
    }
    /// The streamed generation requests it read (their bodies), in order.
    pub fn generations(&self) -> Vec<serde_json::Value> {
        self.captured()
            .into_iter()
            .filter(|c| c.path.contains("completions") && c.body["stream"] == true)
            .map(|c| c.body)
            .collect()
    }
}

/// A well-behaved server whose first token takes `ttft_ms` and each next one `itl_ms`.
pub fn paced(ttft_ms: u64, itl_ms: u64) -> TestServer {
    start(Behavior {
        ttft: Duration::from_millis(ttft_ms),
        itl: Duration::from_millis(itl_ms),
        ..Behavior::default()
    })
}

pub fn start(b: Behavior) -> TestServer {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let truth = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(AtomicUsize::new(0));
    let log = Arc::new(Mutex::new(Vec::new()));
    let serial = Arc::new(Mutex::new(()));
    let (t, r, l) = (truth.clone(), requests.clone(), log.clone());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let (b, t, r, serial) = (b.clone(), t.clone(), r.clone(), serial.clone());
            let l = l.clone();
            std::thread::spawn(move || {
                // SAFETY: this thread's own timer slack, so the server's sleeps are precise.
                unsafe {
                    libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
                }
                let _ = serve_conn(conn, &b, &t, &r, &serial, &l);
            });
        }
    });
    TestServer {
        port,
        truth,
        requests,
        log,
    }
}

fn count_tokens(body: &serde_json::Value) -> u32 {
    let text = match body.get("prompt").and_then(|p| p.as_str()) {
        Some(p) => p.to_string(),
        None => body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str())
            .collect::<Vec<_>>()
            .join(" "),
    };
    // One BOS token plus one per word: the tokenizer of this fake model.
    text.split_whitespace().count() as u32 + 1
}

fn serve_conn(
    conn: TcpStream,
    b: &Behavior,
    truth: &Mutex<Vec<Truth>>,
    requests: &AtomicUsize,
    serial: &Mutex<()>,
    log: &Mutex<Vec<Captured>>,
) -> std::io::Result<()> {
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut w = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let method = line.split_whitespace().next().unwrap_or("").to_string();
        let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            if h == "\r\n" || h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                len = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        let t0 = Instant::now();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        log.lock().unwrap().push(Captured {
            method,
            path: path.clone(),
            body: body.clone(),
        });
        let json_reply = |w: &mut TcpStream, status: &str, v: serde_json::Value| {
            let text = v.to_string();
            write!(
                w,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                text.len()
            )
        };
        match path.as_str() {
            "/v1/models" => {
                json_reply(
                    &mut w,
                    "200 OK",
                    serde_json::json!({"data": [{"id": "fake-model"}]}),
                )?;
                continue;
            }
            "/tokenize" if b.tokenize => {
                json_reply(
                    &mut w,
                    "200 OK",
                    serde_json::json!({"count": (b.counts)(count_tokens(&body))}),
                )?;
                continue;
            }
            // vLLM's prefix-cache reset: 200, empty body.
            "/reset_prefix_cache" => {
                write!(w, "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")?;
                continue;
            }
            "/v1/completions" | "/v1/chat/completions" => {}
            _ => {
                json_reply(
                    &mut w,
                    "404 Not Found",
                    serde_json::json!({"detail": "Not Found"}),
                )?;
                continue;
            }
        }
        let real_prompt_tokens = count_tokens(&body);
        let prompt_tokens = (b.counts)(real_prompt_tokens);
        if body["stream"] != serde_json::json!(true) {
            json_reply(
                &mut w,
                "200 OK",
                serde_json::json!({"choices": [{"text": "x"}], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}),
            )?;
            continue;
        }
        let n = requests.fetch_add(1, Ordering::SeqCst);
        let _guard = b.serial.then(|| serial.lock().unwrap());
        let t0 = if b.serial { Instant::now() } else { t0 };
        let fault = (b.fault)(n);
        if let Fault::Status(code) = fault {
            json_reply(
                &mut w,
                &format!("{code} Oops"),
                serde_json::json!({"error": {"message": format!("injected {code}")}}),
            )?;
            continue;
        }
        if fault == Fault::Hostile {
            write!(
                w,
                "HTTP/1.1 500 Oops\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{HOSTILE_MESSAGE}",
                HOSTILE_MESSAGE.len()
            )?;
            continue;
        }
        let chat = path.contains("chat");
        let max = body["max_tokens"].as_u64().unwrap_or(16) as u32;
        write!(
            w,
            "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
        )?;
        let chunk = |w: &mut TcpStream, data: &str| -> std::io::Result<()> {
            let event = format!("data: {data}\n\n");
            write!(w, "{:x}\r\n{event}\r\n", event.len())?;
            w.flush()
        };
        if chat && b.role_first {
            chunk(
                &mut w,
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
            )?;
        }
        sleep_until(t0 + b.ttft);
        let k = b.tokens_per_chunk.max(1);
        let chunks = max.div_ceil(k);
        let mut sent = 0;
        let mut writes = Vec::new();
        let mut next = t0 + b.ttft;
        for i in 0..chunks {
            if i > 0 {
                next += b.itl;
                sleep_until(next);
            }
            let here = k.min(max - sent);
            sent += here;
            let text = vec![(b.reply)(&body); here as usize].join(" ");
            let usage = match b.usage {
                Usage::PerChunk => format!(
                    r#","usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{sent}}}"#
                ),
                Usage::LastContent if i + 1 == chunks => format!(
                    r#","usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{sent}}}"#
                ),
                _ => String::new(),
            };
            let finish = if b.finish_reason && i + 1 == chunks {
                r#","finish_reason":"length""#
            } else {
                ""
            };
            let choice = if chat {
                format!(r#"{{"index":0,"delta":{{"content":"{text}"}}{finish}}}"#)
            } else {
                format!(r#"{{"index":0,"text":"{text}"{finish}}}"#)
            };
            if i == 1 {
                match fault {
                    Fault::Malformed => {
                        chunk(&mut w, "{\"choices\": [oops")?;
                        break;
                    }
                    Fault::ErrorEvent => {
                        chunk(&mut w, r#"{"error":{"message":"engine died","code":500}}"#)?;
                        break;
                    }
                    Fault::Reset => {
                        // Close mid-stream, no terminating chunk.
                        return Ok(());
                    }
                    Fault::Stall => {
                        std::thread::sleep(Duration::from_secs(5));
                        return Ok(());
                    }
                    _ => {}
                }
            }
            chunk(&mut w, &format!(r#"{{"choices":[{choice}]{usage}}}"#))?;
            writes.push(Instant::now());
        }
        if let Usage::Final { delay } = b.usage {
            std::thread::sleep(delay);
            chunk(
                &mut w,
                &format!(
                    r#"{{"choices":[],"usage":{{"prompt_tokens":{prompt_tokens},"completion_tokens":{sent},"total_tokens":{}{}}}}}"#,
                    prompt_tokens + sent,
                    (b.cached)(prompt_tokens).map_or(String::new(), |c| format!(
                        r#","prompt_tokens_details":{{"cached_tokens":{c}}}"#
                    ))
                ),
            )?;
        }
        if b.done {
            chunk(&mut w, "[DONE]")?;
        }
        write!(w, "0\r\n\r\n")?;
        w.flush()?;
        if fault == Fault::None {
            let ms = |d: Duration| d.as_secs_f64() * 1000.0;
            truth.lock().unwrap().push(Truth {
                ttft_ms: writes.first().map_or(0.0, |t| ms(*t - t0)),
                itl_ms: writes.windows(2).map(|p| ms(p[1] - p[0])).collect(),
                prompt_tokens: real_prompt_tokens,
                output_tokens: sent,
            });
        }
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

/// A server that accepts connections and reads requests but never answers them, except
/// `GET /v1/models` when `models` is set: the start-up probes after it then hang. `seen` holds
/// the request lines read so far.
pub struct Silent {
    pub port: u16,
    pub seen: Arc<Mutex<Vec<String>>>,
}

impl Silent {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits (up to 20 s) until a request line containing `path` was read.
    pub fn wait_for(&self, path: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self.seen.lock().unwrap().iter().any(|l| l.contains(path)) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

pub fn start_silent(models: bool) -> Silent {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let s = s.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut w = conn;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let mut len = 0usize;
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 {
                            return;
                        }
                        if h == "\r\n" {
                            break;
                        }
                        if let Some((k, v)) = h.split_once(':')
                            && k.eq_ignore_ascii_case("content-length")
                        {
                            len = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    s.lock().unwrap().push(line.clone());
                    if models && line.starts_with("GET /v1/models") {
                        let text = r#"{"data":[{"id":"silent-model"}]}"#;
                        let _ = write!(
                            w,
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{text}",
                            text.len()
                        );
                        continue;
                    }
                    // Hold the connection, answer nothing, until the client goes away.
                    let mut rest = [0u8; 1024];
                    while matches!(reader.read(&mut rest), Ok(n) if n > 0) {}
                    return;
                }
            });
        }
    });
    Silent { port, seen }
}
