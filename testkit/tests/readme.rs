//! The top README's main job as a user runs it: the README's first command (its build and PATH
//! left to the test, which puts the workspace's binaries first on PATH) against srv-sim, and
//! what the terminal shows compared with the README's "What the main job prints" block. Every
//! word, column and table title is compared as printed; the figures that differ from run to run
//! (ports, pids, times, rates and latencies) are masked, and the ones that do not (the loads
//! swept, the errors, the kill's match and survivors) are compared as the README prints them.
//! summarize's notes are left out: they are findings about this run's figures, which a busy
//! machine moves (srv-sim sends the tokens that piled up while the client was slow as one
//! chunk, as the engines it models do, and the tokens-per-chunk notes then speak).

use std::path::Path;
use std::time::Duration;

fn readme() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join("README.md")).unwrap()
}

/// The first fenced `sh` block's command, without the build and the PATH it starts with.
fn main_job(readme: &str) -> String {
    let block = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a ```sh block in README.md");
    let line = block.trim();
    let (setup, job) = line
        .rsplit_once(" && ")
        .unwrap_or_else(|| panic!("the first command builds, sets PATH, then runs: {line}"));
    assert_eq!(
        setup, r#"cargo build --release && export PATH="$PWD/target/release:$PATH""#,
        "the first command's build and PATH"
    );
    job.to_string()
}

/// The lines of the fenced block after "What the main job prints".
fn shown(readme: &str) -> Vec<String> {
    let after = readme
        .split_once("What the main job prints")
        .expect("README says what the main job prints")
        .1;
    let block = after
        .split_once("```\n")
        .and_then(|(_, b)| b.split_once("```"))
        .expect("a fenced block of what it prints")
        .0;
    block.lines().map(str::to_string).collect()
}

/// `line` with every number that varies between runs replaced by `#` and the spaces between
/// words made one: words, columns and the order of everything are kept.
fn masked(line: &str) -> String {
    let mut out = String::new();
    let mut number = false;
    for c in line.chars() {
        if c.is_ascii_digit() || (number && c == '.') {
            if !number {
                out.push('#');
            }
            number = true;
        } else {
            number = false;
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The cells of a table's right-aligned column `name` (the values end where the header's name
/// ends), in the table whose header holds `header_word`.
fn column(lines: &[String], header_word: &str, name: &str) -> Vec<String> {
    let head = lines
        .iter()
        .position(|l| l.split_whitespace().any(|w| w == header_word))
        .unwrap_or_else(|| panic!("a header with {header_word}: {lines:#?}"));
    let end = lines[head]
        .find(name)
        .unwrap_or_else(|| panic!("{name} in {}", lines[head]))
        + name.len();
    lines[head + 1..]
        .iter()
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("note:"))
        .map(|l| {
            let upto = l
                .get(..end)
                .unwrap_or_else(|| panic!("a row ending before column {name}: {l}"));
            upto[upto.rfind(' ').map_or(0, |i| i + 1)..].to_string()
        })
        .collect()
}

/// The pid of the server srv-launch announced, to end it by pid should the run leave it.
fn announced_pid(lines: &[String]) -> Option<u32> {
    lines
        .iter()
        .find(|l| l.starts_with("srv-launch: ") && l.contains(" ready at "))
        .and_then(|l| l.split("(pid ").nth(1))
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
}

#[test]
fn the_readme_main_job_prints_what_the_readme_shows() {
    let readme = readme();
    let job = main_job(&readme);
    assert!(job.starts_with("srv-launch sim | "), "{job}");
    let want = shown(&readme);

    // As a terminal shows it: stderr and stdout in one stream, in the order they came.
    let run = testkit::run_cmd_within(
        testkit::sh_cmd(&format!("({job}) 2>&1")),
        Duration::from_secs(120),
    );
    let text = run.out();
    let got: Vec<String> = text.lines().map(str::to_string).collect();
    if let Some(pid) = announced_pid(&got).filter(|p| testkit::alive(*p)) {
        // SAFETY: the server this test's pipeline launched, by the pid it announced.
        unsafe {
            libc::kill(pid as i32, libc::SIGKILL);
        }
        panic!("the server (pid {pid}) outlived the pipeline:\n{text}");
    }
    assert_eq!(run.code(), Some(0), "{text}");

    let mask = |ls: &[String]| -> Vec<String> {
        ls.iter()
            .filter(|l| !l.starts_with("note: "))
            .map(|l| masked(l))
            .collect()
    };
    assert_eq!(
        mask(&got),
        mask(&want),
        "the main job's output, masked, against the README's:\n{text}"
    );
    // What the mask hides but does not vary: the titles, the loads swept, the errors, the
    // kill's match and survivors.
    let titles = |ls: &[String]| -> Vec<String> {
        ls.iter().filter(|l| l.starts_with("# ")).cloned().collect()
    };
    assert_eq!(titles(&got), titles(&want));
    for (header_word, name, cells) in [
        ("req/s", "errors", ["0", "0", "0"].as_slice()),
        ("survivors", "survivors", &["0"]),
        ("survivors", "matched", &["1"]),
    ] {
        assert_eq!(column(&want, header_word, name), cells, "README: {name}");
        assert_eq!(column(&got, header_word, name), cells, "{name}:\n{text}");
    }
    let concurrency = |ls: &[String]| -> Vec<String> {
        let head = ls.iter().position(|l| l.contains("req/s")).unwrap();
        ls[head + 1..]
            .iter()
            .take_while(|l| !l.trim().is_empty() && !l.starts_with("note:"))
            .map(|l| l.split_whitespace().next().unwrap().to_string())
            .collect()
    };
    assert_eq!(concurrency(&got), ["1", "8", "32"], "{text}");
    assert_eq!(concurrency(&got), concurrency(&want));
}

#[test]
fn masking_hides_the_figures_and_keeps_the_words() {
    assert_eq!(
        masked("server sim pid 23565 port 36491  localhost        1  TERM   0.115  ok"),
        "server sim pid # port # localhost # TERM # ok"
    );
    assert_eq!(
        masked("srv-launch: sim ready at http://127.0.0.1:36491 after 0.1s"),
        "srv-launch: sim ready at http://#:# after #s"
    );
}
