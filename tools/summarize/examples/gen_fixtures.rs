//! Writes summarize's test fixtures (`cargo run -p summarize --example gen_fixtures -- DIR`)
//! and the benchmark input (`... -- --bench N` writes N request records to stdout). The records
//! come from the shared record types and statistics via `tests/support/synth.rs`, as loadgen's
//! would for the simulated server; each fixture is built to make one note fire, or none.

#[path = "../tests/support/synth.rs"]
mod synth;

use servbench::record::Labels;
use std::io::Write;
use synth::{ServerModel, ServerView, Sweep, coll_lines, lifecycle_lines, sweep_lines};

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn write(dir: &str, name: &str, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(format!("{dir}/{name}"), text).expect("write fixture");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--bench") {
        let n: u64 = args
            .get(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1_000_000);
        let points = 8u64;
        let sweep = Sweep {
            concurrency: vec![1, 2, 4, 8, 16, 32, 64, 128],
            requests_per_point: n / points,
            summaries: false,
            ..Sweep::default()
        };
        let model = ServerModel {
            saturate_at: 32.0,
            ..ServerModel::default()
        };
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        for line in sweep_lines(&sweep, &model) {
            writeln!(out, "{line}").expect("write");
        }
        return;
    }
    let dir = args
        .first()
        .cloned()
        .unwrap_or_else(|| "tools/summarize/tests/fixtures".to_string());
    std::fs::create_dir_all(&dir).expect("fixture dir");
    let base = Sweep::default();
    let clean = ServerModel::default();

    // A healthy sweep: throughput scales, nothing to note.
    write(&dir, "clean.jsonl", &sweep_lines(&base, &clean));

    // Throughput peaks at C=8 then falls at C=16 and C=32.
    write(
        &dir,
        "throughput_falls.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![1, 2, 4, 8, 16, 32],
                ..base.clone()
            },
            &ServerModel {
                saturate_at: 6.0,
                collapse_at: Some(8.0),
                ..clean.clone()
            },
        ),
    );

    // Scales to C=8, then flat.
    write(
        &dir,
        "saturation_knee.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![1, 2, 4, 8, 16, 32],
                ..base.clone()
            },
            &ServerModel {
                saturate_at: 8.0,
                ttft_per_conc_ms: 2.0,
                ..clean.clone()
            },
        ),
    );

    // At C=32, 32-token outputs are slower than 64-token outputs (a per-request overhead).
    write(
        &dir,
        "shorter_output_slower.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![32],
                max_tokens: vec![32, 64],
                requests_per_point: 96,
                ..base.clone()
            },
            &ServerModel {
                short_output_penalty: Some((32, 400.0)),
                ..clean.clone()
            },
        ),
    );

    // The same anomaly across two runs labelled apart: round1 ran out=64, round2 out=32 with
    // per-request overhead on short outputs.
    let runs = |name: &str| labels(&[("engine", "sim"), ("model", "llama-3.1-8b"), ("run", name)]);
    let output_runs = |penalty| {
        let mut lines = sweep_lines(
            &Sweep {
                labels: runs("round1"),
                concurrency: vec![32],
                max_tokens: vec![64],
                requests_per_point: 96,
                ..base.clone()
            },
            &clean,
        );
        lines.extend(sweep_lines(
            &Sweep {
                labels: runs("round2"),
                concurrency: vec![32],
                max_tokens: vec![32],
                requests_per_point: 96,
                seed: 2,
                ..base.clone()
            },
            &ServerModel {
                short_output_penalty: penalty,
                ..clean.clone()
            },
        ));
        lines
    };
    write(
        &dir,
        "shorter_output_slower_runs.jsonl",
        &output_runs(Some((32, 400.0))),
    );
    write(&dir, "output_runs_clean.jsonl", &output_runs(None));

    // The anomaly at a point that ended early (its summary says partial).
    write(
        &dir,
        "shorter_output_slower_partial.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![32],
                max_tokens: vec![64, 32],
                requests_per_point: 96,
                partial_last: true,
                ..base.clone()
            },
            &ServerModel {
                short_output_penalty: Some((32, 400.0)),
                ..clean.clone()
            },
        ),
    );

    // -n 32 at C=64: the row says C=64, but never more than 32 were in flight.
    write(
        &dir,
        "too_few_requests.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![1, 16, 64],
                requests_per_point: 32,
                ..base.clone()
            },
            &clean,
        ),
    );

    // Speculative decoding: 3 tokens per chunk at C=1..4, 1 at C=16 and 32.
    let mut spec = sweep_lines(
        &Sweep {
            concurrency: vec![1, 2, 4],
            ..base.clone()
        },
        &ServerModel {
            tokens_per_chunk: 3,
            ..clean.clone()
        },
    );
    spec.extend(sweep_lines(
        &Sweep {
            concurrency: vec![16, 32],
            seed: 2,
            ..base.clone()
        },
        &clean,
    ));
    write(&dir, "spec_gain_collapses.jsonl", &spec);

    // The same sweep relaunched three times (scripts/relaunch-and-rerun.sh labels run=1..3).
    let mut reruns = Vec::new();
    for run in 1..=3u64 {
        reruns.extend(sweep_lines(
            &Sweep {
                labels: runs(&run.to_string()),
                concurrency: vec![1, 4],
                seed: run,
                ..base.clone()
            },
            &clean,
        ));
    }
    write(&dir, "across_runs.jsonl", &reruns);

    // One request in ten waits 20x for its first token.
    write(
        &dir,
        "ttft_tail.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                ttft_tail_every: Some(10),
                ..clean.clone()
            },
        ),
    );

    // Timeouts, and a last point cut short.
    write(
        &dir,
        "errors_or_partial.jsonl",
        &sweep_lines(
            &Sweep {
                partial_last: true,
                ..base.clone()
            },
            &ServerModel {
                error_every: Some(13),
                ..clean.clone()
            },
        ),
    );

    // One request in eight cancelled on purpose (--cancel-rate).
    write(
        &dir,
        "cancelled.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                cancel_every: Some(8),
                ..clean.clone()
            },
        ),
    );

    // Three tokens per SSE event (speculative decoding).
    write(
        &dir,
        "tokens_per_chunk.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                tokens_per_chunk: 3,
                ..clean.clone()
            },
        ),
    );

    // The client sends 40 ms late.
    write(
        &dir,
        "client_limited.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                send_lag_ms: 40.0,
                ..clean.clone()
            },
        ),
    );

    // Prompts off their target, outputs short of max_tokens.
    write(
        &dir,
        "lengths_missed.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                prompt_off_every: Some(4),
                short_output_every: Some(5),
                ..clean.clone()
            },
        ),
    );

    // The server's view (loadgen's `server` and `gpus`) of a healthy sweep: no note.
    let viewed = ServerModel {
        server: Some(ServerView::default()),
        ..clean.clone()
    };
    write(&dir, "clean_server.jsonl", &sweep_lines(&base, &viewed));
    let with_view = |view: ServerView| ServerModel {
        server: Some(view),
        ..clean.clone()
    };

    // Speculative acceptance 0.75 at C=1, 0.06 less per doubling: 0.57 at C=8.
    write(
        &dir,
        "spec_acceptance_falls.jsonl",
        &sweep_lines(
            &base,
            &ServerModel {
                saturate_at: 2.0,
                ..with_view(ServerView {
                    spec: (0.75, 0.06),
                    ..ServerView::default()
                })
            },
        ),
    );

    // Flat past C=8, and the KV cache full with preemptions from C=16.
    write(
        &dir,
        "kv_full_preempting.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![1, 2, 4, 8, 16, 32],
                ..base.clone()
            },
            &ServerModel {
                saturate_at: 8.0,
                ..with_view(ServerView {
                    kv_full_from: Some(16),
                    ..ServerView::default()
                })
            },
        ),
    );

    // The GPUs 20% busy at C=1.
    write(
        &dir,
        "gpu_idle_single_stream.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                gpu_util_c1: 20.0,
                ..ServerView::default()
            }),
        ),
    );

    // The engine sees a fifth of the client's TTFT: the rest is spent before it.
    write(
        &dir,
        "server_ttft_below_client.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                ttft_share: 0.2,
                ..ServerView::default()
            }),
        ),
    );

    // The server counts 5% more output tokens than the client received.
    write(
        &dir,
        "token_counts_disagree.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                token_excess: 0.05,
                ..ServerView::default()
            }),
        ),
    );

    // /metrics stops answering from C=4 on: the server figures there end early.
    write(
        &dir,
        "metrics_went_silent.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                metrics_silent_from: Some(4),
                ..ServerView::default()
            }),
        ),
    );

    // From C=2 on, loadgen dropped NaN gauges and GPU 1's negative power readings.
    write(
        &dir,
        "samples_not_believed.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                samples_dropped_from: Some(2),
                ..ServerView::default()
            }),
        ),
    );

    // A rerun of the same seed against a warm server: 94% of its unique prompts cached.
    write(
        &dir,
        "prefix_hits_unexpected.jsonl",
        &sweep_lines(
            &base,
            &with_view(ServerView {
                prefix_hits_unexpected: Some(0.938),
                ..ServerView::default()
            }),
        ),
    );

    // Single stream on an 8B model at ~30 ms/token: far below an H200's limit.
    write(
        &dir,
        "single_stream_slow.jsonl",
        &sweep_lines(
            &Sweep {
                concurrency: vec![1],
                ..base.clone()
            },
            &ServerModel {
                itl_ms: 30.0,
                ..clean.clone()
            },
        ),
    );

    // The notes' headline: one stream of the Kimi-K2-class model at 36 tok/s, labelled tp=8 as
    // srv-launch labels it, on 8 RTX PRO 6000: NVFP4 experts, the format that fits 8 x 96 GB
    // (FP8 Kimi does not: srv-sim refuses that layout).
    write(
        &dir,
        "kimi_tp8_single_stream.jsonl",
        &sweep_lines(
            &Sweep {
                labels: labels(&[
                    ("engine", "sglang"),
                    ("model", "kimi-k2-nvfp4"),
                    ("tp", "8"),
                ]),
                concurrency: vec![1],
                input_len: 1000,
                max_tokens: vec![256],
                requests_per_point: 8,
                ..base.clone()
            },
            &ServerModel {
                itl_ms: 1000.0 / 36.0,
                jitter: 0.02,
                ..clean.clone()
            },
        ),
    );

    // Three repeats per point, summaries only (loadgen --repeat 3).
    write(
        &dir,
        "repeats.jsonl",
        &sweep_lines(
            &Sweep {
                repeats: 3,
                requests: false,
                ..base.clone()
            },
            &clean,
        ),
    );

    // One point measured on two hosts: requests and summaries from each.
    for (host, seed) in [("a", 11), ("b", 12)] {
        let mut l = base.labels.clone();
        l.insert("host".into(), format!("host-{host}"));
        write(
            &dir,
            &format!("host_{host}.jsonl"),
            &sweep_lines(
                &Sweep {
                    labels: l,
                    seed,
                    ..base.clone()
                },
                &clean,
            ),
        );
    }

    // Comparisons: a base, a new run 20% faster, and a rerun of the base (noise only).
    let cmp = Sweep {
        requests_per_point: 600,
        summaries: true,
        requests: false,
        ..base.clone()
    };
    let mut base_labels = cmp.labels.clone();
    base_labels.insert("run".into(), "base".into());
    write(
        &dir,
        "compare_base.jsonl",
        &sweep_lines(
            &Sweep {
                labels: base_labels,
                seed: 21,
                ..cmp.clone()
            },
            &clean,
        ),
    );
    let mut new_labels = cmp.labels.clone();
    new_labels.insert("run".into(), "new".into());
    write(
        &dir,
        "compare_faster.jsonl",
        &sweep_lines(
            &Sweep {
                labels: new_labels.clone(),
                seed: 22,
                ..cmp.clone()
            },
            &ServerModel {
                ttft_ms: clean.ttft_ms / 1.2,
                itl_ms: clean.itl_ms / 1.2,
                ..clean.clone()
            },
        ),
    );
    write(
        &dir,
        "compare_rerun.jsonl",
        &sweep_lines(
            &Sweep {
                labels: new_labels,
                seed: 23,
                ..cmp.clone()
            },
            &clean,
        ),
    );

    // Two engines in one file, for --compare-by engine.
    let mut engines = Vec::new();
    for (engine, itl, seed) in [("sglang", 3.2, 31), ("vllm", 4.0, 32)] {
        let mut l = base.labels.clone();
        l.insert("engine".into(), engine.into());
        engines.extend(sweep_lines(
            &Sweep {
                labels: l,
                seed,
                requests_per_point: 100,
                requests: false,
                ..base.clone()
            },
            &ServerModel {
                itl_ms: itl,
                ..clean.clone()
            },
        ));
    }
    write(&dir, "engines.jsonl", &engines);

    // An open-loop rate sweep: step time grows past 4 requests in flight (~30 req/s).
    write(
        &dir,
        "rate_sweep.jsonl",
        &sweep_lines(
            &Sweep {
                rates: vec![5.0, 10.0, 20.0, 40.0],
                requests_per_point: 60,
                ..base.clone()
            },
            &ServerModel {
                saturate_at: 4.0,
                ..clean.clone()
            },
        ),
    );

    // Collectives and a whole pipeline's other records, plus a kind summarize ignores.
    let tp = labels(&[("cluster", "local")]);
    write(
        &dir,
        "coll.jsonl",
        &coll_lines(&tp, 2, 64 << 20, 25.0, 12.0),
    );
    let mut pipeline = lifecycle_lines(&base.labels);
    pipeline.extend(sweep_lines(
        &Sweep {
            concurrency: vec![1, 4],
            requests_per_point: 20,
            ..base.clone()
        },
        &clean,
    ));
    pipeline.push(r#"{"kind":"mystery","v":1,"ts":"2026-11-30T17:00:00.000Z","labels":{}}"#.into());
    write(&dir, "pipeline.jsonl", &pipeline);
}
