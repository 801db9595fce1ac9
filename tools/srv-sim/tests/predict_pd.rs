//! `srv-sim --predict --pd xPyD`: a disaggregated layout in virtual time. On the original
//! campaign's eight RTX PRO 6000 with qwen3-32b, 2P1D's records carry the five TTFT parts the
//! served group reports, and they add up to the client's TTFT exactly; the same KV bytes
//! cross an NVLink card sooner than a PCIe one, and a decode member behind the prefill's PCIe
//! switch sooner than one across the sockets; a predicted 1P1D agrees with three real srv-sim
//! processes (prefill, decode, proxy) under the real loadgen at low load; a layout beyond the
//! node is refused.

mod common;
use common::*;
use serde_json::Value;
use testkit::{check, holds_in_one_of_three, json_lines, num, of_kind};

/// The campaign: qwen3-32b at TP 2 per member on 8 x RTX PRO 6000 (2P1D takes six GPUs).
const CAMPAIGN: &[&str] = &[
    "--model",
    "qwen3-32b",
    "--hardware",
    "rtx-pro-6000",
    "--tp",
    "2",
];

fn records(preset: &[&str], args: &[&str]) -> Vec<Value> {
    let out = predict_on(preset, args);
    assert!(
        out.status.success(),
        "srv-sim --predict {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    json_lines(&out.stdout)
}

/// A request's five TTFT parts: prefill queue, prefill, KV transfer, decode queue, first
/// decode step.
fn parts(r: &Value) -> [f64; 5] {
    [
        "queue_ms",
        "prefill_ms",
        "kv_transfer_ms",
        "decode_queue_ms",
        "first_decode_ms",
    ]
    .map(|k| num(r, &format!("/server_timing/{k}")))
}

#[test]
fn a_predicted_2p1d_splits_each_ttft_into_five_parts_that_add_up_exactly() {
    let recs = records(
        CAMPAIGN,
        &[
            "--pd",
            "2p1d",
            "-c",
            "1,16",
            "-n",
            "32",
            "--input-len",
            "2048",
            "--max-tokens",
            "64",
            "--request-latency",
            "0",
        ],
    );
    let requests = of_kind(&recs, "request");
    assert_eq!(requests.len(), 64);
    let mut queued_for_the_link = 0;
    for r in &requests {
        let p = parts(r);
        assert!(p.iter().all(|x| *x >= 0.0), "{r}");
        // 2048 tokens x 256 KiB over a PCIe link, each TP rank half of it: milliseconds.
        assert!(p[1] > 0.0 && p[2] > 1.0 && p[4] > 0.0, "{r}");
        let sum: f64 = p.iter().sum();
        assert!((num(r, "/server_timing/ttft_ms") - sum).abs() < 1e-6, "{r}");
        // The client sends with no latency: its TTFT is its send lag and the five parts.
        let client = num(r, "/ttft_ms") - num(r, "/send_lag_ms");
        assert!(
            (client - sum).abs() < 1e-6,
            "client {client} ms, parts {p:?}"
        );
        queued_for_the_link += usize::from(p[2] > 1.5 * parts(requests[0])[2]);
    }
    // At C=16 the one decode server's link carries one KV cache at a time: some wait for it.
    assert!(
        queued_for_the_link > 0,
        "no transfer ever waited for the link"
    );
    let summaries = of_kind(&recs, "summary");
    assert_eq!(summaries.len(), 2);
    for s in summaries {
        assert!(num(s, "/ttft_split/kv_transfer_ms") > 1.0, "{s}");
    }
}

#[test]
fn the_same_bytes_cross_an_nvlink_card_sooner_than_a_pcie_one() {
    let transfer = |hardware: &str| {
        let recs = records(
            &["--model", "llama-3.1-8b", "--hardware", hardware],
            &[
                "--pd",
                "1p1d",
                "-c",
                "1",
                "-n",
                "2",
                "--input-len",
                "4000",
                "--max-tokens",
                "8",
            ],
        );
        let r = of_kind(&recs, "request")[0];
        (num(r, "/prompt_tokens"), parts(r)[2])
    };
    let (pcie, nvlink) = (transfer("rtx-pro-6000"), transfer("h100"));
    assert_eq!(pcie.0, nvlink.0);
    // 4000 tokens x 128 KiB = 524 MB: about 13 ms over the RTX PRO 6000's PCIe switch, under
    // 1.5 ms over H100 NVLink.
    assert!(
        pcie.1 > 3.0 * nvlink.1 && pcie.1 > 13.0 && nvlink.1 < 1.5,
        "PCIe {} ms, NVLink {} ms",
        pcie.1,
        nvlink.1
    );
}

#[test]
fn a_decode_member_across_the_sockets_gets_its_kv_later_than_one_behind_the_same_switch() {
    // 1P3D at TP 2 on the dual-socket RTX PRO 6000 box: the prefill member on GPUs 0-1, the
    // decode members on 2-3 (the same switch, 40 GB/s), 4-5 and 6-7 (the other socket, 22.2
    // GB/s). Requests 0, 1, 2 go to decode members 0, 1, 2, one at a time.
    let recs = records(
        CAMPAIGN,
        &[
            "--pd",
            "1p3d",
            "-c",
            "1",
            "-n",
            "3",
            "--input-len",
            "2048",
            "--max-tokens",
            "8",
        ],
    );
    let kv: Vec<f64> = of_kind(&recs, "request")
        .iter()
        .map(|r| parts(r)[2])
        .collect();
    assert_eq!(kv.len(), 3);
    assert_eq!(kv[1], kv[2], "{kv:?}");
    let ratio = kv[1] / kv[0];
    assert!(
        (1.7..1.85).contains(&ratio),
        "cross-socket over switch: {kv:?}"
    );
}

/// The mean of a request field over a record stream's successful requests.
fn mean(recs: &[Value], pointer: &str) -> f64 {
    let v: Vec<f64> = of_kind(recs, "request")
        .iter()
        .filter(|r| r.get("error").is_none())
        .map(|r| num(r, pointer))
        .collect();
    v.iter().sum::<f64>() / v.len() as f64
}

#[test]
fn a_predicted_1p1d_agrees_with_three_served_srv_sims_under_loadgen_at_c1() {
    let load = [
        "-c",
        "1",
        "-n",
        "12",
        "--input-len",
        "1024",
        "--max-tokens",
        "32",
        "--seed",
        "3",
    ];
    let predicted = records(LLAMA_8B_ON_A100, &[&["--pd", "1p1d"], &load[..]].concat());
    holds_in_one_of_three("predicted 1P1D against served", || {
        let side = |role: &str| {
            start(
                &[
                    LLAMA_8B_ON_A100,
                    &["--pd-role", role, "--enable-per-request-metrics"],
                ]
                .concat(),
            )
        };
        let (p, d) = (side("prefill"), side("decode"));
        let url = |s: &Sim| format!("http://127.0.0.1:{}", s.port);
        let proxy = start(&[
            "--pd-role",
            "proxy",
            "--prefill-url",
            &url(&p),
            "--decode-url",
            &url(&d),
        ]);
        let served = loadgen_against(&proxy, &load);
        let mut said = Vec::new();
        // The served group's hops (client, proxy, both servers) are a few hundred us each on
        // loopback, and a busy machine wakes each timer late: TTFT within 15% and 2 ms, its
        // parts within 10% and 2 ms.
        for (what, pointer, rel, abs) in [
            ("TTFT", "/ttft_ms", 0.15, 2.0),
            ("TPOT", "/tpot_ms", 0.05, 0.0),
            ("prefill", "/server_timing/prefill_ms", 0.10, 2.0),
            ("KV transfer", "/server_timing/kv_transfer_ms", 0.10, 2.0),
            ("first decode", "/server_timing/first_decode_ms", 0.10, 2.0),
        ] {
            let (p, m) = (mean(&predicted, pointer), mean(&served, pointer));
            check(
                &format!("{what} mean: predicted {p:.3} ms, served"),
                m,
                (m - p).abs() <= p * rel + abs,
            )?;
            said.push(format!("{what} {p:.2}/{m:.2} ms"));
        }
        Ok(said.join(", "))
    });
}

#[test]
fn a_layout_beyond_the_node_or_without_predict_is_refused() {
    for (args, needle) in [
        (
            &[CAMPAIGN, &["--predict", "--pd", "3p2d"]].concat(),
            "--pd 3p2d of --tp 2 --pp 1 needs 10 GPUs: a rtx-pro-6000 node has 8",
        ),
        (&["--pd", "1p1d"][..].to_vec(), "--predict"),
        (
            &[
                "--predict",
                "--pd",
                "1p1d",
                "--enable-logging-iteration-details",
            ][..]
                .to_vec(),
            "--enable-logging-iteration-details",
        ),
        (&["--predict", "--pd", "1p0d"][..].to_vec(), "1p0d"),
    ] {
        let out = testkit::call("srv-sim").args(args).run();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}
