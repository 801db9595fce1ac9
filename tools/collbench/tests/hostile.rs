//! collbench against hostile values and a hostile network: rank counts and sizes beyond the
//! host are refused before anything starts, ranks it starts die with it, and the bootstrap
//! ports survive strangers and never trust a length from the wire.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Stdio;
use std::time::Duration;
use testkit::stderr;
use testkit::{Guard, cmd};

/// collbench with `args`, failing the test past 30 s.
fn run(args: &[&str]) -> testkit::Run {
    testkit::call("collbench")
        .args(args)
        .within(Duration::from_secs(30))
        .run()
}

/// A rank started by hand; stdout and stderr piped.
fn rank(rank: usize, coordinator: &str, extra: &[&str]) -> Guard {
    let mut c = cmd("collbench");
    c.args(["--rank", &rank.to_string(), "--world", "2"])
        .args(["--coordinator", coordinator])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Guard::spawn(c)
}

#[test]
fn rank_counts_and_sizes_beyond_the_host_are_refused_in_one_line() {
    for (args, says) in [
        (vec!["-np", "100000"], "-np 100000: at most 256"),
        (
            vec!["decode", "--model", "llama-3.1-8b", "--tp", "100000"],
            "--tp 100000: at most 256",
        ),
        (vec!["-np", "2", "-b", "8", "-e", "100G"], "-e: at 64.0 GiB"),
    ] {
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured");
    }
    let err = stderr(&run(&["-np", "2", "-b", "8", "-e", "100G"]));
    assert!(err.contains("available"), "{err}");
}

