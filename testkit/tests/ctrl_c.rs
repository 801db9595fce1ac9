//! Ctrl-C as a user meets it: the README's first pipeline and the recipes in scripts/ that
//! launch and kill a server, typed into a terminal of their own (testkit::tty), and Ctrl-C
//! pressed during the C=8 point. The terminal sends SIGINT to the whole pipeline at once; what
//! must come out: no server left running (checked by the pid srv-launch announced), the table
//! printed with every point that finished and the cut one marked partial, and exit codes that
//! say what happened (srv-launch 0: it had done its job; the others 130).

use std::time::Duration;
use testkit::tty::Tty;

/// What the terminal showed after the pipeline ended.
struct Screen {
    text: String,
}

impl Screen {
    /// (pid, port) of every server srv-launch announced ("ready at http://127.0.0.1:P ... (pid N").
    fn servers(&self) -> Vec<(u32, u16)> {
        self.text
            .lines()
            .filter(|l| l.starts_with("srv-launch: ") && l.contains(" ready at http://"))
            .map(|l| {
                let port = l.split("127.0.0.1:").nth(1).and_then(|r| {
                    r.split(|c: char| !c.is_ascii_digit())
                        .next()
                        .and_then(|p| p.parse().ok())
                });
                let pid = l
                    .split("(pid ")
                    .nth(1)
                    .and_then(|r| r.split(' ').next().and_then(|p| p.parse().ok()));
                (
                    pid.unwrap_or_else(|| panic!("no pid in {l:?}")),
                    port.unwrap_or_else(|| panic!("no port in {l:?}")),
                )
            })
            .collect()
    }

    /// The `C` column of the load-points table.
    fn concurrencies(&self) -> Vec<String> {
        let lines: Vec<&str> = self.text.lines().collect();
        let Some(head) = lines
            .iter()
            .position(|l| l.split_whitespace().any(|w| w == "req/s"))
        else {
            return Vec::new();
        };
        let col = lines[head]
            .split_whitespace()
            .position(|w| w == "C")
            .expect("a C column");
        lines[head + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty() && !l.starts_with("note:"))
            .filter_map(|l| l.split_whitespace().nth(col).map(str::to_string))
            .collect()
    }

    fn note_cut_short(&self) -> Option<&str> {
        self.text
            .lines()
            .find(|l| l.starts_with("note: cut short (partial)"))
    }
}

/// Types `pipeline`, presses Ctrl-C once loadgen shows the C=8 point, and returns the exit
/// codes and the screen once the pipeline ended; kills (by pid) any server left, after looking.
fn ctrl_c_at_c8(pipeline: &str) -> (Vec<i32>, Screen) {
    let tty = Tty::start(&[]);
    tty.run_pipeline(pipeline);
    tty.wait_for("c=8", Duration::from_secs(60));
    tty.ctrl_c();
    let codes = tty.exit_codes(Duration::from_secs(60));
    let screen = Screen { text: tty.screen() };
    (codes, screen)
}

