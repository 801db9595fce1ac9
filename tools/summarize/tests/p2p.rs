//! Real `collbench p2p` output (3 local tcp ranks) becomes the three pair matrices.

use servbench::record::P2pRecord;

#[test]
fn real_collbench_p2p_records_become_the_pair_matrices_with_a_marked_diagonal() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "3", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let pairs = collbench.of::<P2pRecord>();
    assert_eq!(pairs.len(), 6, "every ordered pair of 3 ranks");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    std::fs::write(&file, &collbench.output.stdout).unwrap();
    let out = testkit::run_ok("summarize", &["--format", "json", file.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.output.stdout).unwrap();
    let tables = report["tables"].as_array().unwrap();
    let titles: Vec<&str> = tables.iter().filter_map(|t| t["table"].as_str()).collect();
    let uni = tables
        .iter()
        .find(|t| t["table"] == "p2p unidirectional GB/s")
        .unwrap_or_else(|| panic!("no unidirectional matrix: {titles:?}"));
    assert!(titles.contains(&"p2p bidirectional GB/s"), "{titles:?}");
    assert!(
        titles.contains(&"p2p latency us (half an 8-byte round trip)"),
        "{titles:?}"
    );
    let rows = uni["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "a row per source rank: {uni}");
    for (s, row) in rows.iter().enumerate() {
        assert_eq!(row["src"], s as u64, "{row}");
        assert_eq!(row["bytes"], 16384, "{row}");
        for d in 0..3 {
            let cell = &row[format!("to_{d}")];
            if d == s {
                assert_eq!(cell, "-", "the diagonal is marked: {row}");
            } else {
                // The figure collbench wrote for this pair, as summarize rounds it (6 digits).
                let want = pairs
                    .iter()
                    .find(|p| (p.src, p.dst) == (s as u32, d as u32))
                    .unwrap()
                    .uni_gbps;
                let got = cell.as_f64().unwrap_or_else(|| panic!("{row}"));
                assert!(
                    got > 0.0 && (got - want).abs() <= 1e-5 * want.max(1.0),
                    "{got} vs {want}: {row}"
                );
            }
        }
    }
}

/// A GPU run's records (here: the tcp ones, re-labelled as `collbench p2p --backend nccl`
/// writes them, once per method) give one block per method in each matrix.
#[test]
fn copy_engine_and_nccl_records_of_one_gpu_run_are_blocks_of_their_own() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "3", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let mut lines = String::new();
    for method in ["copy_engine", "nccl"] {
        for mut r in testkit::json_lines(&collbench.output.stdout) {
            r["backend"] = "nccl".into();
            r["method"] = method.into();
            r["link"] = "NV18".into();
            lines.push_str(&format!("{r}\n"));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = testkit::run_ok("summarize", &["--format", "json", file.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.output.stdout).unwrap();
    let uni = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "p2p unidirectional GB/s")
        .unwrap_or_else(|| panic!("no unidirectional matrix: {report}"))
        .clone();
    let blocks: Vec<&str> = uni["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["backend"].as_str().unwrap())
        .collect();
    assert_eq!(
        blocks,
        ["copy_engine"; 3]
            .iter()
            .chain(&["nccl"; 3])
            .copied()
            .collect::<Vec<_>>(),
        "a block of 3 rows per method: {uni}"
    );
    // Each pair's link beside the figures, in a matrix of its own.
    let link = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "p2p link (nvidia-smi topo -m)")
        .unwrap_or_else(|| panic!("no link matrix: {report}"))
        .clone();
    let first = &link["rows"][0];
    assert_eq!(
        (&first["to_0"], &first["to_1"]),
        (&"-".into(), &"NV18".into()),
        "{link}"
    );
}

/// A method a newer collbench writes (read as `other`) on the nccl backend is a block of its
/// own: keyed by the backend's name it fell into the `nccl` method's block and its figures
/// replaced NCCL's.
#[test]
fn a_newer_tools_p2p_method_does_not_overwrite_the_nccl_figures() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "2", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let mut lines = String::new();
    for (method, gbps) in [("nccl", 100.0), ("copy_engine_read", 7.0)] {
        for mut r in testkit::json_lines(&collbench.output.stdout) {
            r["backend"] = "nccl".into();
            r["method"] = method.into();
            r["uni_gbps"] = gbps.into();
            lines.push_str(&format!("{r}\n"));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    std::fs::write(&file, lines).unwrap();
    let out = testkit::run_ok("summarize", &["--format", "json", file.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.output.stdout).unwrap();
    let uni = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "p2p unidirectional GB/s")
        .unwrap_or_else(|| panic!("no unidirectional matrix: {report}"))
        .clone();
    let rows: Vec<(&str, f64)> = uni["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let off = if r["src"] == 0 {
                &r["to_1"]
            } else {
                &r["to_0"]
            };
            (r["backend"].as_str().unwrap(), off.as_f64().unwrap())
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("nccl", 100.0),
            ("nccl", 100.0),
            ("other", 7.0),
            ("other", 7.0)
        ],
        "NCCL's figures and the newer method's, each in its own block: {uni}"
    );
}

/// A p2p line claiming 65,536 ranks (the most a record may claim) with one pair (a hostile or
/// torn file) is two rows of that pair's ranks: the matrix was sized by the claim, and summarize
/// asked for tens of GB and aborted. (A claim above the most is an implausible line, skipped.)
#[test]
fn a_p2p_record_claiming_huge_ranks_is_sized_by_the_ranks_it_names() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "2", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let mut r = testkit::json_lines(&collbench.output.stdout)
        .into_iter()
        .next()
        .unwrap();
    r["ranks"] = servbench::record::MAX_P2P_RANKS.into();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    std::fs::write(&file, format!("{r}\n")).unwrap();
    let out = testkit::run_ok("summarize", &["--format", "json", file.to_str().unwrap()]);
    let report: serde_json::Value = serde_json::from_slice(&out.output.stdout).unwrap();
    let uni = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "p2p unidirectional GB/s")
        .unwrap_or_else(|| panic!("no unidirectional matrix: {report}"))
        .clone();
    let rows = uni["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "a row for each rank the pair names: {uni}");
    let (got, want) = (
        rows[0]["to_1"].as_f64().unwrap(),
        r["uni_gbps"].as_f64().unwrap(),
    );
    assert!(
        (got - want).abs() <= 1e-5 * want.max(1.0),
        "{got} vs {want}: {uni}"
    );
    assert!(rows[1]["to_0"].is_null(), "1 -> 0 was not measured: {uni}");
}

