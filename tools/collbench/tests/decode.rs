//! `collbench decode`: one decode step's allreduces measured over tp local ranks, beside the
//! roofline of the shared presets.

use testkit::{cmd, json_lines};

#[test]
fn decode_measures_the_step_allreduces_and_sets_them_beside_the_roofline() {
    let out = cmd("collbench")
        .args([
            "decode",
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "h100",
            "--tp",
            "2",
            "--batch",
            "1,3",
            "-n",
            "5",
            "-w",
            "1",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 2, "{recs:?}");
    for (rec, batch) in recs.iter().zip([1u64, 3]) {
        assert_eq!(rec["kind"], "decode");
        assert_eq!(rec["batch"].as_u64(), Some(batch));
        assert_eq!(rec["tp"], 2);
        assert_eq!(rec["dtype"], "bf16");
        // llama-3.1-8b: 32 layers, hidden 4096: 2 x 32 allreduces of batch x 4096 x 2 bytes.
        assert_eq!(rec["allreduces_per_step"], 64);
        assert_eq!(rec["allreduce_bytes"].as_u64(), Some(batch * 4096 * 2));
        assert_eq!(rec["wrong"], 0);
        assert_eq!(rec["allreduce_us"]["n"], 5);
        let mean = rec["allreduce_us"]["mean"].as_f64().unwrap();
        let comm = rec["comm_us_per_token"].as_f64().unwrap();
        assert!((comm - 64.0 * mean).abs() < 1e-6 * comm, "{rec}");
        let (compute, memory, roof) = (
            rec["step_compute_us"].as_f64().unwrap(),
            rec["step_memory_us"].as_f64().unwrap(),
            rec["step_roofline_us"].as_f64().unwrap(),
        );
        assert!(compute > 0.0 && memory > 0.0);
        assert_eq!(roof, compute.max(memory));
        let frac = rec["comm_fraction"].as_f64().unwrap();
        assert!((frac - comm / (comm + roof)).abs() < 1e-9);
    }
    // A bigger batch reads the same weights: the memory roofline grows only by KV bytes.
    assert!(recs[1]["step_memory_us"].as_f64() > recs[0]["step_memory_us"].as_f64());
    assert!(err.contains("us/token comm"), "{err}");
}

#[test]
fn decode_with_an_unknown_model_names_the_presets() {
    let out = cmd("collbench")
        .args(["decode", "--model", "gpt-9", "--tp", "2"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--model") && err.contains("llama-3.1-70b"),
        "{err}"
    );
}
