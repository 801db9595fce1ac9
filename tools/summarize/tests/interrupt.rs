//! Ctrl-C reaches summarize with the rest of its pipeline, while it holds every point read so
//! far. The first one means "upstream is stopping": it reads on to the end of its input; a
//! second one, or no end within `--drain-wait`, stops the reading. Either way it prints the
//! table of what arrived (the same table as without the Ctrl-C) and exits 130. The tests know
//! summarize catches the signal by its /proc status, and that it has read what they wrote by
//! the pipe standing empty: no sleeps.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdin, Stdio};
use std::time::{Duration, Instant};
use testkit::Collected;

fn fixture() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/loadgen_sim.jsonl"
    ))
    .unwrap()
}

/// The table summarize prints for the whole fixture, uninterrupted.
fn whole_table() -> String {
    let out = testkit::cmd("summarize")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/loadgen_sim.jsonl"
        ))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

fn until(what: &str, mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < end, "{what} within 20 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// summarize on a pipe this test holds, once it catches SIGINT (its handler is in place); its
/// stderr as it comes.
fn start(args: &[&str]) -> (Child, ChildStdin, Collected) {
    let mut child = testkit::cmd("summarize")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stderr = Collected::start(child.stderr.take().unwrap());
    let status = format!("/proc/{}/status", child.id());
    until("summarize catching SIGINT", || {
        std::fs::read_to_string(&status)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("SigCgt:"))
                    .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
            })
            .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
    });
    (child, stdin, stderr)
}

/// Writes `text` and waits until summarize has read all of it (the pipe holds no byte).
fn feed(stdin: &mut ChildStdin, text: &str) {
    stdin.write_all(text.as_bytes()).unwrap();
    stdin.flush().unwrap();
    until("summarize reading its input", || {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD into an int we own, on the pipe this test holds.
        let rc = unsafe { libc::ioctl(stdin.as_raw_fd(), libc::FIONREAD, &mut queued) };
        rc == 0 && queued == 0
    });
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signalling the child this test spawned, by its pid.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

fn finish(mut child: Child, stderr: Collected) -> (Option<i32>, String, String) {
    let out = testkit::wait_output(&mut child, Duration::from_secs(20));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr.finish(),
    )
}

/// The line summarize says on the first signal: it was counted.
const FIRST: &str = "summarize: interrupted: reading on";

#[test]
fn after_the_first_ctrl_c_summarize_reads_on_and_prints_every_point() {
    let text = fixture();
    let half = text.len() / 2;
    let cut = text[..half].rfind('\n').unwrap() + 1;
    let (child, mut stdin, stderr) = start(&["--drain-wait", "10m"]);
    feed(&mut stdin, &text[..cut]);
    signal(&child, libc::SIGINT);
    stderr.wait_for(FIRST, Duration::from_secs(20));
    feed(&mut stdin, &text[cut..]);
    drop(stdin);
    let (code, table, err) = finish(child, stderr);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(table, whole_table(), "{err}");
    assert!(err.contains("summarize: interrupted: reading on"), "{err}");
}

#[test]
fn a_second_ctrl_c_stops_reading_and_summarize_prints_what_arrived() {
    let (child, mut stdin, stderr) = start(&["--drain-wait", "10m"]);
    feed(&mut stdin, &fixture());
    signal(&child, libc::SIGINT);
    // Two signals sent at once could arrive as one.
    stderr.wait_for(FIRST, Duration::from_secs(20));
    testkit::signal_from_another_sender(child.id(), "INT");
    let (code, table, err) = finish(child, stderr);
    drop(stdin);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(table, whole_table(), "{err}");
    assert!(
        err.contains("a second Ctrl-C/SIGTERM: stopped reading stdin"),
        "{err}"
    );
}

#[test]
fn no_end_of_input_within_drain_wait_and_summarize_prints_what_arrived() {
    let (child, mut stdin, stderr) = start(&["--drain-wait", "1s"]);
    feed(&mut stdin, &fixture());
    signal(&child, libc::SIGTERM);
    let (code, table, err) = finish(child, stderr);
    drop(stdin);
    assert_eq!(code, Some(130), "{err}");
    assert_eq!(table, whole_table(), "{err}");
    assert!(
        err.contains("no end of input within 1s of the Ctrl-C (--drain-wait)"),
        "{err}"
    );
}

#[test]
fn a_ctrl_c_before_any_record_exits_130_not_no_records() {
    let (child, stdin, stderr) = start(&[]);
    signal(&child, libc::SIGINT);
    stderr.wait_for(FIRST, Duration::from_secs(20));
    drop(stdin);
    let (code, _, err) = finish(child, stderr);
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("interrupted before any record arrived: nothing to summarize"),
        "{err}"
    );
}

/// A second Ctrl-C ends loadgen before its partial summary: after a Ctrl-C, a point whose
/// requests came and whose summary did not is marked partial, not shown as whole.
#[test]
fn after_a_ctrl_c_a_point_without_its_summary_is_noted_as_cut_short() {
    let text: String = fixture()
        .lines()
        .filter(|l| !(l.contains(r#""kind":"summary""#) && l.contains(r#""concurrency":16"#)))
        .map(|l| format!("{l}\n"))
        .collect();
    let (child, mut stdin, stderr) = start(&[]);
    feed(&mut stdin, &text);
    signal(&child, libc::SIGINT);
    stderr.wait_for(FIRST, Duration::from_secs(20));
    drop(stdin);
    let (code, table, err) = finish(child, stderr);
    assert_eq!(code, Some(130), "{err}");
    let note = table
        .lines()
        .find(|l| l.starts_with("note: cut short (partial)"))
        .unwrap_or_else(|| panic!("no partial note: {table}"));
    assert!(note.contains("C=16") && !note.contains("C=4"), "{note}");
}
