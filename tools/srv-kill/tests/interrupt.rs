//! Ctrl-C reaches srv-kill with the rest of its pipeline, while it holds the only handle on the
//! servers upstream launched. The first one means "upstream is stopping": it reads on; a second
//! one, or no end of input within `--drain-wait`, stops the reading, and srv-kill still kills
//! every server it holds before it leaves, with exit 130. Each test knows srv-kill has read a
//! line because it passes on a marker record written after it.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use testkit::servers::{server_record, sleeping_server};
use testkit::{Collected, cmd, wait_gone};

/// srv-kill reading a pipe this test holds open; its stdout lines and stderr as they come.
struct SrvKill {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    stderr: Collected,
}

impl SrvKill {
    fn start(args: &[&str]) -> SrvKill {
        let mut child = cmd("srv-kill")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start srv-kill");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let stderr = Collected::start(child.stderr.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        SrvKill {
            child,
            stdin,
            lines,
            stderr,
        }
    }

    /// Writes `line`, then a marker record, and waits until srv-kill passed the marker on.
    fn feed(&mut self, line: &str, marker: u32) {
        let mark = format!(r#"{{"kind":"marker","v":1,"n":{marker}}}"#);
        writeln!(self.stdin, "{line}\n{mark}").unwrap();
        self.stdin.flush().unwrap();
        loop {
            let got = self
                .lines
                .recv_timeout(Duration::from_secs(20))
                .expect("srv-kill passed the marker on");
            if got == mark {
                return;
            }
        }
    }

    fn signal(&self, sig: i32) {
        // SAFETY: signalling the child this test spawned, by its pid.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Waits for the exit (stdin still open); the exit code, kill records and stderr.
    fn finish(mut self) -> (Option<i32>, Vec<serde_json::Value>, String) {
        let out = testkit::wait_output(&mut self.child, Duration::from_secs(20));
        let kills = self
            .lines
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(&l).ok())
            .filter(|v| v["kind"] == "kill")
            .collect();
        drop(self.stdin);
        (out.status.code(), kills, self.stderr.finish())
    }
}

#[test]
fn a_second_ctrl_c_stops_reading_and_srv_kill_still_kills_every_server_it_holds() {
    let (first, second) = (sleeping_server(), sleeping_server());
    // A drain bound far beyond the test's: only the second signal can end the reading.
    let mut kill = SrvKill::start(&["--grace", "1s", "--drain-wait", "10m"]);
    kill.feed(&server_record(first.pid()), 1);
    kill.signal(libc::SIGINT);
    // Counted before the next step (two signals sent at once could arrive as one).
    kill.stderr
        .wait_for("srv-kill: interrupted: reading on", Duration::from_secs(20));
    // Upstream is stopping, not gone: what it still sends is read and held.
    kill.feed(&server_record(second.pid()), 2);
    assert!(
        testkit::alive(first.pid()) && testkit::alive(second.pid()),
        "killed before the input ended or a second Ctrl-C"
    );
    testkit::signal_from_another_sender(kill.child.id(), "INT");
    let (code, kills, err) = kill.finish();
    assert_eq!(code, Some(130), "{err}");
    assert!(
        wait_gone(&[first.pid(), second.pid()], Duration::from_secs(2)),
        "a server it held was left running: {err}"
    );
    assert_eq!(kills.len(), 2, "{kills:?}");
    assert!(kills.iter().all(|k| k["ok"] == true), "{kills:?}");
    assert!(
        err.contains("a second Ctrl-C/SIGTERM: stopped reading stdin"),
        "{err}"
    );
}

#[test]
fn no_end_of_input_within_drain_wait_and_srv_kill_still_kills_what_it_holds() {
    let server = sleeping_server();
    let mut kill = SrvKill::start(&["--grace", "1s", "--drain-wait", "1s"]);
    kill.feed(&server_record(server.pid()), 1);
    kill.signal(libc::SIGTERM);
    let (code, kills, err) = kill.finish();
    assert_eq!(code, Some(130), "{err}");
    assert!(
        wait_gone(&[server.pid()], Duration::from_secs(2)),
        "the server was left running: {err}"
    );
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert_eq!(kills[0]["ok"], true, "{kills:?}");
    assert!(
        err.contains("no end of input within 1s of the Ctrl-C (--drain-wait)"),
        "{err}"
    );
}

#[test]
fn a_ctrl_c_before_any_server_record_exits_130_not_nothing_matched() {
    let mut kill = SrvKill::start(&[]);
    kill.feed(r#"{"kind":"marker","v":1,"n":0}"#, 1);
    kill.signal(libc::SIGINT);
    kill.stderr
        .wait_for("srv-kill: interrupted: reading on", Duration::from_secs(20));
    let SrvKill {
        mut child,
        stdin,
        stderr,
        ..
    } = kill;
    drop(stdin);
    let out = testkit::wait_output(&mut child, Duration::from_secs(20));
    let err = stderr.finish();
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted before any server record arrived: nothing to kill"),
        "{err}"
    );
}
