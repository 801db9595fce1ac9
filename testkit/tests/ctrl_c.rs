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