/// The checks every case shares: one server launched, none left; C=1 finished and C=8 cut.
fn assert_nothing_left_and_all_measured(codes: &[i32], screen: &Screen, expect: &[i32]) {
    let servers = screen.servers();
    let left: Vec<u32> = servers
        .iter()
        .map(|(pid, _)| *pid)
        .filter(|pid| testkit::alive(*pid))
        .collect();
    for pid in &left {
        // SAFETY: a server this test's pipeline launched, by its announced pid.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    assert_eq!(codes, expect, "exit codes; the terminal:\n{}", screen.text);
    assert_eq!(servers.len(), 1, "one launch only:\n{}", screen.text);
    assert!(
        left.is_empty(),
        "servers left running: {left:?}\n{}",
        screen.text
    );
    let (pid, port) = servers[0];
    assert!(
        screen
            .text
            .lines()
            .any(|l| l.contains(&format!("pid {pid} port {port}")) && l.trim_end().ends_with("ok")),
        "a kill row for pid {pid} saying ok:\n{}",
        screen.text
    );
    let conc = screen.concurrencies();
    assert!(
        conc.iter().any(|c| c == "1") && conc.iter().any(|c| c == "8"),
        "rows for C=1 (finished) and C=8 (cut): {conc:?}\n{}",
        screen.text
    );
    assert!(
        !conc.iter().any(|c| c == "32"),
        "no point after the Ctrl-C: {conc:?}"
    );
    let note = screen
        .note_cut_short()
        .unwrap_or_else(|| panic!("no partial note:\n{}", screen.text));
    assert!(note.contains("C=8"), "{note}");
}

#[test]
fn ctrl_c_during_c8_of_the_readme_pipeline_kills_the_server_and_prints_every_finished_point() {
    let (codes, screen) = ctrl_c_at_c8(
        "srv-launch sim | loadgen -c 1,8,32 --duration 2s --max-tokens 32 | srv-kill | summarize",
    );
    assert_nothing_left_and_all_measured(&codes, &screen, &[0, 130, 130, 130]);
}

/// A P/D group (issue 36): the same Ctrl-C during C=8 leaves none of its three members
/// running (each announced by srv-launch), each with a kill row saying ok.
#[test]
fn ctrl_c_during_c8_of_a_pd_group_pipeline_kills_every_member() {
    let (codes, screen) = ctrl_c_at_c8(
        "srv-launch sim --pd 1p1d | loadgen -c 1,8,32 --duration 2s --max-tokens 32 | srv-kill | summarize",
    );
    let servers = screen.servers();
    let left: Vec<u32> = servers
        .iter()
        .map(|(pid, _)| *pid)
        .filter(|pid| testkit::alive(*pid))
        .collect();
    for pid in &left {
        // SAFETY: a member this test's pipeline launched, by its announced pid.
        unsafe {
            libc::kill(*pid as i32, libc::SIGKILL);
        }
    }
    assert_eq!(codes, [0, 130, 130, 130], "exit codes:\n{}", screen.text);
    assert_eq!(servers.len(), 3, "prefill, decode, proxy:\n{}", screen.text);
    assert!(
        left.is_empty(),
        "members left running: {left:?}\n{}",
        screen.text
    );
    for (pid, port) in servers {
        assert!(
            screen
                .text
                .lines()
                .any(|l| l.contains(&format!("pid {pid} port {port}"))
                    && l.trim_end().ends_with("ok")),
            "a kill row for pid {pid} saying ok:\n{}",
            screen.text
        );
    }
    let conc = screen.concurrencies();
    assert!(
        conc.iter().any(|c| c == "1") && !conc.iter().any(|c| c == "32"),
        "C=1 measured, nothing after the Ctrl-C: {conc:?}\n{}",
        screen.text
    );
}

fn script(name: &str) -> String {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn ctrl_c_during_tp_sweep_kills_the_server_and_prints_what_was_measured() {
    let (codes, screen) = ctrl_c_at_c8(&format!(
        "TPS='1 2' LOADGEN_ARGS='-c 1,8,32 --duration 2s --max-tokens 32' bash {} sim | summarize",
        script("tp-sweep.sh")
    ));
    assert_nothing_left_and_all_measured(&codes, &screen, &[130, 130]);
}

#[test]
fn ctrl_c_during_context_sweep_kills_the_server_and_prints_what_was_measured() {
    let (codes, screen) = ctrl_c_at_c8(&format!(
        "LENS=64,128 CONC=1,8 MAX_TOKENS=32 LOADGEN_ARGS='--duration 2s' bash {} sim | summarize",
        script("context-sweep.sh")
    ));
    assert_nothing_left_and_all_measured(&codes, &screen, &[130, 130]);
}

#[test]
fn ctrl_c_during_relaunch_and_rerun_kills_the_server_and_prints_what_was_measured() {
    let (codes, screen) = ctrl_c_at_c8(&format!(
        "RUNS=2 LOADGEN_ARGS='-c 1,8,32 --duration 2s --max-tokens 32' bash {} sim | summarize",
        script("relaunch-and-rerun.sh")
    ));
    assert_nothing_left_and_all_measured(&codes, &screen, &[130, 130]);
}

/// The README cookbook's "kill that, but rerun C=1" lines, as written, with the engine and the
/// load made small for `sim`: the launch to a file, the sweep from it, the C=1 rerun, the kill.
fn rerun_c1_lines() -> Vec<String> {
    let readme = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md"),
    )
    .unwrap();
    let lines: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("# \"Kill that, but rerun C=1\""))
        .skip_while(|l| l.starts_with('#'))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 4, "the README's four lines: {lines:?}");
    lines
        .iter()
        .map(|l| {
            l.replace(
                "srv-launch vllm --model meta-llama/Llama-3.1-8B-Instruct",
                "srv-launch sim",
            )
            .replace("--duration 60s", "--duration 2s")
            .replace("--max-tokens 256", "--max-tokens 32")
            .replace("-n 20", "-n 4")
        })
        .collect()
}