/// B1-B3, B5: GEMM operands, `-n`'s samples and `limits`' buffers were allocated unchecked
/// (SIGABRT on a 1.6 TB allocation) where collective buffers were already bounded; `decode
/// --batch 0` ran. Each is now one line naming the flag and the bound, exit 2, nothing run.
#[test]
fn gemm_operands_iterations_and_limits_buffers_beyond_the_host_are_refused_in_one_line() {
    for (args, says) in [
        (
            vec![
                "gemm",
                "--model",
                "llama-3.1-8b",
                "--tp",
                "1",
                "--batch",
                "100000000",
            ],
            "--batch: the f32 operands at batch 100000000 need",
        ),
        (
            vec!["gemm", "--shape", "100000x100000x100000"],
            "--shape: the f32 operands need",
        ),
        (
            vec!["gemm", "--shape", "8x8x8", "-n", "4000000000"],
            "-n/--iters 4000000000: at most 1000000 iterations",
        ),
        (
            vec!["gemm", "--shape", "8x8x8", "-w", "4000000000"],
            "-w/--warmup-iters 4000000000: at most 1000000",
        ),
        (
            vec!["-np", "2", "-b", "8", "-e", "8", "-n", "4000000000"],
            "-n/--iters 4000000000: at most 1000000",
        ),
        (
            vec![
                "decode",
                "--model",
                "llama-3.1-8b",
                "--tp",
                "1",
                "-n",
                "4000000000",
            ],
            "-n/--iters 4000000000: at most 1000000",
        ),
        (
            vec!["limits", "--bytes", "1T"],
            "--bytes: a copy's source and destination need 2.0 TiB of buffers but this host has",
        ),
        (
            vec!["limits", "-n", "4000000000"],
            "-n/--iters 4000000000: at most",
        ),
        (
            vec![
                "decode",
                "--model",
                "llama-3.1-8b",
                "--tp",
                "1",
                "--batch",
                "0",
            ],
            "--batch 0: a decode step runs at least one sequence",
        ),
        (
            vec![
                "decode",
                "--model",
                "llama-3.1-8b",
                "--tp",
                "1",
                "--batch",
                "1,0",
            ],
            "--batch 0:",
        ),
    ] {
        let out = run(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("collbench: error: "), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(err.contains("available") || !says.contains("need"), "{err}");
        assert!(out.stdout.is_empty(), "{args:?}: nothing measured");
    }
}

/// The children of `pid` (by their /proc stat's parent field).
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let after = s.rsplit_once(") ")?.1.to_string();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// SIGTERM (or Ctrl-C, or a kill) on `collbench -np N` leaves no rank running.
#[test]
fn local_ranks_die_with_collbench() {
    let mut c = cmd("collbench");
    c.args([
        "-np", "3", "-b", "8", "-e", "8",
        // The most -n allows: 3 ranks at 8 B take many seconds, long past the kill.
        "-n", "1000000", "-w", "0",
    ])
    .args(["--mode", "latency", "--no-check"])
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    let mut parent = Guard::spawn(c);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let ranks = loop {
        let ranks = children_of(parent.pid());
        if ranks.len() == 3 {
            break ranks;
        }
        assert!(std::time::Instant::now() < deadline, "ranks: {ranks:?}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: signalling the process this test started, by its pid.
    unsafe {
        libc::kill(parent.pid() as i32, libc::SIGTERM);
    }
    let _ = parent.child.wait();
    assert!(
        testkit::wait_gone(&ranks, Duration::from_secs(10)),
        "ranks {ranks:?} outlived collbench"
    );
}

/// A port scanner, a client that closes at once and one that never speaks connect to rank 0's
/// coordinator port before the real rank 1: each is ignored with a warning, the job runs.
#[test]
fn a_stray_connection_to_the_coordinator_does_not_abort_rank_0() {
    let port = testkit::free_port();
    let coordinator = format!("127.0.0.1:{port}");
    let args = [
        "-b",
        "8",
        "-e",
        "64",
        "-n",
        "2",
        "-w",
        "0",
        "--timeout",
        "60s",
    ];
    let mut root = rank(0, &coordinator, &args);
    assert!(testkit::wait_port(port, Duration::from_secs(20)), "rank 0");
    let mut http = TcpStream::connect(&coordinator).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let _silent = TcpStream::connect(&coordinator).unwrap();
    drop(TcpStream::connect(&coordinator).unwrap());
    let mut other = rank(1, &coordinator, &args);
    let root_out = testkit::wait_output(&mut root.child, Duration::from_secs(60));
    let other_out = testkit::wait_output(&mut other.child, Duration::from_secs(60));
    let err = stderr(&root_out);
    assert_eq!(root_out.status.code(), Some(0), "{err}");
    assert_eq!(other_out.status.code(), Some(0), "{}", stderr(&other_out));
    assert!(
        err.matches("ignoring a connection from").count() >= 3,
        "{err}"
    );
    let recs = testkit::json_lines(&root_out.stdout);
    assert!(recs.iter().any(|r| r["kind"] == "coll_run"), "{recs:?}");
}

/// Something else answers at the coordinator address with a frame header announcing 4 GB:
/// the rank refuses it in one line (under a 2 GB address-space limit, an allocation of it
/// would abort).
#[test]
fn a_rank_does_not_trust_a_length_from_the_wire() {
    let fake = TcpListener::bind("127.0.0.1:0").unwrap();
    let coordinator = fake.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let (mut s, _) = fake.accept().unwrap();
        let mut hello = [0u8; 256];
        let _ = s.read(&mut hello).unwrap();
        // A frame: its tag (the address table's), then the length.
        s.write_all(&[1u8]).unwrap();
        s.write_all(&0xFFFF_FFF0u32.to_le_bytes()).unwrap();
        std::thread::sleep(Duration::from_secs(30));
    });
    let mut c = testkit::sh_cmd(&format!(
        "ulimit -v 2000000 && exec {} --rank 1 --world 2 --coordinator {coordinator} -b 8 -e 8 --timeout 20s",
        testkit::bin("collbench").display()
    ));
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = testkit::wait_output(&mut child, Duration::from_secs(30));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("4294967280 bytes"), "{err}");
}
