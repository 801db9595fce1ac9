//! Advice that knows what fits (issue 22, item 7): the single-stream note names fewer TP ranks
//! only when a layout with fewer ranks holds the weights (the shared fit logic srv-sim's dry run
//! uses); `--roofline` warns for a layout srv-sim refuses and for a model other than the
//! records' `model` label.

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::summarize;
use std::process::Output;

fn text(out: &Output) -> (String, String) {
    assert!(
        out.status.success(),
        "summarize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Kimi-K2 NVFP4 at TP8 on 8 RTX PRO 6000, as srv-sim runs it: the modelled step explains the
/// single stream, and the advice was "fewer TP ranks", but at TP4 the weights (146 GB per GPU)
/// do not fit the 86 GB usable. Only the interconnect is left to name.
#[test]
fn advice_never_names_fewer_tp_ranks_that_do_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("kimi.jsonl");
    testkit::sh_ok(&format!(
        "srv-launch sim --model kimi-k2-nvfp4 --tp 8 -- --hardware rtx-pro-6000 \
         | loadgen -c 1 -n 2 --max-tokens 16 | srv-kill > {}",
        run.display()
    ));
    let (stdout, stderr) = text(&summarize(&[
        run.to_str().unwrap(),
        "--roofline",
        "kimi-k2-nvfp4@rtx-pro-6000",
    ]));
    let note = stdout
        .lines()
        .find(|l| l.contains("single stream at C=1"))
        .unwrap_or_else(|| panic!("no single-stream note: {stdout}"));
    assert!(note.contains("the modelled step explains it"), "{note}");
    assert!(!note.contains("fewer TP ranks ("), "{note}");
    assert!(
        note.contains("a faster interconnect (fewer TP ranks do not fit: 146 GB of weights per GPU at TP=4, 86 GB usable)"),
        "{note}"
    );
    // The layout fits and the model is the records': no warning.
    assert!(!stderr.contains("--roofline"), "{stderr}");
}

/// Qwen3-32B at TP8 over dual-socket PCIe: TP4 fits, so the advice names it.
#[test]
fn advice_names_fewer_tp_ranks_when_that_layout_fits() {
    let (stdout, stderr) = text(&summarize(&[
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@rtx-pro-6000",
    ]));
    assert!(
        stdout.contains("fewer TP ranks (TP=4 fits) or a faster interconnect, not engine tuning"),
        "{stdout}"
    );
    assert!(!stderr.contains("--roofline"), "{stderr}");
}

/// FP8 Kimi-K2 needs 128 GB per GPU at TP8: srv-sim refuses it, and the records name another
/// model: both are warnings, the table is still printed.
#[test]
fn a_roofline_srv_sim_refuses_or_of_another_model_is_a_warning() {
    let (stdout, stderr) = text(&summarize(&[
        "kimi_tp8_single_stream.jsonl",
        "--roofline",
        "kimi-k2@rtx-pro-6000",
    ]));
    assert!(stdout.contains("# load points"), "{stdout}");
    assert!(
        stderr.contains(
            "--roofline kimi-k2 on rtx-pro-6000: TP=8 PP=1 does not fit, so srv-sim refuses it"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "--roofline model kimi-k2 differs from the records' model label kimi-k2-nvfp4"
        ),
        "{stderr}"
    );
    // The records' own model, at a layout that fits: silent.
    let (_, stderr) = text(&summarize(&[
        "kimi_tp8_single_stream.jsonl",
        "--roofline",
        "kimi-k2-nvfp4@rtx-pro-6000",
    ]));
    assert!(!stderr.contains("--roofline"), "{stderr}");
}
