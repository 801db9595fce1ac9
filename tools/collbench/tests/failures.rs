//! What happens when things go wrong: a rank dies or hangs mid-run, a rank never joins, bad
//! flags, and the nccl backend on a machine without CUDA.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::stderr;
use testkit::{Guard, cmd};

/// A rank started by hand, stdout/stderr captured.
fn rank(rank: usize, world: usize, coordinator: &str, extra: &[&str]) -> Command {
    let mut c = cmd("collbench");
    c.args([
        "--rank",
        &rank.to_string(),
        "--world",
        &world.to_string(),
        "--coordinator",
        coordinator,
    ])
    .args(extra)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

/// Waits for a child up to `limit`; panics (after killing it) if it is still running.
fn wait_for(guard: &mut Guard, limit: Duration) -> (std::process::ExitStatus, Duration) {
    let start = Instant::now();
    loop {
        if let Some(status) = guard.child.try_wait().unwrap() {
            return (status, start.elapsed());
        }
        assert!(
            start.elapsed() < limit,
            "rank still running after {limit:?}: it hangs"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn read_stderr(guard: &mut Guard) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = guard.child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

/// Long enough to still be running when we strike: many iterations of a large allreduce.
const LONG_RUN: &[&str] = &[
    "-b",
    "4M",
    "-e",
    "4M",
    "-n",
    "100000",
    "-w",
    "0",
    "--no-check",
];

#[test]
fn a_rank_that_dies_makes_the_others_fail_fast_naming_it() {
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let mut others: Vec<Guard> = [0, 2]
        .iter()
        .map(|&r| {
            Guard::spawn(rank(
                r,
                3,
                &coordinator,
                &[&["--timeout", "60s"], LONG_RUN].concat(),
            ))
        })
        .collect();
    let mut victim = Guard::spawn(rank(
        1,
        3,
        &coordinator,
        &[&["--timeout", "60s"], LONG_RUN].concat(),
    ));
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        testkit::alive(victim.pid()),
        "rank 1 ended before the test killed it: {}",
        read_stderr(&mut victim)
    );
    victim.child.kill().unwrap();
    let _ = victim.child.wait();
    for g in others.iter_mut() {
        // Far inside the 60 s timeout: a closed connection is noticed at once.
        let (status, took) = wait_for(g, Duration::from_secs(20));
        let err = read_stderr(g);
        assert_eq!(status.code(), Some(1), "{err}");
        assert!(took < Duration::from_secs(20));
        assert!(err.contains("collbench: error:"), "{err}");
        assert!(err.contains("closed its connection"), "{err}");
    }
    // Rank 0 names rank 1 or 2 as the peer that went away (rank 2 may have left first) and
    // still wrote a footer saying why the run stopped.
    let mut stdout = Vec::new();
    std::io::Read::read_to_end(&mut others[0].child.stdout.take().unwrap(), &mut stdout).unwrap();
    let recs = testkit::json_lines(&stdout);
    let footer = recs.last().expect("a coll_run footer");
    assert_eq!(footer["kind"], "coll_run");
    assert!(
        footer["error"].as_str().unwrap().contains("rank"),
        "{footer}"
    );
}

#[test]
fn a_rank_that_hangs_is_reported_after_the_timeout() {
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let mut r0 = Guard::spawn(rank(
        0,
        2,
        &coordinator,
        &[&["--timeout", "2s"], LONG_RUN].concat(),
    ));
    let r1 = Guard::spawn(rank(
        1,
        2,
        &coordinator,
        &[&["--timeout", "2s"], LONG_RUN].concat(),
    ));
    std::thread::sleep(Duration::from_millis(1000));
    // SAFETY: stopping the process we started (by pid); the guard kills it afterwards.
    unsafe {
        libc::kill(r1.pid() as i32, libc::SIGSTOP);
    }
    let (status, took) = wait_for(&mut r0, Duration::from_secs(30));
    let err = read_stderr(&mut r0);
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("no progress from rank 1"), "{err}");
    assert!(
        took >= Duration::from_secs(2),
        "gave up before the timeout: {took:?}"
    );
}

#[test]
fn a_rank_that_never_joins_is_named() {
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let out = rank(
        0,
        3,
        &coordinator,
        &["--timeout", "1s", "-b", "8", "-e", "8"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("rank(s) 1,2 never joined"), "{err}");
}

#[test]
fn ranks_started_with_different_arguments_are_refused() {
    let coordinator = format!("127.0.0.1:{}", testkit::free_port());
    let r0 = rank(
        0,
        2,
        &coordinator,
        &["--timeout", "10s", "-b", "8", "-e", "8"],
    )
    .spawn()
    .unwrap();
    let r1 = rank(
        1,
        2,
        &coordinator,
        &["--timeout", "10s", "-b", "16", "-e", "16"],
    )
    .spawn()
    .unwrap();
    let o0 = r0.wait_with_output().unwrap();
    let _ = r1.wait_with_output().unwrap();
    assert_eq!(o0.status.code(), Some(1));
    assert!(
        stderr(&o0).contains("different arguments"),
        "{}",
        stderr(&o0)
    );
}

#[test]
fn nccl_backend_without_cuda_names_every_library_file_it_looked_for_and_exits_2() {
    let out = cmd("collbench")
        .args(["--backend", "nccl", "-b", "8", "-e", "8"])
        .env("LD_LIBRARY_PATH", "/nonexistent")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one error line: {err}");
    assert!(
        err.starts_with("collbench: error: --backend nccl:"),
        "{err}"
    );
    assert!(
        err.contains("cannot load the CUDA driver: looked for libcuda.so ")
            && err.contains(" libcuda.so.1 ")
            && err.contains("cannot load NCCL: looked for libnccl.so "),
        "{err}"
    );
    assert!(err.contains("LD_LIBRARY_PATH"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn bad_usage_is_one_line_and_exit_2() {
    for (args, needle) in [
        (vec!["--algo", "tree"], "not available for allreduce"),
        (vec!["-b", "0"], "-b must be at least 1"),
        (vec!["-b", "8", "-e", "4"], "smaller than -b"),
        (vec!["-b", "12Q"], "not a size"),
        (vec!["--rank", "0"], "--rank and --world go together"),
        (vec!["--rank", "1", "--world", "2"], "--coordinator"),
        (vec!["--coll", "gather"], "gather"),
        (vec!["-g", "2"], "-g/--ngpus is for --backend nccl"),
        (
            vec!["--coll", "broadcast", "--root", "2", "-np", "2"],
            "--root 2",
        ),
        (vec!["--coll", "broadcast", "--root", "1"], "--root 1"),
        (vec!["--backend", "nccl", "--algo", "ring"], "NCCL_ALGO"),
    ] {
        let out = cmd("collbench").args(&args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("collbench: error:"), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn help_shows_an_example_pipeline_and_version_works() {
    let out = cmd("collbench").arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("| summarize") && text.contains("-np 4"),
        "{text}"
    );
    let out = cmd("collbench").arg("--version").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("collbench "));
}