/// P2-big: a p2p figure past any link (1e308 GB/s) is an implausible line, named and skipped,
/// not a 309-digit cell in the matrix.
#[test]
fn p2_big_a_p2p_figure_past_any_link_is_skipped_by_its_line() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "2", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let mut lines: Vec<serde_json::Value> = testkit::json_lines(&collbench.output.stdout);
    let sane = lines[0]["uni_gbps"].as_f64().unwrap();
    lines[0]["uni_gbps"] = 1e308.into();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&file, text).unwrap();
    let out = testkit::run("summarize", &[file.to_str().unwrap()]);
    let (table, err) = (out.out(), out.err());
    assert!(
        err.contains(&format!(
            "{}:1: implausible p2p record: uni_gbps 1e308 is more than any link carries (100000 GB/s)",
            file.display()
        )),
        "{err}"
    );
    assert!(!table.contains("1000000000000"), "{table}");
    assert!(sane < servbench::record::MAX_P2P_GBPS, "{sane}");
}

/// The same pair twice in one input (two collbench runs appended to one file): the later figure
/// silently replaced the first (999 GB/s over the measured one). It is warned at its line, as two
/// loadgen runs in one input are, and kept apart as the second run's block (`--strict`: exit 2).
#[test]
fn the_same_p2p_pair_twice_in_one_input_is_warned_and_kept_apart() {
    let collbench = testkit::run_ok(
        "collbench",
        &["p2p", "-np", "2", "--bytes", "16K", "-n", "2", "-w", "1"],
    );
    let first = testkit::json_lines(&collbench.output.stdout);
    let mut lines = String::new();
    for r in &first {
        lines.push_str(&format!("{r}\n"));
    }
    for mut r in first.clone() {
        r["uni_gbps"] = 999.0.into();
        lines.push_str(&format!("{r}\n"));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p2p.jsonl");
    std::fs::write(&file, lines).unwrap();
    let path = file.to_str().unwrap();
    let out = testkit::run_ok("summarize", &["--format", "json", path]);
    let warning = out.err();
    assert!(
        warning.contains("p2p.jsonl:3: ") && warning.contains("two runs in one input"),
        "{warning}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.output.stdout).unwrap();
    let uni = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == "p2p unidirectional GB/s")
        .unwrap_or_else(|| panic!("no unidirectional matrix: {report}"))
        .clone();
    let rows: Vec<(&str, f64)> = uni["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let off = if r["src"] == 0 {
                &r["to_1"]
            } else {
                &r["to_0"]
            };
            (r["backend"].as_str().unwrap(), off.as_f64().unwrap())
        })
        .collect();
    let measured = first[0]["uni_gbps"].as_f64().unwrap();
    assert_eq!(rows.len(), 4, "two blocks of two rows: {uni}");
    assert_eq!(rows[0].0, "tcp", "{uni}");
    assert!(
        (rows[0].1 - measured).abs() <= 1e-5 * measured.max(1.0),
        "{uni}"
    );
    assert_eq!(rows[2], ("tcp input_run=2", 999.0), "{uni}");
    let strict = testkit::run("summarize", &["--strict", path]);
    assert_eq!(strict.output.status.code(), Some(2), "{}", strict.err());
}