/// Types `line` into `tty` and returns its exit codes once it ended.
fn step(tty: &Tty, line: &str) -> Vec<i32> {
    let _ = std::fs::remove_file(tty.dir().join("exit-codes"));
    tty.run_pipeline(line);
    tty.exit_codes(Duration::from_secs(90))
}

/// Kills (by pid) a server the test launched, if a failed assertion left it running.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if testkit::alive(self.0) {
            // SAFETY: the server this test launched, by the pid its record names.
            unsafe {
                libc::kill(self.0 as i32, libc::SIGKILL);
            }
        }
    }
}

#[test]
fn kill_that_but_rerun_c1_keeps_the_server_through_ctrl_c_until_srv_kill() {
    let lines = rerun_c1_lines();
    let tty = Tty::start(&[]);
    assert_eq!(step(&tty, &lines[0]), [0], "{}", tty.screen());
    let server: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tty.dir().join("server.jsonl")).unwrap())
            .unwrap();
    let pid = server["pid"].as_u64().unwrap() as u32;
    let _left = KillOnDrop(pid);

    // The sweep, Ctrl-C during C=8: loadgen and summarize stop (130), tee -i keeps what came,
    // and the server is still there.
    let _ = std::fs::remove_file(tty.dir().join("exit-codes"));
    tty.run_pipeline(&lines[1]);
    tty.wait_for("c=8", Duration::from_secs(60));
    tty.ctrl_c();
    let codes = tty.exit_codes(Duration::from_secs(60));
    assert_eq!(codes, [130, 0, 130], "{}", tty.screen());
    assert!(testkit::alive(pid), "the server outlived the Ctrl-C");
    let sweep = testkit::json_lines(&std::fs::read(tty.dir().join("sweep.jsonl")).unwrap());
    let cut = testkit::of_kind(&sweep, "summary");
    assert!(
        cut.iter()
            .any(|s| s["point"]["concurrency"] == 8 && s["partial"] == true),
        "the cut C=8 point kept: {cut:?}"
    );

    // C=1 again against the same record: the same server answers.
    assert_eq!(step(&tty, &lines[2]), [0, 0, 0], "{}", tty.screen());
    let c1 = testkit::json_lines(&std::fs::read(tty.dir().join("c1.jsonl")).unwrap());
    let s = testkit::of_kind(&c1, "summary");
    assert_eq!(s.len(), 1, "{c1:?}");
    assert_eq!(s[0]["point"]["concurrency"], 1, "{}", s[0]);
    assert_eq!(s[0]["ok"], 4, "{}", s[0]);
    assert_eq!(testkit::of_kind(&c1, "server")[0]["pid"], pid, "{c1:?}");
    assert!(testkit::alive(pid));

    // Then the kill, by the record.
    assert_eq!(step(&tty, &lines[3]), [0], "{}", tty.screen());
    assert!(!testkit::alive(pid), "srv-kill left the server");
}
