//! `collbench p2p` on 4 local tcp ranks (real processes, real loopback sockets): every ordered
//! pair measured once, the diagonal absent, and the matrix printed; on the nccl backend, where
//! this machine has no CUDA driver, one line saying which library is missing, exit 2.

use servbench::record::{CollBackend, P2pMethod, P2pRecord};
use std::collections::BTreeSet;

#[test]
fn four_local_ranks_give_every_ordered_pair_a_finite_positive_bandwidth_and_latency() {
    let out = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "4", "--bytes", "64K", "-n", "3", "-w", "1"],
    );
    let cells = out.of::<P2pRecord>();
    assert_eq!(out.records().len(), cells.len(), "only p2p records");
    let pairs: BTreeSet<(u32, u32)> = cells.iter().map(|c| (c.src, c.dst)).collect();
    let every: BTreeSet<(u32, u32)> = (0..4)
        .flat_map(|s| (0..4).filter(move |&d| d != s).map(move |d| (s, d)))
        .collect();
    assert_eq!(cells.len(), 12, "one record per ordered pair");
    assert_eq!(pairs, every, "every ordered pair, no diagonal");
    for c in &cells {
        assert_eq!(c.backend, CollBackend::Tcp);
        assert_eq!(c.method, P2pMethod::Tcp, "{c:?}");
        assert_eq!((c.peer_access, c.link.as_deref()), (None, None), "{c:?}");
        assert_eq!((c.ranks, c.bytes, c.latency_bytes), (4, 65536, 8), "{c:?}");
        assert_eq!((c.iters, c.warmup), (3, 1), "{c:?}");
        for figure in [c.uni_gbps, c.bidir_gbps, c.latency_us] {
            assert!(figure.is_finite() && figure > 0.0, "{c:?}");
        }
    }
    // The matrix on stderr: a header row of the 4 destinations, and rank 2's row with its
    // diagonal marked.
    let err = out.err();
    assert!(
        err.contains("p2p unidirectional bandwidth (GB/s), 65536-byte messages, tcp backend"),
        "{err}"
    );
    let row2 = err
        .lines()
        .map(|l| {
            l.trim_start_matches("collbench:")
                .split_whitespace()
                .collect::<Vec<_>>()
        })
        .find(|w| w.len() == 5 && w[0] == "2")
        .unwrap_or_else(|| panic!("no row for rank 2: {err}"));
    assert_eq!(row2[3], "-", "rank 2's diagonal is marked: {err}");
}

#[test]
fn p2p_on_one_rank_is_a_usage_error_naming_the_fix() {
    let out = testkit::run("collbench", &["p2p", "-np", "1"]);
    assert_eq!(out.code(), Some(2), "{}", out.err());
    assert!(out.err().contains("at least two ranks"), "{}", out.err());
}

#[test]
fn p2p_over_nccl_without_a_cuda_driver_says_in_one_line_what_is_missing() {
    for method in [&[][..], &["--method", "copy-engine"][..]] {
        let out = testkit::run(
            "collbench",
            &[&["p2p", "--backend", "nccl", "-g", "2"][..], method].concat(),
        );
        let err = out.err();
        assert_eq!(out.code(), Some(2), "{err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line: {err}");
        assert!(
            lines[0].starts_with(
                "collbench: error: collbench p2p --backend nccl: cannot load the CUDA driver: looked for libcuda.so"
            ),
            "{err}"
        );
        assert!(lines[0].contains("libcuda.so.1"), "{err}");
        // The copy engine needs the driver alone; NCCL is asked for only with it.
        assert_eq!(
            lines[0].contains("cannot load NCCL"),
            method.is_empty(),
            "{err}"
        );
        assert!(out.records().is_empty(), "no records: {err}");
    }
}

#[test]
fn a_copy_engine_or_nccl_method_on_the_tcp_backend_is_a_usage_error() {
    let out = testkit::run("collbench", &["p2p", "-np", "2", "--method", "nccl"]);
    assert_eq!(out.code(), Some(2), "{}", out.err());
    assert!(out.err().contains("need --backend nccl"), "{}", out.err());
}
