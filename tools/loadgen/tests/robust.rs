//! loadgen when things go wrong around it: its reader goes away, the server never answers or
//! dies, limits are hostile, the server's answers are nonsense. Each test is named after what
//! it guards, runs real processes against a real server on 127.0.0.1, and is bounded in time.

mod server;

use servbench::record::{ErrorClass, PointStop, RequestRecord, SummaryRecord};
use server::Behavior;
use std::io::{BufRead, BufReader};
use std::process::{Output, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;
use testkit::{Run, call, loadgen_within as loadgen};

/// Every request of `out` failed as `class` with a message containing `says`: `n` of them.
#[track_caller]
fn each_failed(out: &Run, n: usize, class: ErrorClass, says: &str) {
    let reqs = out.of::<RequestRecord>();
    assert_eq!(reqs.len(), n, "{}", out.err());
    for r in reqs {
        let e = r
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("did not fail: {r:?}"));
        assert_eq!(e.class, class, "{r:?}");
        assert!(e.message.contains(says), "{says:?} not in {r:?}");
    }
}

fn signal(child: &std::process::Child, sig: i32) {
    // SAFETY: signalling the child this test spawned, by its pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// `loadgen ... | head -1`: once the reader is gone, loadgen sends nothing more and exits
/// quietly, instead of running the whole point into a closed pipe.
#[test]
fn a_closed_stdout_stops_sending_at_once() {
    let srv = server::paced(2, 1);
    let mut child = call("loadgen")
        .args(["--url", &srv.url(), "-c", "4", "-n", "1000000"])
        .args(["--max-tokens", "2", "--input-len", "8"])
        .spawn();
    let mut first = String::new();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    reader.read_line(&mut first).unwrap();
    assert!(first.contains("\"kind\":\"request\""), "{first}");
    drop(reader);
    let out = testkit::wait_output(&mut child, Duration::from_secs(30));
    assert_eq!(
        out.status.code(),
        Some(0),
        "a closed pipe is a quiet end: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = srv.requests.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        srv.requests.load(Ordering::SeqCst),
        sent,
        "nothing sent after"
    );
    assert!(sent < 1_000_000, "{sent} requests");
}

/// A remote loadgen whose SSH session closed, or one writing no request records: the reader
/// going away is noticed without a write, and requests in flight are cancelled at once (here
/// each would take 100 s).
#[test]
fn a_closed_stdout_cancels_long_requests_without_a_record_to_write() {
    let srv = server::paced(5, 200);
    let mut child = call("loadgen")
        .args(["--url", &srv.url(), "-c", "2", "--duration", "120s"])
        .args(["--max-tokens", "500", "--no-requests", "--grace", "60s"])
        .spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while srv.requests.load(Ordering::SeqCst) < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(srv.requests.load(Ordering::SeqCst), 2, "both slots busy");
    drop(child.stdout.take());
    let out = testkit::wait_output(&mut child, Duration::from_secs(15));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(srv.requests.load(Ordering::SeqCst), 2, "no request after");
}

/// A server that accepts and never answers: /v1/models, then /tokenize and the probes, then
/// the requests, each gives up after --timeout; loadgen ends with one clear error.
#[test]
fn start_up_probes_are_bounded_by_timeout() {
    let silent = server::start_silent(false);
    let out = loadgen(
        &["--url", &silent.url(), "--timeout", "1s", "-n", "1"],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/v1/models: no answer within --timeout 1s"),
        "{stderr}"
    );

    let silent = server::start_silent(true);
    let out = loadgen(
        &["--url", &silent.url(), "--timeout", "1s", "-n", "1"],
        Duration::from_secs(30),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(silent.wait_for("POST /tokenize"), "{stderr}");
    assert!(stderr.contains("cannot learn how"), "{stderr}");
    assert!(
        stderr.contains("every request of point 0 failed") && stderr.contains("timeout"),
        "{stderr}"
    );
}

/// The first Ctrl-C or SIGTERM ends start-up too (exit 130), whichever probe hangs.
#[test]
fn the_first_signal_stops_start_up() {
    for (models, waits_at, sig) in [
        (false, "GET /v1/models", libc::SIGTERM),
        (true, "POST /tokenize", libc::SIGINT),
    ] {
        let silent = server::start_silent(models);
        let mut child = call("loadgen")
            .args(["--url", &silent.url(), "-n", "1", "--input-len", "16"])
            .spawn();
        assert!(silent.wait_for(waits_at), "loadgen never asked {waits_at}");
        signal(&child, sig);
        let out = testkit::wait_output(&mut child, Duration::from_secs(10));
        assert_eq!(
            out.status.code(),
            Some(130),
            "waiting at {waits_at}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A server that dies mid-point: loadgen does not send thousands of requests a second at the
/// refused port; after a while of nothing but refused connections the point stops with a
/// typed reason, what finished is kept (each request once), and the exit is 1.
#[test]
fn a_dead_server_stops_the_point_as_server_down_without_being_hammered() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "5ms", "--itl", "2ms", "--crash-after", "20"]);
    let out = loadgen(
        &["--url", &url, "-c", "4", "--duration", "60s"],
        Duration::from_secs(60),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("server down"), "{stderr}");
    let s = out.one::<SummaryRecord>();
    assert!(s.partial);
    assert_eq!(s.stopped_by, Some(PointStop::ServerDown));
    assert!(
        s.stop_reason
            .as_deref()
            .is_some_and(|r| r.contains("connection") || r.contains("connect")),
        "{s:?}"
    );
    assert!((1..=20).contains(&s.ok), "{s:?}");
    let connect = s.errors_by_class.get("connect").copied().unwrap_or(0);
    assert!(
        (3..500).contains(&connect),
        "{connect} requests sent at a refused port"
    );
    let reqs = out.of::<RequestRecord>();
    assert_eq!(reqs.len() as u64, s.requests);
    let mut ids: Vec<u64> = reqs.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), reqs.len(), "every finished request once");
}

