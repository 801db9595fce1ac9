//! `srv-sim --search`: the layouts of eight GPUs ranked by output tok/s per GPU at their best
//! load under the SLO, each with the srv-launch line that starts it, and the ones that do not
//! fit named with why. The two cases: llama-3.1-70b on 8 x h200 and the original
//! campaign's qwen3-32b on 8 x rtx-pro-6000 (how fast: scripts/bench-search.sh).

use testkit::run_ok;

/// The ranked rows: (tp, pp, dp, tok/s per GPU, TTFT p90, TPOT p90, launch line).
fn ranked(text: &str) -> Vec<(u32, u32, u32, f64, f64, f64, String)> {
    text.lines()
        .filter(|l| l.contains("srv-launch "))
        .map(|l| {
            let (figures, launch) = l.split_once("  srv-launch").unwrap();
            let f: Vec<f64> = figures
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            let n = |i: usize| f[i] as u32;
            (
                n(1),
                n(2),
                n(3),
                f[6],
                f[7],
                f[8],
                format!("srv-launch{launch}"),
            )
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
        for (tp, pp, dp, per_gpu, ttft, tpot, launch) in &rows {
            assert_eq!(tp * pp * dp, 8, "{text}");
            assert!(*per_gpu > 0.0 && *ttft <= 2000.0 && *tpot <= 50.0, "{text}");
            assert!(
                launch.starts_with(&format!(
                    "srv-launch vllm --model {model} --tp {tp} --pp {pp}"
                )),
                "{launch}"
            );
            assert_eq!(
                launch.contains(&format!("--data-parallel-size {dp}")),
                *dp > 1
            );
        }
        assert!(
            rows.windows(2).all(|w| w[0].3 >= w[1].3),
            "not ranked by tok/s per GPU: {text}"
        );
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
        let l = loose.iter().find(|l| (l.0, l.1) == (t.0, t.1)).unwrap();
        assert!(t.3 <= l.3 && t.4 <= 200.0 && t.5 <= 12.0, "{t:?} vs {l:?}");
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
