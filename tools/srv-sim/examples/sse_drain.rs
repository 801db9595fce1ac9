//! A minimal SSE load client for `scripts/bench-srv-sim.sh`: N keep-alive connections, each
//! posting streaming completions back to back and counting `data: {` events, for a fixed time.
//! Deliberately dumb (std only, no JSON parsing) so it costs less per token than the server.
//!
//! Usage: sse_drain PORT [CONNECTIONS] [SECONDS] [MAX_TOKENS]
//! Prints one JSON line: {"tokens_per_s":..,"requests_per_s":..,"tokens":..,"requests":..,"seconds":..}

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, default: u64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
    let Some(port) = args.get(1).and_then(|p| p.parse::<u16>().ok()) else {
        eprintln!("usage: sse_drain PORT [CONNECTIONS] [SECONDS] [MAX_TOKENS]");
        std::process::exit(2);
    };
    let connections = arg(2, 32);
    let seconds = arg(3, 10);
    let max_tokens = arg(4, 256);
    let body = format!(
        r#"{{"prompt":"hello world","max_tokens":{max_tokens},"ignore_eos":true,"stream":true}}"#
    );
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let tokens = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let (tokens, requests, stop, request) = (
                tokens.clone(),
                requests.clone(),
                stop.clone(),
                request.clone(),
            );
            std::thread::spawn(move || {
                let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                s.set_nodelay(true).ok();
                let mut buf = vec![0u8; 256 << 10];
                // The last bytes of the previous read, so patterns split across reads are found.
                let mut carry: Vec<u8> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    s.write_all(request.as_bytes()).expect("send");
                    let mut events = 0u64;
                    loop {
                        let n = s.read(&mut buf).expect("read");
                        assert!(n > 0, "server closed the connection");
                        carry.extend_from_slice(&buf[..n]);
                        events += count(&carry, b"data: {") as u64;
                        let done = count(&carry, b"\r\n0\r\n\r\n") > 0;
                        let keep = carry.len().min(8);
                        carry.drain(..carry.len() - keep);
                        // Kept bytes are at most 8 < len("data: {") + 1, but could hold a partial
                        // "data: {" that the next read completes: dedupe by not re-counting whole ones.
                        if count(&carry, b"data: {") > 0 {
                            carry.clear();
                        }
                        if done {
                            carry.clear();
                            break;
                        }
                    }
                    tokens.fetch_add(events, Ordering::Relaxed);
                    requests.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    let (t, r) = (
        tokens.load(Ordering::Relaxed),
        requests.load(Ordering::Relaxed),
    );
    let elapsed = start.elapsed().as_secs_f64();
    for th in threads {
        let _ = th.join();
    }
    println!(
        r#"{{"tokens_per_s":{:.0},"requests_per_s":{:.1},"tokens":{t},"requests":{r},"seconds":{elapsed:.2},"connections":{connections},"max_tokens":{max_tokens}}}"#,
        t as f64 / elapsed,
        r as f64 / elapsed
    );
}
