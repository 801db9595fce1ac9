//! srv-sim under hostile clients: connections that stay idle, send their headers slowly or
//! stall their body must not hold its descriptors forever; it closes them after
//! `--idle-timeout` and keeps serving everyone else, even after running out of descriptors.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Waits (at most `limit`) for the server to close `s`: a read giving EOF or an error.
fn closed_within(s: &mut TcpStream, limit: Duration) -> bool {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) => {
                return !matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                );
            }
        }
    }
}

/// More idle and half-sent connections than srv-sim has descriptors: each is closed after
/// --idle-timeout, and a client arriving afterwards is served.
#[test]
fn idle_and_slow_connections_are_closed_and_the_rest_are_still_served() {
    let mut cmd = testkit::sh_cmd(&format!(
        "ulimit -n 64 && exec {} --port 0 --ttft 1ms --itl 1ms --idle-timeout 1s",
        testkit::bin("srv-sim").display()
    ));
    cmd.stdin(std::process::Stdio::null());
    let sim = common::start_cmd(cmd, true);
    let addr = format!("127.0.0.1:{}", sim.port);
    let mut hostile = Vec::new();
    for i in 0..120 {
        let mut s = TcpStream::connect(&addr).unwrap();
        if i % 2 == 1 {
            // A request head that never ends (slowloris).
            s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
        }
        hostile.push(s);
    }
    let started = Instant::now();
    // A request arriving behind all of them is answered once they are closed.
    let (status, body) = {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        let _ = s.read_to_string(&mut text);
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse::<u16>().ok());
        (status, text)
    };
    assert_eq!(status, Some(200), "after {:?}: {body}", started.elapsed());
    for (i, s) in hostile.iter_mut().enumerate() {
        assert!(
            closed_within(s, Duration::from_secs(20)),
            "connection {i} is still open"
        );
    }
}

/// A request whose body never arrives in full is answered 408 after --idle-timeout.
#[test]
fn a_stalled_request_body_is_answered_408() {
    let sim = common::start(&["--ttft", "1ms", "--itl", "1ms", "--idle-timeout", "1s"]);
    let mut s = TcpStream::connect(("127.0.0.1", sim.port)).unwrap();
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n{\"prompt\":",
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 408", "{}", String::from_utf8_lossy(&head));
}
