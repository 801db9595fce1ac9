//! When a cap bites (issue 22, item 5): the server's running and waiting gauges as columns, the
//! knee note naming a batch limit when the server ran fewer requests than the load while others
//! waited, and one knee rule: the knee note on a ramp's levels names the ramp's best C.

/// A closed-loop sweep against srv-sim (fixed latency: throughput scales with the requests it
/// runs) with `sim` flags; the records' file.
fn sweep(dir: &std::path::Path, sim: &str, load: &str) -> String {
    let path = dir.join("run.jsonl");
    testkit::sh_ok(&format!(
        "srv-launch sim -- --ttft 5ms --itl 2ms {sim} \
         | loadgen {load} --max-tokens 16 --input-len 32 --no-requests --scrape-interval 100ms | srv-kill > {}",
        path.display()
    ));
    path.to_string_lossy().into_owned()
}

/// srv-sim runs at most 8 requests: at C=16 eight wait (requests queued on the server still
/// gain a little: a slot never idles between requests), at C=32 throughput is flat, and the knee
/// note says the server's batch limit caps it, with the gauges as columns.
#[test]
fn the_knee_names_a_batch_limit_when_requests_waited_below_the_load() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep(
        dir.path(),
        "--max-running-requests 8",
        "-c 4,8,16,32 --duration 1500ms",
    );
    let text = testkit::run_ok("summarize", &[&run, "--cols", "conc,tok_s,running,waiting"]).out();
    assert!(
        text.contains("running max") && text.contains("waiting max"),
        "{text}"
    );
    let row16 = text
        .lines()
        .find(|l| l.trim_start().starts_with("16 "))
        .unwrap_or_else(|| panic!("no C=16 row: {text}"));
    let cells: Vec<&str> = row16.split_whitespace().collect();
    assert_eq!(cells[2], "8", "running max at C=16: {row16}");
    assert!(
        cells[3].parse::<f64>().unwrap() >= 1.0,
        "waiting at C=16: {row16}"
    );
    let knee = text
        .lines()
        .find(|l| l.contains("saturation knee"))
        .unwrap_or_else(|| panic!("no knee note: {text}"));
    assert!(
        knee.contains("the server ran at most 8 while")
            && knee
                .contains("a batch limit (max running requests, PP micro-batch), not the hardware"),
        "{knee}"
    );
}

/// No cap below the load: throughput scales, no knee, no batch-limit note.
#[test]
fn no_batch_limit_note_when_the_server_ran_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep(
        dir.path(),
        "--max-running-requests 64",
        "-c 4,8,16 --duration 1500ms",
    );
    let text = testkit::run_ok("summarize", &[&run]).out();
    assert!(!text.contains("batch limit"), "{text}");
    assert!(!text.contains("saturation knee"), "{text}");
}

/// The ramp's "best C" and the knee note on its levels came from two rules (`--min-gain` and
/// the note's 10%/25%): with `--min-gain 0.5` the ramp stops where the queued server still gains
/// 12%, which the note's own rule calls no knee at all. Now the note reads the ramp's min_gain
/// and names the same C.
#[test]
fn the_ramps_best_c_and_the_knee_note_are_the_same_knee() {
    let dir = tempfile::tempdir().unwrap();
    let run = sweep(
        dir.path(),
        "--max-running-requests 8",
        "--ramp -c 2 --ramp-max 64 --min-gain 0.5 --duration 1s",
    );
    let text = testkit::run_ok("summarize", &[&run]).out();
    let ramp_row = text
        .lines()
        .skip_while(|l| !l.starts_with("# ramps"))
        .nth(2)
        .unwrap_or_else(|| panic!("no ramp row: {text}"));
    // in, out, levels, last C, stopped by, best C, best tok/s
    let best: u32 = ramp_row.split_whitespace().nth(5).unwrap().parse().unwrap();
    assert!(
        text.contains(&format!("saturation knee at C={best}:")),
        "best C={best}: {text}"
    );
    assert_eq!(
        text.matches("saturation knee").count(),
        1,
        "one knee: {text}"
    );
}
