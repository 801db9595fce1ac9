use super::*;
use std::io::Write as _;

const STEP: &str = "INFO [loggers.py:200] Engine 000: Iteration(4): 0 context requests, 0 context tokens, 2 generation requests, 2 generation tokens, iteration elapsed time: 5.25 ms, GPU KV cache usage: 0.1%\n";

fn log_of(path: &std::path::Path) -> StepLog {
    let record: ServerRecord = serde_json::from_value(serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-12-02T00:00:00.000Z", "engine": "vllm",
        "host": "localhost", "pid": 1, "pgid": 1, "start_ticks": 1, "port": 8000,
        "url": "http://127.0.0.1:8000", "command": "vllm serve m",
        "log": path.to_str().unwrap(), "ready_s": 1.0,
        "argv": ["vllm", "serve", "m", servbench::engines::STEP_LOG_FLAG]
    }))
    .unwrap();
    StepLog::for_server(Some(&record), &SshOptions::default()).expect("a step log")
}

fn append(path: &std::path::Path, text: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

#[test]
fn only_the_whole_lines_written_inside_the_window_are_the_points_steps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, STEP.repeat(3)).unwrap();
    let mut log = log_of(&path);
    log.begin();
    // Two whole steps, then the first half of a third still being written.
    append(&path, &format!("{STEP}{STEP}{}", &STEP[..60]));
    let e = log.end(0, 0.0).expect("the window's steps");
    assert_eq!((e.steps, e.gen_tokens_total), (2, 4));
    assert_eq!(e.log_bytes, (2 * STEP.len() + 60) as u64);
    assert_eq!(e.result_wait_ms.map(|w| w.mean), Some(5.25));
    assert_eq!(log.noted, None);
}

#[test]
fn the_steps_rate_is_over_the_busy_window_the_point_measured() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, "").unwrap();
    let mut log = log_of(&path);
    log.begin();
    append(&path, &STEP.repeat(10));
    std::thread::sleep(Duration::from_millis(80));
    // Ten steps in a 50 ms busy window (the window itself is the point's wall time, longer).
    let e = log.end(0, 0.05).expect("the window's steps");
    assert_eq!(e.busy_s, 0.05);
    assert!((e.step_ms_mean - 5.0).abs() < 1e-9, "{e:?}");
    assert!(e.window_s > e.busy_s);
}

#[test]
fn a_log_that_shrank_during_a_point_gives_no_steps_and_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, STEP.repeat(3)).unwrap();
    let mut log = log_of(&path);
    log.begin();
    std::fs::write(&path, STEP).unwrap();
    assert_eq!(log.end(0, 0.0), None);
    assert!(log.noted.unwrap().contains("shrank"));
}

#[test]
fn sl_rotate_a_log_rotated_mid_point_that_outgrew_the_old_offset_is_said_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, STEP.repeat(3)).unwrap();
    let mut log = log_of(&path);
    log.begin();
    std::fs::rename(&path, dir.path().join("server.log.1")).unwrap();
    std::fs::write(&path, STEP.repeat(10)).unwrap();
    assert_eq!(log.end(0, 0.0), None);
    let note = log.noted.unwrap();
    assert!(note.contains("rotated during point 0"), "{note}");
}

#[test]
fn steplog_fifo_a_log_that_is_a_fifo_is_not_opened_and_the_point_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo.log");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo has no other effect.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let mut log = log_of(&path);
    let t = Instant::now();
    log.begin();
    assert_eq!(log.end(0, 0.0), None);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let note = log.noted.unwrap();
    assert!(note.contains("not a regular file"), "{note}");
}

#[test]
fn a_window_with_nothing_written_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, STEP).unwrap();
    let mut log = log_of(&path);
    log.begin();
    assert_eq!(log.end(0, 0.0), None);
    assert!(log.noted.unwrap().contains("no step line during point 0"));
}

#[test]
fn sl_flood_a_cut_window_keeps_its_steps_and_says_so_without_denying_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, "").unwrap();
    let mut log = log_of(&path);
    log.begin();
    let n = (MAX_STEP_LOG_BYTES as usize / STEP.len()) + 100;
    append(&path, &STEP.repeat(n));
    let e = log.end(0, 1.0).expect("the steps of the part read");
    assert!(e.log_cut && e.steps > 0, "{e:?}");
    let note = log.noted.unwrap();
    assert!(note.contains("cover the first part only"), "{note}");
    assert!(!note.contains("have no `engine_steps`"), "{note}");
}

#[test]
fn sl_hugeline_an_8_mb_step_line_gives_a_short_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, "").unwrap();
    let mut log = log_of(&path);
    log.begin();
    let huge = STEP.replace("5.25 ms", &format!("{} ms", "9".repeat(8 << 20)));
    append(&path, &huge);
    assert_eq!(log.end(0, 0.0), None);
    let note = log.noted.unwrap();
    assert!(note.len() < 500, "{} bytes", note.len());
}

#[test]
fn a_window_of_only_unreadable_step_lines_gives_no_steps_and_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("server.log");
    std::fs::write(&path, STEP).unwrap();
    let mut log = log_of(&path);
    log.begin();
    append(&path, &STEP.replace("5.25 ms", "NaN ms").repeat(2));
    assert_eq!(log.end(0, 0.0), None);
    assert!(log.noted.is_some());
}

#[test]
fn a_missing_log_gives_no_steps_and_a_note_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = log_of(&dir.path().join("gone.log"));
    log.begin();
    assert_eq!(log.end(0, 0.0), None);
    assert!(log.noted.is_some());
}