/// Hostile values get one line naming the flag and the bound, exit 2, before any load.
#[test]
fn resource_limits_are_refused_in_one_line() {
    let nowhere = format!("http://127.0.0.1:{}", testkit::free_port());
    let one_line = |out: &Output, says: &[&str]| {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        for s in says {
            assert!(stderr.contains(s), "{s}: {stderr}");
        }
    };
    let limit = Duration::from_secs(20);
    one_line(
        &loadgen(&["--url", &nowhere, "--threads", "100000"], limit),
        &["--threads 100000", "1024"],
    );
    one_line(
        &loadgen(&["--url", &nowhere, "--input-len", "999999999"], limit),
        &["--input-len 999999999", "at most"],
    );
    let out = testkit::sh_cmd(&format!(
        "ulimit -n 200 && exec loadgen --url {nowhere} -c 1000 -n 1"
    ))
    .stdin(Stdio::null())
    .output()
    .unwrap();
    one_line(&out, &["-c 1000", "200 files", "ulimit"]);

    // Against the server's context length, from /v1/models, before a prompt is built.
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--max-model-len", "4096"]);
    one_line(
        &loadgen(
            &[
                "--url",
                &url,
                "--input-len",
                "1000,5000",
                "--max-tokens",
                "16",
            ],
            limit,
        ),
        &["--input-len 5000", "max_model_len is 4096"],
    );
}

/// A `-c` above the soft open-files limit but within the hard one runs: the soft limit is
/// raised, so 300 streams do not fail with EMFILE.
#[test]
fn the_open_files_soft_limit_is_raised_to_the_hard_one() {
    let srv = server::paced(300, 1);
    let mut c = testkit::sh_cmd(&format!(
        "ulimit -Sn 100 && ulimit -Hn 2048 && exec loadgen --url {} -c 300 -n 300 --max-tokens 2 --no-requests",
        srv.url()
    ));
    c.stdin(Stdio::null());
    let out = testkit::run_cmd_within(c, Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(0), "{}", out.err());
    let s = &out.of::<SummaryRecord>()[0];
    assert_eq!(s.ok, 300, "{s:?}");
}

