//! No silent default target: loadgen measures the server a `server` record or `--url` names,
//! never one it was not pointed at. A launch that failed upstream leaves loadgen's stdin without
//! a server record; loadgen then says so, sends nothing and exits 1, and the rest of the
//! pipeline passes the failure on. (Until round 4 it fell back to 127.0.0.1:8000 and measured
//! whatever answered there, exit 0.)

use std::net::TcpListener;
use std::time::Duration;
use testkit::{bash, wait_gone};

const NO_RECORD: &str = "loadgen: error: no server record on stdin: did the launch fail upstream? give --url to measure a server by address";

/// A listener on the old default address when it is free: any connection loadgen makes there
/// waits in its backlog, so "nothing connected" is checked, not assumed.
fn old_default_listener() -> Option<TcpListener> {
    let l = TcpListener::bind("127.0.0.1:8000").ok()?;
    l.set_nonblocking(true).unwrap();
    Some(l)
}

fn nothing_connected(l: &Option<TcpListener>) {
    match l {
        Some(l) => assert!(
            l.accept().is_err(),
            "loadgen connected to 127.0.0.1:8000, the old default target"
        ),
        // Taken by someone else's server: the records and the exit still show nothing ran.
        None => eprintln!("127.0.0.1:8000 is in use: its connections are not watched"),
    }
}

#[test]
fn a_launch_that_timed_out_upstream_is_not_measured_and_is_not_left_running() {
    let default = old_default_listener();
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("pid");
    let port = testkit::free_port();
    let out = bash(&format!(
        "srv-launch --cmd 'echo $$ > {}; exec sleep 30' --ready-url http://127.0.0.1:{{port}}/ \
         --port {port} --timeout 2s | loadgen -c 1 -n 4 --max-tokens 2 --input-len 8 \
         | srv-kill --grace 1s | summarize; echo \"status=${{PIPESTATUS[*]}}\"",
        pid_file.display()
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // srv-launch 1 (timed out, killed what it started); loadgen 1 (no record); srv-kill 1
    // (nothing it was handed); summarize 2 (no records).
    assert_eq!(stdout.trim(), "status=1 1 1 2", "{stderr}");
    assert!(
        stderr.contains("not ready after") && stderr.contains("killed it"),
        "{stderr}"
    );
    assert_eq!(
        stderr.lines().filter(|l| *l == NO_RECORD).count(),
        1,
        "{stderr}"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        wait_gone(&[pid], Duration::from_secs(2)),
        "the server that timed out was left running"
    );
    nothing_connected(&default);
}

#[test]
fn a_launch_refused_as_bad_usage_upstream_is_not_measured() {
    // The issue's line as typed: --cmd without --ready-url is a usage error in srv-launch.
    let default = old_default_listener();
    let port = testkit::free_port();
    let out = bash(&format!(
        "srv-launch --cmd 'sleep 30' --port {port} --timeout 2s | loadgen -c 1 -n 4; \
         echo \"status=${{PIPESTATUS[*]}}\""
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stdout.trim(), "status=2 1", "{stderr}");
    assert!(stderr.lines().any(|l| l == NO_RECORD), "{stderr}");
    nothing_connected(&default);
}

#[test]
fn records_on_stdin_without_a_server_record_pass_on_and_nothing_is_measured() {
    let (_sim, _url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "0"]);
    let note = r#"{"kind":"note","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{"x":"1"}}"#;
    let run = testkit::call("loadgen")
        .args([
            "-c",
            "1",
            "-n",
            "4",
            "--max-tokens",
            "2",
            "--input-len",
            "8",
        ])
        .stdin(format!("{note}\n"))
        .run();
    let (code, stdout, stderr) = run.texts();
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(testkit::the_error_line(&stderr), NO_RECORD);
    // What came from upstream goes on; loadgen adds nothing of its own.
    assert_eq!(stdout.trim_end(), note);
}

#[test]
fn at_a_terminal_without_url_the_error_names_the_flag() {
    // A terminal on stdin (the user typed loadgen alone): nothing is read from it, and no
    // default address stands in for --url.
    let tty = testkit::tty::Tty::start(&[]);
    tty.run_pipeline("loadgen -c 1 -n 1");
    assert_eq!(
        tty.exit_codes(Duration::from_secs(30)),
        [2],
        "{}",
        tty.screen()
    );
    assert!(
        tty.screen().contains(
            "loadgen: error: no target: give --url (e.g. --url http://127.0.0.1:8000), or pipe a server record in"
        ),
        "{}",
        tty.screen()
    );
}
