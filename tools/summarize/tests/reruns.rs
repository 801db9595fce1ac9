//! Reruns against one server, as the "kill that, but rerun C=1" moment has them: loadgen
//! draws a fresh seed per run (recorded in its summaries) so a rerun's unique prompts are not
//! served from the prefix cache the first run filled, and summarize says so when they were
//! (the same `--seed` given twice).

use servbench::record::SummaryRecord;
use testkit::{Run, loadgen_at};

/// Every run's load: eight short requests, two at a time.
const BASE: &[&str] = &[
    "-c",
    "2",
    "-n",
    "8",
    "--max-tokens",
    "4",
    "--input-len",
    "64",
];

/// The one point's summary.
fn summary(run: &Run) -> SummaryRecord {
    run.one::<SummaryRecord>()
}

/// Prefix-cache (queries, hits) in tokens, from srv-sim's /metrics.
fn prefix_counters(url: &str) -> (f64, f64) {
    let out = testkit::sh(&format!("curl -sf {url}/metrics"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let value = |name: &str| {
        text.lines()
            .find(|l| l.starts_with(&format!("{name}{{")))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics: {text}"))
    };
    (
        value("vllm:prefix_cache_queries_total"),
        value("vllm:prefix_cache_hits_total"),
    )
}

fn summarize(run: &Run) -> String {
    testkit::run::summarize_table(&run.out())
}

#[test]
fn a_default_rerun_draws_a_fresh_seed_and_finds_no_prefix_hits() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "2ms", "--itl", "1ms"]);
    let first = loadgen_at(&url, BASE, &[]).ok();
    let after_first = prefix_counters(&url);
    let second = loadgen_at(&url, BASE, &[]).ok();
    let after_second = prefix_counters(&url);
    let seed = |r: &Run| {
        summary(r)
            .workload
            .seed
            .expect("the summary records its seed")
    };
    let (s1, s2) = (seed(&first), seed(&second));
    assert_ne!(s1, s2, "each run without --seed draws its own");
    assert!(
        s1 < 1 << 53,
        "a seed any JSON reader gives back exactly: {s1}"
    );
    assert!(
        after_second.0 > after_first.0,
        "the second run's prompts were looked up"
    );
    assert_eq!(
        after_second.1, after_first.1,
        "the second default run's unique prompts found no prefix cached"
    );
    let summaries = second.values();
    assert_eq!(
        testkit::of_kind(&summaries, "summary")[0]["workload"]["prefix_hit_rate_expected"],
        0.0
    );
    assert!(
        !summarize(&second).contains("prefix cache held"),
        "a clean rerun gets no note"
    );

    // The same seed again sends the first run's prompts: the cache serves them, and
    // summarize says the rerun is flattered, naming the seed.
    let again = loadgen_at(&url, BASE, &["--seed", &s1.to_string()]).ok();
    assert_eq!(seed(&again), s1, "--seed is recorded as given");
    let after_again = prefix_counters(&url);
    assert!(after_again.1 > after_second.1, "the repeated prompts hit");
    let hit = summary(&again)
        .server
        .and_then(|s| s.prefix_hit_rate)
        .expect("loadgen records the server's prefix hit rate");
    assert!(hit > 0.5, "{hit}");
    let text = summarize(&again);
    assert!(
        text.contains("prefix cache held prompts loadgen did not expect")
            && text.contains(&format!("seed {s1}"))
            && text.contains("0.0% expected"),
        "{text}"
    );
}
