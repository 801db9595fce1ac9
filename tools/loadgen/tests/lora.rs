//! `--lora` mixes against the real srv-sim serving the adapters: round-robin names them in
//! turn exactly, zipf's shares follow the law on a fixed seed, a name the server does not
//! serve is its 404, and srv-sim's adapter slots make a mix of more adapters than slots cost
//! first-token time that one whose adapters all fit does not.

use servbench::record::{RequestRecord, SummaryRecord};
use testkit::run::{in_the_schema, summarize_table};
use testkit::{check, holds_in_one_of_three, loadgen, srv_sim};

/// `n` requests, 4 at a time, of 8 output tokens, seed 7, with `extra` flags: the summary, the
/// requests by id, every line.
fn run(url: &str, n: u32, extra: &[&str]) -> (SummaryRecord, Vec<RequestRecord>, String) {
    let n = n.to_string();
    let mut args = vec![
        "--url",
        url,
        "-c",
        "4",
        "-n",
        &n,
        "--input-len",
        "16",
        "--max-tokens",
        "8",
        "--seed",
        "7",
    ];
    args.extend_from_slice(extra);
    let out = loadgen(&args).ok();
    let mut reqs = out.of::<RequestRecord>();
    reqs.sort_by_key(|r| r.id);
    (out.one::<SummaryRecord>(), reqs, out.out())
}

fn adapters(reqs: &[RequestRecord]) -> Vec<&str> {
    reqs.iter()
        .map(|r| r.adapter.as_deref().unwrap_or("-"))
        .collect()
}

#[test]
fn round_robin_names_each_adapter_in_turn_and_the_summary_breaks_the_point_down_by_it() {
    let (_sim, url) = srv_sim(&["--ttft", "10ms", "--itl", "2ms", "--lora", "sql,chat,code"]);
    let (s, reqs, lines) = run(&url, 12, &["--lora", "sql,chat,code"]);
    for (i, line) in lines.lines().enumerate() {
        in_the_schema(line, &format!("loadgen stdout:{}", i + 1));
    }
    assert_eq!((s.requests, s.ok), (12, 12), "the server served every name");
    let want: Vec<&str> = (0..12).map(|i| ["sql", "chat", "code"][i % 3]).collect();
    assert_eq!(adapters(&reqs), want);
    assert_eq!(s.workload.lora, ["sql", "chat", "code"]);
    assert_eq!(s.workload.lora_assignment.as_deref(), Some("round-robin"));
    let by: Vec<(&str, u64, u64)> = s
        .by_adapter
        .iter()
        .map(|a| (a.adapter.as_str(), a.requests, a.output_tokens))
        .collect();
    assert_eq!(by, [("chat", 4, 32), ("code", 4, 32), ("sql", 4, 32)]);
    for a in &s.by_adapter {
        assert_eq!(a.ttft_ms.unwrap().n, 4, "{a:?}");
        assert!(a.tpot_ms.is_some() && a.output_tok_s > 0.0, "{a:?}");
    }
    let rates: f64 = s.by_adapter.iter().map(|a| a.output_tok_s).sum();
    assert!(
        (rates - s.output_tok_s).abs() < 1e-6 * s.output_tok_s,
        "{rates}"
    );
    // summarize recomputes the same breakdown from the request records.
    let table = summarize_table(&lines);
    for name in ["sql", "chat", "code"] {
        assert!(
            table
                .lines()
                .any(|l| l.contains(name) && l.contains("33.3")),
            "{name} with a third of the requests: {table}"
        );
    }
}

#[test]
fn zipf_shares_follow_the_law_on_a_fixed_seed_and_the_same_again() {
    let names = "a,b,c,d";
    let (_sim, url) = srv_sim(&["--ttft", "0ms", "--itl", "0", "--lora", names]);
    let mix = ["--lora", names, "--lora-assignment", "zipf"];
    let (s, reqs, _) = run(&url, 600, &mix);
    assert_eq!(s.ok, 600);
    assert_eq!(s.workload.lora_assignment.as_deref(), Some("zipf:1"));
    // Adapter k (from 1) with weight 1/k over H(4) = 25/12: 48%, 24%, 16%, 12%.
    let h: f64 = (1..=4).map(|k| 1.0 / f64::from(k)).sum();
    for (k, a) in s.by_adapter.iter().enumerate() {
        let share = a.requests as f64 / 600.0;
        let law = 1.0 / (k + 1) as f64 / h;
        assert!(
            (share - law).abs() < 0.05,
            "{}: {share} vs {law}",
            a.adapter
        );
    }
    let (_, again, _) = run(&url, 600, &mix);
    assert_eq!(
        adapters(&again),
        adapters(&reqs),
        "the same seed, the same mix"
    );
    let steeper = ["--lora", names, "--lora-assignment", "zipf"];
    let (s2, _, _) = run(
        &url,
        600,
        &[&steeper[..], &["--lora-zipf-exponent", "2"]].concat(),
    );
    assert!(
        s2.by_adapter[0].requests > s.by_adapter[0].requests + 60,
        "a steeper law gives the first adapter more: {} vs {}",
        s2.by_adapter[0].requests,
        s.by_adapter[0].requests
    );
}

