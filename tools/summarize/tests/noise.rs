//! The noise model on real closed-loop data: srv-sim launched by srv-launch, loaded by
//! loadgen, killed by srv-kill, as `scripts/relaunch-and-rerun.sh` does. Requests of one point
//! move in waves, so a comparison rests on time blocks within each point (batch means):
//! identical launches, and a PP micro-batch cap that does not bite, are within noise on every
//! figure; a slower engine step is still called worse.

/// The load of every launch: 40 waves of 8 equal requests, about two seconds.
const LOAD: &str = "-c 8 -n 320 --max-tokens 8 --input-len 32";

/// One launch, load and kill; its records, labelled `label`.
fn launch(label: &str, sim_flags: &str) -> String {
    let out = testkit::sh_ok(&format!(
        "srv-launch sim --label {label} -- {sim_flags} | loadgen {LOAD} | srv-kill"
    ));
    String::from_utf8(out.stdout).unwrap()
}

fn compare_by(records: &str, by: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("runs.jsonl");
    std::fs::write(&path, records).unwrap();
    testkit::call("summarize")
        .arg(&path)
        .args(["--compare-by", by])
        .run_ok()
        .out()
}

/// The comparison's rows that call a change real.
fn verdicts(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains(" better") || l.contains(" worse"))
        .filter(|l| !l.starts_with("note:"))
        .collect()
}

#[test]
fn three_identical_relaunches_are_within_noise_on_every_figure() {
    testkit::holds_in_one_of_three("three identical relaunches", || {
        let records: String = (1..=3)
            .map(|run| launch(&format!("run={run}"), ""))
            .collect();
        let text = compare_by(&records, "run=1");
        assert!(
            text.contains("verdicts rest on") && text.contains("time blocks per run"),
            "the comparison says what its verdicts rest on: {text}"
        );
        if let called @ [_, ..] = verdicts(&text).as_slice() {
            return Err(format!("identical launches called different: {called:?}"));
        }
        // Every figure, the p99 of 320 requests too: within noise, not unknown.
        for m in ["out tok/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms"] {
            let tally = format!("note: {m}: 0 point(s) better, 0 worse, 2 within noise;");
            assert!(text.contains(&tally), "{tally}\n{text}");
        }
        Ok("every figure within noise".into())
    });
}

#[test]
fn a_pp_micro_batch_cap_that_does_not_bite_is_within_noise() {
    // PP2 with a micro-batch of 8 caps 16 running requests; C=8 is below it: the two
    // configurations run the same batches.
    testkit::holds_in_one_of_three("PP micro-batch cap above C", || {
        let records =
            launch("mb=none", "--pp 2") + &launch("mb=8", "--pp 2 --pp-max-micro-batch 8");
        let text = compare_by(&records, "mb=none");
        match verdicts(&text).as_slice() {
            [] => Ok("within noise".into()),
            called => Err(format!(
                "an identical configuration called different: {called:?}"
            )),
        }
    });
}

#[test]
fn a_slower_engine_step_is_still_called_worse() {
    // 5 ms more per step: TPOT about doubles.
    let records = launch("step=fast", "") + &launch("step=slow", "--step-overhead 5ms");
    let text = compare_by(&records, "step=fast");
    let row = text
        .lines()
        .find(|l| l.starts_with("step=slow"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        row.matches(" worse").count() >= 2,
        "throughput and TPOT are worse: {text}"
    );
    assert!(
        text.contains("note: out tok/s: 0 point(s) better, 1 worse")
            && text.contains("note: TPOT p50 ms: 0 point(s) better, 1 worse"),
        "{text}"
    );
}
