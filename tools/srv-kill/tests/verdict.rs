//! srv-kill's verdict holds to the last process (issue 39 item 6: a vLLM process was still
//! there a second after srv-kill reported the tree gone). Real processes on this machine: a
//! leader that ends before its threads (the zombie /proc shows while the rest of the process
//! still exits: a big process's memory takes that long to free), and a child that left the
//! session and lingers after TERM. When srv-kill says gone, each is gone at that moment.

use std::process::Command;
use std::time::{Duration, Instant};
use testkit::{Guard, alive, json_lines, matched_pids};

/// On TERM the main thread ends at once (a zombie in /proc/PID/stat) while another thread of
/// the process keeps it running for `argv[1]` seconds.
const LEADER_FIRST: &str = r#"
import ctypes, os, signal, sys, threading, time
linger = float(sys.argv[1])
def stay():
    time.sleep(linger)
    os._exit(0)
def on_term(*_):
    threading.Thread(target=stay).start()
    ctypes.CDLL(None).pthread_exit(None)
signal.signal(signal.SIGTERM, on_term)
with open(sys.argv[2], "a") as f:
    f.write(f"{os.getpid()}\n")
while True:
    time.sleep(1)
"#;

/// Waits until `path` holds `n` pids and returns them.
fn wait_pids(path: &std::path::Path, n: usize) -> Vec<u32> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let pids: Vec<u32> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.len() >= n {
            return pids;
        }
        assert!(
            Instant::now() < end,
            "the processes did not start: {pids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// srv-kill on `pid` with `grace` (and `extra` flags): its one kill record, after asserting
/// exit 0.
fn kill(pid: u32, grace: &str, extra: &[&str]) -> serde_json::Value {
    let out = testkit::call("srv-kill")
        .args(["--pid", &pid.to_string(), "--grace", grace])
        .args(extra)
        .run();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    json_lines(&out.stdout).remove(0)
}

/// The python process of [`LEADER_FIRST`], killed with `grace` and `extra` flags: it ends at
/// the moment srv-kill answers, with `signals` sent.
fn leader_first_is_waited_for(grace: &str, signals: &[&str], extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let pids_file = dir.path().join("pids");
    let mut c = Command::new("python3");
    c.args(["-c", LEADER_FIRST, "3", pids_file.to_str().unwrap()]);
    let _guard = Guard::spawn(c);
    let pid = wait_pids(&pids_file, 1)[0];
    let r = kill(pid, grace, extra);
    assert!(!alive(pid), "pid {pid} still runs after the verdict: {r}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["signals"], serde_json::json!(signals), "{r}");
    assert_eq!(r["survivors"], serde_json::json!([]), "{r}");
}

#[test]
fn a_leader_that_ends_before_its_threads_is_waited_for() {
    leader_first_is_waited_for("20s", &["TERM"], &[]);
    leader_first_is_waited_for("1s", &["TERM", "KILL"], &[]);
}

/// The same through the remote process table (the loopback sshd: this machine's processes).
#[test]
fn over_ssh_a_leader_that_ends_before_its_threads_is_waited_for() {
    let s = testkit::sshd();
    leader_first_is_waited_for("20s", &["TERM"], &s.host_flags());
}

#[test]
fn a_child_in_its_own_session_that_lingers_after_term_is_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("pids");
    // The server exits at TERM; its child left the session (setsid) and takes 2 s to stop
    // (ignoring TERM meanwhile, its `sleep 2` too), its own child (a sleep) in that session.
    let child = dir.path().join("child.sh");
    std::fs::write(
        &child,
        format!(
            "trap 'trap \"\" TERM; sleep 2; exit 0' TERM\necho $$ >> {f}\nsleep 120 &\necho $! >> {f}\nwait\n",
            f = f.display()
        ),
    )
    .unwrap();
    let script = format!(
        "echo $$ >> {f}\nsetsid sh {child} &\nwait\n",
        f = f.display(),
        child = child.display()
    );
    let mut c = Command::new("sh");
    c.args(["-c", &script]);
    let _guard = Guard::spawn(c);
    let pids = wait_pids(&f, 3);
    let r = kill(pids[0], "20s", &[]);
    let lingering: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
    assert!(
        lingering.is_empty(),
        "{lingering:?} outlived the verdict: {r}"
    );
    let matched = matched_pids(&r);
    for p in &pids {
        assert!(matched.contains(p), "pid {p} not matched: {r}");
    }
    assert_eq!(r["signals"], serde_json::json!(["TERM"]), "{r}");
}