#[test]
fn an_adapter_the_server_does_not_serve_is_its_404() {
    let (_sim, url) = srv_sim(&["--ttft", "5ms", "--itl", "1ms", "--lora", "sql"]);
    let (s, reqs, _) = run(&url, 8, &["--lora", "sql,nope"]);
    assert_eq!((s.ok, s.errors), (4, 4));
    for r in reqs.iter().filter(|r| r.adapter.as_deref() == Some("nope")) {
        let e = r.error.as_ref().expect("nope fails");
        assert_eq!(e.http_status, Some(404), "{e:?}");
        assert!(e.message.contains("`nope` does not exist"), "{e:?}");
    }
}

/// Mean TTFT of 24 requests, 4 at a time, round-robin over 4 adapters against srv-sim with
/// `slots` adapter slots, each swap 30 ms.
fn ttft_with_slots(slots: &str) -> f64 {
    let sim = [
        "--ttft",
        "20ms",
        "--itl",
        "5ms",
        "--lora",
        "a,b,c,d",
        "--max-loras",
        slots,
        "--lora-swap",
        "30ms",
    ];
    let (_sim, url) = srv_sim(&sim);
    let (s, _, _) = run(&url, 24, &["--lora", "a,b,c,d"]);
    assert_eq!(s.ok, 24);
    s.ttft_ms.unwrap().mean
}

#[test]
fn more_adapters_than_slots_cost_first_token_time_that_all_loaded_do_not() {
    holds_in_one_of_three("TTFT with 4 adapters in 4 slots, then in 2", || {
        let loaded = ttft_with_slots("4");
        let swapping = ttft_with_slots("2");
        // Four slots: only the first request of each adapter waits for its swap (4 x 30 ms
        // over 24 requests). Two: a batch holds two adapters, the others wait for its end
        // and for their swap in.
        check("TTFT, all adapters loaded (ms)", loaded, loaded < 60.0)?;
        check(
            "TTFT, 4 adapters in 2 slots (ms)",
            swapping,
            swapping > loaded + 25.0,
        )?;
        Ok(format!(
            "TTFT mean: {loaded:.1} ms in 4 slots, {swapping:.1} ms in 2"
        ))
    });
}

#[test]
fn lora_flags_are_checked_before_anything_is_sent() {
    for (args, says) in [
        (&["--lora", "a,a"][..], "named twice"),
        (&["--lora", "a,"][..], "--lora"),
        (&["--lora-assignment", "zipf"][..], "--lora"),
        (&["--lora", "a", "--lora-assignment", "lru"][..], "lru"),
        (
            &["--lora", "a", "--lora-zipf-exponent", "1.2"][..],
            "only with --lora-assignment zipf",
        ),
        (
            &[
                "--lora",
                "a",
                "--lora-assignment",
                "zipf",
                "--lora-zipf-exponent",
                "0",
            ][..],
            "--lora-zipf-exponent",
        ),
        (&["--lora", "a", "--turns", "3"][..], "--turns"),
    ] {
        let mut all = vec!["--url", "http://127.0.0.1:9", "-n", "1"];
        all.extend_from_slice(args);
        let (code, _, err) = loadgen(&all).parts();
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?} names {says}: {err}");
    }
}

/// TTFT p99 of 160 requests, 16 at a time, zipf over 4 adapters against the modelled srv-sim
/// (its roofline's steps, the default 4 ms swap) with `slots` adapter slots.
fn modelled_ttft_p99(slots: &str) -> f64 {
    let (_sim, url) = srv_sim(&["--lora", "a,b,c,d", "--max-loras", slots]);
    let mix = ["--lora", "a,b,c,d", "--lora-assignment", "zipf"];
    let n = 160.to_string();
    let mut args = vec![
        "--url",
        &url,
        "-c",
        "16",
        "-n",
        &n,
        "--input-len",
        "512",
        "--max-tokens",
        "64",
        "--seed",
        "1",
    ];
    args.extend_from_slice(&mix);
    let s = loadgen(&args).ok().one::<SummaryRecord>();
    assert_eq!(s.ok, 160);
    s.ttft_ms.unwrap().p99
}

#[test]
fn the_modelled_engine_holds_requests_of_adapters_its_batch_has_no_slot_for() {
    holds_in_one_of_three(
        "modelled TTFT p99, 4 adapters in 4 slots, then in 2",
        || {
            let loaded = modelled_ttft_p99("4");
            let swapping = modelled_ttft_p99("2");
            // With a slot each, an adapter costs one 4 ms swap per run; with two slots for four,
            // a request of an adapter the batch has no slot for waits for a batch that has.
            check(
                "TTFT p99, 4 adapters in 2 slots (ms)",
                swapping,
                swapping > 2.0 * loaded,
            )?;
            Ok(format!(
                "TTFT p99: {loaded:.1} ms in 4 slots, {swapping:.1} ms in 2"
            ))
        },
    );
}
