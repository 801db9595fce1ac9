//! Shared by srv-sim's integration tests: start the real binary on a free port, and a small
//! independent HTTP/1.1 client over std `TcpStream` that timestamps every SSE event as it
//! arrives (nothing from srv-sim's own code is used to read its answers).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::Guard;
use testkit::num;

/// A running srv-sim and its port.
pub struct Sim {
    pub guard: Guard,
    pub port: u16,
}

/// Starts `srv-sim --port 0 ARGS`, reads the port from its stderr line, waits for /health 200.
pub fn start(args: &[&str]) -> Sim {
    start_opts(args, true)
}

pub fn start_opts(args: &[&str], wait_ready: bool) -> Sim {
    let mut cmd = Command::new(testkit::bin("srv-sim"));
    cmd.args(["--port", "0"]).args(args);
    start_cmd(cmd, wait_ready)
}

/// Starts srv-sim by `cmd` (which must end by running `srv-sim --port 0 ...`, e.g. under a
/// shell that set limits first).
pub fn start_cmd(mut cmd: Command, wait_ready: bool) -> Sim {
    cmd.stderr(Stdio::piped()).stdout(Stdio::null());
    let mut guard = Guard::spawn(cmd);
    let stderr = guard.child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    // Warnings (e.g. --realtime not permitted) may come first; the listening line is the one.
    let port: u16 = loop {
        let line = lines
            .next()
            .expect("srv-sim exited before its listening line")
            .expect("read stderr");
        if let Some(port) = line.strip_prefix("srv-sim: listening on http://127.0.0.1:") {
            break port.parse().expect("port");
        }
        assert!(
            line.starts_with("srv-sim: warning: "),
            "unexpected stderr line: {line}"
        );
    };
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    let sim = Sim { guard, port };
    if wait_ready {
        let deadline = Instant::now() + Duration::from_secs(20);
        while get(sim.port, "/health").0 != 200 {
            assert!(Instant::now() < deadline, "srv-sim never became healthy");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    sim
}

/// Starts srv-sim on a free port with its stderr (its log) in `log`, and waits for /health
/// 200: the self-report tests read back what it logged.
pub fn start_logged(args: &[&str], log: &std::path::Path) -> Sim {
    let port = testkit::free_port();
    let mut cmd = Command::new(testkit::bin("srv-sim"));
    cmd.args(["--port", &port.to_string()])
        .args(args)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    let sim = Sim {
        guard: Guard::spawn(cmd),
        port,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !testkit::wait_port(port, Duration::from_millis(50)) || get(port, "/health").0 != 200 {
        assert!(Instant::now() < deadline, "srv-sim never became healthy");
    }
    sim
}

/// Runs `srv-sim --dry-run ARGS` and parses its JSON line.
pub fn dry_run(args: &[&str]) -> serde_json::Value {
    let out = Command::new(testkit::bin("srv-sim"))
        .arg("--dry-run")
        .args(args)
        .output()
        .expect("run srv-sim --dry-run");
    assert!(
        out.status.success(),
        "dry-run failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = testkit::json_lines(&out.stdout);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["kind"], "sim_plan");
    lines[0].clone()
}

/// One HTTP exchange as the client saw it.
#[derive(Debug)]
pub struct Exchange {
    pub status: u16,
    pub headers: String,
    /// The de-chunked body.
    pub body: Vec<u8>,
    /// When the request was written.
    pub sent: Instant,
    /// SSE events (`data: ...` payloads) with the time the read that completed each returned.
    pub events: Vec<(Instant, String)>,
    /// How reading ended early, if it did (reset, timeout).
    pub error: Option<std::io::Error>,
    /// True when the connection closed before the body was complete.
    pub truncated: bool,
}

impl Exchange {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Events holding JSON chunks (not `[DONE]`), parsed.
    pub fn chunks(&self) -> Vec<(Instant, serde_json::Value)> {
        self.events
            .iter()
            .filter(|(_, e)| e != "[DONE]")
            .map(|(t, e)| {
                (
                    *t,
                    serde_json::from_str(e).unwrap_or_else(|err| panic!("bad event ({err}): {e}")),
                )
            })
            .collect()
    }

    /// Generated tokens (words: srv-sim's tokenizer), over every event. Count tokens with this,
    /// not events: when the HTTP writer falls behind the engine (a loaded machine), the tokens
    /// waiting for it go out as one event, as a real engine's do.
    pub fn generated_tokens(&self) -> usize {
        self.token_events()
            .iter()
            .map(|(_, text)| text.split_whitespace().count())
            .sum()
    }

    /// Decode tokens/s of the stream: the tokens after the first event's over the time from
    /// the first event to the last.
    pub fn decode_tok_s(&self) -> f64 {
        let t = self.token_events();
        let first = t[0].1.split_whitespace().count();
        (self.generated_tokens() - first) as f64 / (t[t.len() - 1].0 - t[0].0).as_secs_f64()
    }

    /// Arrival times of the events that carry generated text, and the text of each.
    pub fn token_events(&self) -> Vec<(Instant, String)> {
        self.chunks()
            .into_iter()
            .filter_map(|(t, c)| {
                let choice = c["choices"].get(0)?;
                let text = choice["text"]
                    .as_str()
                    .or_else(|| choice["delta"]["content"].as_str())?;
                (!text.is_empty()).then(|| (t, text.to_string()))
            })
            .collect()
    }
}

pub fn get(port: u16, path: &str) -> (u16, String) {
    let x = exchange(port, "GET", path, "", None);
    (x.status, String::from_utf8_lossy(&x.body).into_owned())
}

pub fn post(port: u16, path: &str, body: &str) -> Exchange {
    exchange(port, "POST", path, body, None)
}

/// Sends one request (Connection: close) and reads the whole answer, timestamping SSE events.
pub fn exchange(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
    read_timeout: Option<Duration>,
) -> Exchange {
    let s = connect(port, read_timeout);
    exchange_on(s, method, path, body)
}

/// A connection made ahead of the request, so a timed request does not pay for the handshake.
pub fn connect(port: u16, read_timeout: Option<Duration>) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to srv-sim");
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(read_timeout.unwrap_or(Duration::from_secs(60))))
        .ok();
    s
}

/// Sends one request (Connection: close) on `s` and reads the whole answer.
pub fn exchange_on(mut s: TcpStream, method: &str, path: &str, body: &str) -> Exchange {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let sent = Instant::now();
    s.write_all(req.as_bytes()).expect("send request");
    read_response(&mut s, sent)
}

/// Sends raw bytes and reads what comes back.
pub fn raw(port: u16, bytes: &[u8]) -> Exchange {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).ok();
    let sent = Instant::now();
    s.write_all(bytes).expect("send");
    // End the request side, so a server waiting for more body bytes sees EOF.
    s.shutdown(std::net::Shutdown::Write).ok();
    read_response(&mut s, sent)
}

fn read_response(s: &mut TcpStream, sent: Instant) -> Exchange {
    let mut x = Exchange {
        status: 0,
        headers: String::new(),
        body: Vec::new(),
        sent,
        events: Vec::new(),
        error: None,
        truncated: false,
    };
    let mut raw: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut head_done = false;
    let mut chunked = false;
    let mut content_length: Option<usize> = None;
    let mut pos = 0; // parse position in `raw` (after the headers)
    let mut sse_pos = 0; // parse position in `x.body` for SSE events
    let mut finished = false;
    while !finished {
        let n = match s.read(&mut buf) {
            Ok(0) => {
                x.truncated = true;
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                x.error = Some(e);
                x.truncated = true;
                break;
            }
        };
        let now = Instant::now();
        raw.extend_from_slice(&buf[..n]);
        if !head_done {
            let Some(end) = find(&raw, b"\r\n\r\n") else {
                continue;
            };
            let head = String::from_utf8_lossy(&raw[..end]).into_owned();
            x.status = head
                .split(' ')
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let lower = head.to_ascii_lowercase();
            chunked = lower.contains("transfer-encoding: chunked");
            content_length = lower
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok());
            x.headers = head;
            head_done = true;
            pos = end + 4;
        }
        // Move complete body bytes from `raw` into `x.body`.
        if chunked {
            while let Some(line_end) = find(&raw[pos..], b"\r\n") {
                let size_str = String::from_utf8_lossy(&raw[pos..pos + line_end]).into_owned();
                let size = usize::from_str_radix(size_str.trim(), 16).expect("chunk size");
                let start = pos + line_end + 2;
                if raw.len() < start + size + 2 {
                    break;
                }
                x.body.extend_from_slice(&raw[start..start + size]);
                pos = start + size + 2;
                if size == 0 {
                    finished = true;
                    break;
                }
            }
        } else {
            x.body.extend_from_slice(&raw[pos..]);
            pos = raw.len();
            if content_length.is_some_and(|l| x.body.len() >= l) {
                finished = true;
            }
        }
        while let Some(end) = find(&x.body[sse_pos..], b"\n\n") {
            let event = String::from_utf8_lossy(&x.body[sse_pos..sse_pos + end]).into_owned();
            if let Some(data) = event.strip_prefix("data: ") {
                x.events.push((now, data.to_string()));
            }
            sse_pos += end + 2;
        }
    }
    if !chunked && content_length.is_none() && x.truncated && x.error.is_none() {
        x.truncated = false; // body delimited by close
    }
    x
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A completions request body with a prompt of `prompt_words` words.
pub fn completion_body(prompt_words: usize, max_tokens: u32, stream: bool) -> String {
    let prompt = vec!["w"; prompt_words].join(" ");
    format!(
        r#"{{"prompt":"{prompt}","max_tokens":{max_tokens},"ignore_eos":true,"stream":{stream}{}}}"#,
        if stream {
            r#","stream_options":{"include_usage":true}"#
        } else {
            ""
        }
    )
}

/// Value of an unlabelled-by-extra-keys sample from Prometheus text: first line starting with `name{`.
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("metric {name} missing in:\n{text}"))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Best effort: puts the calling test thread on SCHED_FIFO (below srv-sim's `--realtime`
/// priority 20) so the client's own wake-ups do not blur what it measures on a loaded machine
/// (silently stays normal when not permitted). Call [`normal_thread`] before heavy work.
pub fn realtime_thread() -> bool {
    let param = libc::sched_param { sched_priority: 10 };
    // SAFETY: sched_setscheduler on the calling thread with a valid parameter struct.
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) == 0 }
}

