//! Servers for tests that stop them: a stand-in server process with the `server` record
//! srv-launch would have written for it, and srv-kill fed a record on stdin.

use crate::{Guard, cmd};
use servbench::exec::{Exec, Local};
use std::io::Write;
use std::process::{Command, Stdio};

/// A stand-in server: `sleep 60`, ended with its guard.
pub fn sleeping_server() -> Guard {
    let mut c = Command::new("sleep");
    c.arg("60");
    Guard::spawn(c)
}

/// The `server` record srv-launch writes for a running local `pid` (its own process group),
/// as one JSON line.
pub fn server_record(pid: u32) -> String {
    let start = Local.start_ticks(pid).unwrap().unwrap();
    serde_json::json!({
        "kind": "server", "v": 1, "ts": "2026-12-01T00:00:00.000Z", "labels": {},
        "engine": "cmd", "host": "localhost", "pid": pid, "pgid": pid,
        "start_ticks": start, "port": 0, "url": "http://127.0.0.1:1",
        "command": "sleep", "log": "/dev/null", "ready_s": 0.1
    })
    .to_string()
}

/// Stops the server a record names with srv-kill (its flags `args`: `--ssh-...` to reach it
/// over SSH), asserting srv-kill succeeded.
pub fn srv_kill(record: &serde_json::Value, args: &[&str]) {
    let mut child = cmd("srv-kill")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    writeln!(child.stdin.as_mut().unwrap(), "{record}").unwrap();
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success(), "srv-kill failed");
}