/// A server that answers 0 tokens (or a nonsense count) for every prompt: loadgen does not
/// believe it, warns, and builds prompts of a sane size instead of scaling them without end.
#[test]
fn nonsense_token_counts_from_the_server_do_not_blow_up_prompts() {
    for counts in [(|_| 0) as fn(u32) -> u32, |n| n.saturating_mul(100_000)] {
        let srv = server::start(Behavior {
            ttft: Duration::from_millis(1),
            itl: Duration::from_millis(1),
            counts,
            ..Behavior::default()
        });
        let out = loadgen(
            &["--url", &srv.url(), "--input-len", "256", "-n", "2"],
            Duration::from_secs(30),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        assert!(stderr.contains("cannot learn how"), "{stderr}");
        let longest = srv.truths().iter().map(|t| t.prompt_tokens).max().unwrap();
        assert!(
            (250..=4 * 256 + 17).contains(&longest),
            "{longest} tokens sent"
        );
    }
}

/// Some servers never send `data: [DONE]`: a stream that ends cleanly after a choice carried
/// finish_reason is complete.
#[test]
fn a_stream_with_finish_reason_and_no_done_is_complete() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        done: false,
        finish_reason: true,
        ..Behavior::default()
    });
    let out = loadgen(
        &["--url", &srv.url(), "-n", "4", "--max-tokens", "3"],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let s = &out.of::<SummaryRecord>()[0];
    assert_eq!((s.ok, s.errors), (4, 0));
    assert_eq!(s.output_tokens, 12);
}

/// A stream that ends without a finish_reason and without [DONE] is cut off: incomplete.
#[test]
fn a_stream_without_finish_reason_or_done_is_incomplete() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        done: false,
        ..Behavior::default()
    });
    let out = loadgen(
        &["--url", &srv.url(), "-n", "3", "--max-tokens", "3"],
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1));
    each_failed(&out, 3, ErrorClass::Reset, "incomplete");
}

/// A server's error message reaches the terminal through loadgen's warnings: its control
/// characters are escaped (no cleared screen, retitled terminal, bell or faked line), while the
/// request record keeps the message whole, as data.
#[test]
fn a_servers_error_body_is_escaped_before_it_reaches_stderr() {
    let srv = server::start(Behavior {
        ttft: Duration::from_millis(1),
        itl: Duration::from_millis(1),
        fault: |_| server::Fault::Hostile,
        ..Behavior::default()
    });
    let out = loadgen(
        &["--url", &srv.url(), "-n", "2", "--max-tokens", "2"],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "every request failed: {stderr}");
    assert!(
        !out.stderr
            .iter()
            .any(|b| (*b < 0x20 && *b != b'\n') || *b == 0x7f),
        "control characters reach the terminal: {stderr:?}"
    );
    assert!(
        stderr.contains("HTTP 500: \\x1b[2J\\x1b]0;owned\\x07boom"),
        "{stderr}"
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.starts_with("loadgen: error: fake")),
        "a faked line: {stderr}"
    );
    each_failed(
        &out,
        2,
        ErrorClass::Http5xx,
        "\u{1b}[2J\u{1b}]0;owned\u{7}boom",
    );
}

/// Durations and rates whose deadlines would overflow the clock (a panic, and exit 0 when it
/// happened on a worker thread) or that fail every request (a 0 s timeout) are refused in one
/// line naming the flag, exit 2, before any load.
#[test]
fn hostile_durations_and_rates_are_refused_in_one_line_instead_of_panicking() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "1ms"]);
    for (args, says) in [
        (vec!["--timeout", "0s"], "'0s': must be more than 0"),
        (vec!["--timeout", "1e30"], "longer than a year"),
        (
            vec!["--grace", "18446744073709551615s"],
            "longer than a year",
        ),
        (
            vec!["--rate", "0.5,1e-300"],
            "--rate 1e-300: at least 0.001",
        ),
    ] {
        let mut all = vec!["--url", &url, "-n", "2", "--max-tokens", "2"];
        all.extend(&args);
        let out = loadgen(&all, Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured");
    }
}

