//! Every injected fault, as a client meets it: error statuses with bodies, a crash mid-stream,
//! a stall that keeps the connection open, a TCP reset mid-stream, and a slow startup.

mod common;
use common::*;
use std::io::ErrorKind;
use std::time::{Duration, Instant};

fn stream_body() -> String {
    completion_body(4, 20, true)
}

#[test]
fn fail_rate_answers_500_or_503_with_a_json_body() {
    let sim = start(&["--ttft", "0", "--itl", "0", "--fail-rate", "1"]);
    let mut statuses = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let x = post(sim.port, "/v1/completions", &stream_body());
        assert!(x.status == 500 || x.status == 503, "{}", x.status);
        let err = x.json();
        assert_eq!(err["error"]["code"], x.status);
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--fail-rate")
        );
        statuses.insert(x.status);
    }
    assert_eq!(statuses.len(), 2, "both 500 and 503 appear");
    // Non-generation routes are not failed.
    assert_eq!(get(sim.port, "/health").0, 200);
    drop(sim);

    // A partial rate fails some requests, the same ones for the same seed.
    let pattern = |seed: &str| {
        let sim = start(&[
            "--ttft",
            "0",
            "--itl",
            "0",
            "--fail-rate",
            "0.5",
            "--seed",
            seed,
        ]);
        (0..20)
            .map(|_| post(sim.port, "/v1/completions", &stream_body()).status)
            .collect::<Vec<u16>>()
    };
    let a = pattern("1");
    assert!(a.contains(&200) && a.iter().any(|s| *s >= 500), "{a:?}");
    assert_eq!(a, pattern("1"));
}

#[test]
fn crash_after_exits_the_process_mid_stream() {
    let sim = start(&["--ttft", "0", "--itl", "2ms", "--crash-after", "2"]);
    for _ in 0..2 {
        let x = post(sim.port, "/v1/completions", &stream_body());
        assert_eq!(x.status, 200);
        assert!(!x.truncated);
        assert_eq!(x.token_events().len(), 20);
    }
    let x = post(sim.port, "/v1/completions", &stream_body());
    assert_eq!(x.status, 200);
    assert!(x.truncated, "the third stream must end early");
    let got = x.token_events().len();
    assert!((1..20).contains(&got), "{got} tokens before the crash");
    assert!(!x.events.iter().any(|(_, e)| e == "[DONE]"));
    assert!(
        testkit::wait_gone(&[sim.guard.pid()], Duration::from_secs(5)),
        "srv-sim still alive after --crash-after"
    );
}

#[test]
fn stall_after_stops_sending_but_keeps_the_connection() {
    let sim = start(&["--ttft", "0", "--itl", "1ms", "--stall-after", "1"]);
    let ok = post(sim.port, "/v1/completions", &stream_body());
    assert_eq!(ok.token_events().len(), 20);
    let started = Instant::now();
    let x = exchange(
        sim.port,
        "POST",
        "/v1/completions",
        &stream_body(),
        Some(Duration::from_millis(700)),
    );
    assert_eq!(x.status, 200);
    let err = x.error.as_ref().expect("the read must time out, not end");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err:?}"
    );
    assert!(started.elapsed() >= Duration::from_millis(650));
    let got = x.token_events().len();
    assert!((1..20).contains(&got), "{got} tokens before the stall");
    // Non-streaming requests stall too (no answer at all), and the server is otherwise alive.
    let whole = exchange(
        sim.port,
        "POST",
        "/v1/completions",
        &completion_body(4, 20, false),
        Some(Duration::from_millis(300)),
    );
    assert_eq!(whole.status, 0);
    assert_eq!(get(sim.port, "/health").0, 200);
}

#[test]
fn reset_rate_resets_the_connection_mid_stream() {
    let sim = start(&["--ttft", "0", "--itl", "1ms", "--reset-rate", "1"]);
    for _ in 0..3 {
        let x = post(sim.port, "/v1/completions", &stream_body());
        assert_eq!(x.status, 200);
        let err = x.error.as_ref().expect("a reset, not a clean end");
        assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err:?}");
        let got = x.token_events().len();
        assert!((1..20).contains(&got), "{got} tokens before the reset");
    }
    assert!(testkit::alive(sim.guard.pid()));
    assert_eq!(get(sim.port, "/health").0, 200);
}

#[test]
fn startup_answers_503_until_loaded() {
    let started = Instant::now();
    let sim = start_opts(&["--ttft", "0", "--itl", "0", "--startup", "1s"], false);
    let (status, body) = get(sim.port, "/health");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("Loading"));
    assert_eq!(
        post(sim.port, "/v1/completions", &stream_body()).status,
        503
    );
    while get(sim.port, "/health").0 != 200 {
        assert!(started.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(started.elapsed() >= Duration::from_millis(950));
    assert_eq!(
        post(sim.port, "/v1/completions", &stream_body()).status,
        200
    );
}

#[test]
fn client_disconnect_frees_the_slot() {
    // One slot: a client that goes away mid-stream must not hold it.
    let sim = start(&[
        "--ttft",
        "0",
        "--itl",
        "10ms",
        "--max-running-requests",
        "1",
    ]);
    {
        use std::io::{Read, Write};
        // 1,000 tokens at 10 ms: a slot it kept would hold the next request for ~10 s.
        let body = completion_body(4, 1000, true);
        let mut s = std::net::TcpStream::connect(("127.0.0.1", sim.port)).unwrap();
        write!(
            s,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0);
        // Dropping the socket closes the connection mid-stream.
    }
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    let next = post(sim.port, "/v1/completions", &completion_body(4, 3, true));
    assert_eq!(next.token_events().len(), 3);
    // Half the held slot's cost: far above a 3-token answer even on a busy box.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the abandoned request kept the slot"
    );
    let (_, metrics) = get(sim.port, "/metrics");
    assert_eq!(metric(&metrics, "vllm:num_requests_running"), 0.0);
}
