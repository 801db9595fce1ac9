//! `srv-sim --search`: the layouts of eight GPUs ranked by output tok/s per GPU at their best
//! load under the SLO, each with the srv-launch line that starts it, and the ones that do not
//! fit named with why. The two cases: llama-3.1-70b on 8 x h200 and the original
//! campaign's qwen3-32b on 8 x rtx-pro-6000 (how fast: scripts/bench-search.sh).

use testkit::run_ok;

/// One ranked row.
#[derive(Debug)]
struct Row {
    tp: u32,
    pp: u32,
    dp: u32,
    /// The P/D split, or "-" for a colocated layout.
    pd: String,
    gpus: u32,
    per_gpu: f64,
    ttft: f64,
    tpot: f64,
    launch: String,
}

/// The ranked rows: rank tp pp dp pd gpus C tok/s tok/s/GPU TTFT TPOT, then the launch line.
fn ranked(text: &str) -> Vec<Row> {
    text.lines()
        .filter(|l| l.contains("srv-launch "))
        .map(|l| {
            let (figures, launch) = l.split_once("  srv-launch").unwrap();
            let cols: Vec<&str> = figures.split_whitespace().collect();
            let f = |i: usize| cols[i].parse::<f64>().unwrap();
            Row {
                tp: f(1) as u32,
                pp: f(2) as u32,
                dp: f(3) as u32,
                pd: cols[4].to_string(),
                gpus: f(5) as u32,
                per_gpu: f(8),
                ttft: f(9),
                tpot: f(10),
                launch: format!("srv-launch{launch}"),
            }
        })
        .collect()
}

fn search(model: &str, hardware: &str) -> String {
    let out = run_ok(
        "srv-sim",
        &[
            "--search",
            "--model",
            model,
            "--hardware",
            hardware,
            "--gpus",
            "8",
        ],
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn eight_gpus_of_both_campaigns_give_ranked_layouts_with_launch_lines_and_name_misfits() {
    for (model, hardware) in [("llama-3.1-70b", "h200"), ("qwen3-32b", "rtx-pro-6000")] {
        let text = search(model, hardware);
        let rows = ranked(&text);
        assert!(rows.len() >= 5, "{text}");
        for r in &rows {
            assert!(
                r.per_gpu > 0.0 && r.ttft <= 2000.0 && r.tpot <= 50.0,
                "{text}"
            );
            assert!(
                r.launch.starts_with(&format!(
                    "srv-launch vllm --model {model} --tp {} --pp {}",
                    r.tp, r.pp
                )),
                "{}",
                r.launch
            );
            assert_eq!(
                r.launch.contains(&format!("--data-parallel-size {}", r.dp)),
                r.dp > 1
            );
            if r.pd == "-" {
                assert_eq!((r.tp * r.pp * r.dp, r.gpus), (8, 8), "{text}");
            } else {
                // A P/D group: its members' GPUs listed for srv-launch, prefill first.
                let pd: servbench::presets::PdLayout = r.pd.parse().unwrap();
                assert_eq!(r.dp, 1);
                assert_eq!(pd.servers() * r.tp * r.pp, r.gpus, "{text}");
                assert!(r.gpus <= 8, "{text}");
                let gpus: Vec<String> = (0..r.gpus).map(|g| g.to_string()).collect();
                assert!(
                    r.launch
                        .ends_with(&format!("--pd {} --gpus {}", r.pd, gpus.join(","))),
                    "{}",
                    r.launch
                );
            }
        }
        assert!(
            rows.windows(2).all(|w| w[0].per_gpu >= w[1].per_gpu),
            "not ranked by tok/s per GPU: {text}"
        );
        // The P/D splits are ranked beside the colocated layouts.
        assert!(rows.iter().any(|r| r.pd != "-"), "{text}");
        // One GPU per replica: 70B's weights, or 32B's longest request's KV, do not fit.
        assert!(
            text.lines()
                .any(|l| l.contains("tp1 pp1 dp8: does not fit")),
            "{text}"
        );
    }
}

#[test]
fn a_tighter_slo_lowers_every_layouts_load_and_says_so() {
    let args = |slo: &str| {
        let out = run_ok(
            "srv-sim",
            &[
                "--search",
                "--model",
                "llama-3.1-8b",
                "--hardware",
                "h100",
                "--gpus",
                "2",
                "--input-len",
                "512",
                "--max-tokens",
                "64",
                "--slo",
                slo,
            ],
        );
        String::from_utf8(out.stdout.clone()).unwrap()
    };
    let loose = args("ttft_ms=2000,tpot_ms=50");
    let tight = args("ttft_ms=200,tpot_ms=12");
    assert!(
        tight.starts_with("# llama-3.1-8b on 2 x h100, in=512 out=64, SLO ttft_ms=200,tpot_ms=12"),
        "{tight}"
    );
    let (loose, tight) = (ranked(&loose), ranked(&tight));
    assert!(!tight.is_empty());
    for t in &tight {
        let l = loose
            .iter()
            .find(|l| (l.tp, l.pp, l.dp, &l.pd) == (t.tp, t.pp, t.dp, &t.pd))
            .unwrap();
        assert!(
            t.per_gpu <= l.per_gpu && t.ttft <= 200.0 && t.tpot <= 12.0,
            "{t:?} vs {l:?}"
        );
    }
}

#[test]
fn a_load_flag_other_than_the_lengths_and_slo_is_refused_naming_it() {
    let out = testkit::run("srv-sim", &["--search", "--gpus", "2", "-c", "4"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("-c: --search finds each layout's load itself"),
        "{err}"
    );
}