/// Back to the normal scheduler (after a timed read, before parsing what was read).
pub fn normal_thread() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in realtime_thread.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &param);
    }
}

/// Llama-3.1-8B on an A100-80G: ~8 ms decode steps, long enough to time on a busy machine.
pub const LLAMA_8B_ON_A100: &[&str] = &["--model", "llama-3.1-8b", "--hardware", "a100-80g"];

/// The sweep a calibration is fitted on: C=1 and 8, 256 tokens in and 32 out, 16 requests a
/// point, summaries only.
pub const CALIBRATION_LOAD: &[&str] = &[
    "-c",
    "1,8",
    "--input-len",
    "256",
    "--max-tokens",
    "32",
    "-n",
    "16",
    "--no-requests",
];

/// srv-sim as Llama-3.1-8B on an A100 ([`LLAMA_8B_ON_A100`]) with `args`, run to its end.
pub fn llama_sim(args: &[&str]) -> testkit::Run {
    testkit::call("srv-sim")
        .args(LLAMA_8B_ON_A100)
        .args(args)
        .run()
}

/// The real loadgen against `sim` (`--no-metrics`, then `args`), which must succeed: its records.
pub fn loadgen_against(sim: &Sim, args: &[&str]) -> Vec<serde_json::Value> {
    let out = Command::new(testkit::bin("loadgen"))
        .args([
            "--url",
            &format!("http://127.0.0.1:{}", sim.port),
            "--no-metrics",
        ])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run loadgen");
    assert!(
        out.status.success(),
        "loadgen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    testkit::json_lines(&out.stdout)
}

/// `srv-sim --predict` on [`LLAMA_8B_ON_A100`], then `args`.
pub fn predict(args: &[&str]) -> testkit::Run {
    predict_on(LLAMA_8B_ON_A100, args)
}

/// `srv-sim --predict` on `preset`, then `args`.
pub fn predict_on(preset: &[&str], args: &[&str]) -> testkit::Run {
    testkit::call("srv-sim")
        .args(preset)
        .arg("--predict")
        .args(args)
        .run()
}

/// Per point: (output tok/s, TTFT mean ms, TPOT p50 ms) from a record stream's summaries.
pub fn figures(recs: &[serde_json::Value]) -> Vec<(f64, f64, f64)> {
    testkit::of_kind(recs, "summary")
        .iter()
        .map(|s| {
            (
                num(s, "/output_tok_s"),
                num(s, "/ttft_ms/mean"),
                num(s, "/tpot_ms/p50"),
            )
        })
        .collect()
}
