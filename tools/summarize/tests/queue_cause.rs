//! The engine-queue note reads its cause from the server's running and waiting gauges (issue
//! 39, item 3): "the batch was full" only where requests were seen waiting behind a full batch,
//! and nothing where the engine took every request as it came (requests that arrive while a
//! step runs wait for its end in any engine: a step in flight, not a full batch).

use serde_json::Value;

/// srv-launch (with the engine's self-report) | `load` | srv-kill; the summary records and
/// summarize's text.
fn run(sim: &str, load: &str) -> (Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("run.jsonl");
    testkit::sh_ok(&format!(
        "srv-launch sim --self-report {sim} | loadgen {load} | srv-kill > {}",
        file.display()
    ));
    let records = testkit::json_lines(&std::fs::read(&file).unwrap());
    let summaries = testkit::of_kind(&records, "summary")
        .into_iter()
        .cloned()
        .collect();
    let text = testkit::call("summarize").arg(&file).run_ok().out();
    (summaries, text)
}

/// Two running slots for eight closed-loop streams: six wait behind the full batch, and the
/// gauges saw them; the note says so with the figures.
#[test]
fn a_queue_behind_a_full_batch_is_named_with_what_ran_and_what_waited() {
    let (summaries, text) = run("-- --max-running-requests 2", "-c 8 -n 24 --max-tokens 32");
    let waited = testkit::num(&summaries[0], "/server/waiting/max");
    assert!(waited > 0.0, "the gauges saw the queue: {}", summaries[0]);
    let note = text
        .lines()
        .find(|l| l.contains("in the engine's queue"))
        .unwrap_or_else(|| panic!("no queue note: {text}"));
    assert!(
        note.contains("the batch was full: the server ran at most 2 while up to"),
        "{note}"
    );
}

/// Every step of a 200 ms step overhead: requests sent every 125 ms arrive while a step runs
/// and wait for its end (~35% of their TTFT), with the engine far from its running limit and
/// nothing in its waiting queue: no "batch was full". (Not a PP model: a pipelined engine
/// takes an arrival when its first stage frees, so there the wait all but vanishes.)
#[test]
fn requests_that_arrived_while_a_prefill_step_ran_get_no_full_batch_note() {
    let (summaries, text) = run(
        "--model llama-3.1-8b -- --hardware rtx-pro-6000 --step-overhead 200ms",
        "-r 8 --arrival constant -n 8 --max-tokens 2 --input-len 1024",
    );
    let s = &summaries[0];
    let queue = testkit::num(s, "/ttft_split/engine_queue_ms");
    let ttft = testkit::num(s, "/ttft_split/client_ttft_ms");
    assert!(
        queue > 0.25 * ttft,
        "the requests did wait in the engine's queue ({queue} of {ttft} ms): {s}"
    );
    assert_eq!(testkit::num(s, "/server/waiting/max"), 0.0, "{s}");
    assert!(
        !text.contains("in the engine's queue"),
        "nothing waited: {text}"
    );
}