/// A trace row whose time, at the given speed, is beyond a year never leaves: the point ends
/// before it with a warning naming the request, instead of a panic computing its deadline.
#[test]
fn a_trace_row_beyond_a_year_ends_the_point_with_a_warning() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "1ms"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("far.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\":0,\"input_length\":16,\"output_length\":2}\n\
         {\"timestamp\":1000000000000000,\"input_length\":16,\"output_length\":2}\n",
    )
    .unwrap();
    let out = loadgen(
        &[
            "--url",
            &url,
            "--trace",
            trace.to_str().unwrap(),
            "--trace-speed",
            "0.001",
        ],
        Duration::from_secs(20),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("request 1 would leave") && stderr.contains("beyond a year"),
        "{stderr}"
    );
    let s = &out.of::<SummaryRecord>()[0];
    assert_eq!((s.requests, s.ok), (1, 1), "{s:?}");
}
/// The reader leaving just as a short point's last requests finish: the abort then finds every
/// request gone (nobody left to hear the cancel), and loadgen used to poll its finished abort
/// again and panic ("`async fn` resumed after completion"). Repeated to meet that moment.
#[test]
fn a_reader_leaving_as_the_last_requests_finish_never_panics() {
    let srv = server::start(Behavior::default());
    for round in 0..20 {
        let mut child = call("loadgen")
            .args(["--url", &srv.url(), "-c", "4", "-n", "8", "--warmup", "0"])
            .args(["--max-tokens", "2", "--input-len", "8"])
            .spawn();
        let mut first = String::new();
        let mut reader = BufReader::new(child.stdout.take().unwrap());
        reader.read_line(&mut first).unwrap();
        drop(reader);
        let out = testkit::wait_output(&mut child, Duration::from_secs(30));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "round {round}: {err}");
        assert_eq!(out.status.code(), Some(0), "round {round}: {err}");
    }
}

/// A server on 127.0.0.1 that lists a model and answers every POST with `hostile`'s bytes
/// after `head` (connection closed after each answer). For answers no real server gives.
fn hostile_server(head: &'static str, hostile: fn(&mut std::net::TcpStream)) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming().take(64) {
            let Ok(mut c) = conn else { continue };
            std::thread::spawn(move || {
                let mut req = [0u8; 8192];
                let n = c.read(&mut req).unwrap_or(0);
                if req[..n].starts_with(b"GET /v1/models") {
                    let body = r#"{"object":"list","data":[{"id":"m","max_model_len":4096}]}"#;
                    let _ = write!(
                        c,
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                } else if req[..n].starts_with(b"POST") {
                    let _ = c.write_all(head.as_bytes());
                    hostile(&mut c);
                } else {
                    let _ = c.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                }
            });
        }
    });
    url
}

/// Writes up to 64 MiB plus a little of bytes without a line break (a reader that stops
/// earlier ends the write).
fn endless_line(c: &mut std::net::TcpStream) {
    use std::io::Write;
    let block = vec![b'a'; 1 << 20];
    let _ = c.write_all(b"data: ");
    for _ in 0..65 {
        if c.write_all(&block).is_err() {
            return;
        }
    }
}

/// A server that never ends an SSE line, or sends a whole answer larger than any real one:
/// the request fails as a protocol error naming the bound, and loadgen does not grow without
/// end (it held every byte before).
#[test]
fn an_endless_line_or_a_huge_answer_fails_the_request_instead_of_growing_without_end() {
    let streamed = hostile_server(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
        endless_line,
    );
    let whole = hostile_server(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 69206016\r\nConnection: close\r\n\r\n",
        endless_line,
    );
    for (url, extra, bound) in [
        (&streamed, None, "an SSE line longer than 16 MiB"),
        (&whole, Some("--no-stream"), "answer larger than 64 MiB"),
    ] {
        let mut args = vec!["--url", url, "-n", "1", "--max-tokens", "2"];
        args.extend(["--prompts", "builtin", "--model", "m"]);
        args.extend(extra);
        let out = loadgen(&args, Duration::from_secs(60));
        each_failed(&out, 1, ErrorClass::Protocol, bound);
    }
}
