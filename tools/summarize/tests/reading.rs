//! Smaller things a reader trips on (issue 22, item 10): one format per share column, a server
//! listed once however many inputs carry it, one list of `--cols` names for `--help` and its
//! error, srv-sim's dry runs side by side, and tables that fit 120 columns with `--roofline` or
//! `--compare` (`--wide` for all).

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::{fixtures, summarize};
use std::process::Stdio;
use testkit::ok;

/// The column under `header` of the first table holding it, one cell per row.
fn column(text: &str, header: &str) -> Vec<String> {
    let mut lines = text.lines().skip_while(|l| !l.contains(header));
    let head = lines
        .next()
        .unwrap_or_else(|| panic!("no {header}: {text}"));
    let end = head.find(header).unwrap() + header.len();
    lines
        .take_while(|l| !l.starts_with("note:") && !l.starts_with('#'))
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let upto = &l[..end.min(l.len())];
            upto.rsplit(' ').next().unwrap_or("").to_string()
        })
        .collect()
}

/// `% of step` read `100` on one row and `99.8` on the next: now one decimal on every row.
#[test]
fn a_share_column_prints_one_format_on_every_row() {
    let text = ok(&summarize(&[
        "tp_sweep_pcie.jsonl",
        "--roofline",
        "qwen3-32b@rtx-pro-6000",
    ]));
    for header in ["% of mem", "% of step"] {
        let cells = column(&text, header);
        assert_eq!(cells.len(), 3, "{header}: {cells:?}\n{text}");
        for c in &cells {
            let (whole, frac) = c.split_once('.').unwrap_or_else(|| panic!("{c}: {text}"));
            assert!(
                whole.parse::<u32>().is_ok() && frac.len() == 1,
                "{header} {c}: {text}"
            );
        }
    }
}

/// The same srv-launch record in two inputs is one server; two servers stay two.
#[test]
fn the_same_server_read_from_two_inputs_is_listed_once() {
    let servers = |text: &str| -> usize {
        text.lines()
            .skip_while(|l| !l.starts_with("# servers"))
            .skip(2)
            .take_while(|l| !l.is_empty() && !l.starts_with('#'))
            .count()
    };
    let once = ok(&summarize(&["launch_kill.jsonl"]));
    let twice = ok(&summarize(&["launch_kill.jsonl", "launch_kill.jsonl"]));
    assert_eq!(servers(&once), 1, "{once}");
    assert_eq!(servers(&twice), 1, "{twice}");
    // Another server (another pid) beside it stays apart.
    let record = std::fs::read_to_string(fixtures().join("launch_kill.jsonl")).unwrap();
    let server = record
        .lines()
        .find(|l| l.contains(r#""kind":"server""#))
        .expect("a server record");
    let v: serde_json::Value = serde_json::from_str(server).unwrap();
    let other = server.replace(
        &format!(r#""pid":{}"#, v["pid"]),
        &format!(r#""pid":{}"#, v["pid"].as_u64().unwrap() + 1),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.jsonl");
    std::fs::write(&path, format!("{other}\n")).unwrap();
    let two = ok(&summarize(&["launch_kill.jsonl", path.to_str().unwrap()]));
    assert_eq!(servers(&two), 2, "{two}");
}

/// `--cols`' error named `speed`, which `--help` did not, and `--help` left out the server's
/// columns: both print one list now.
#[test]
fn the_cols_error_lists_exactly_what_help_lists() {
    let help = ok(&summarize(&["--help"]));
    let start = help.find("comma-separated: ").expect("--cols help") + "comma-separated: ".len();
    let rest = &help[start..];
    let listed: String = rest[..rest.find("\n\n").unwrap_or(rest.len())]
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let err = summarize(&["launch_kill.jsonl", "--cols", "nope"]);
    assert_eq!(err.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&err.stderr);
    let start = stderr
        .find("unknown column 'nope': use ")
        .expect("the error")
        + 27;
    let named = stderr[start..]
        .split(" (see --help)")
        .next()
        .unwrap()
        .trim()
        .to_string();
    assert_eq!(listed, named, "help: {help}\nerror: {stderr}");
    for col in ["running", "waiting", "speed", "kv_max", "label:NAME"] {
        assert!(listed.contains(col), "{col}: {listed}");
    }
}

/// TP4, TP8 and PP8 dry runs of Kimi-K2 NVFP4 were a 1,000-character line summarize ignored:
/// now one row each, TP4 marked as not fitting, the fastest layout that fits named.
#[test]
fn sim_plan_records_are_tabulated_side_by_side() {
    let mut plans = String::new();
    for layout in [["--tp", "4"], ["--tp", "8"], ["--pp", "8"]] {
        let out = testkit::cmd("srv-sim")
            .args([
                "--dry-run",
                "--model",
                "kimi-k2-nvfp4",
                "--hardware",
                "rtx-pro-6000",
            ])
            .args(layout)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        plans.push_str(&String::from_utf8(out.stdout).unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("plans.jsonl");
    std::fs::write(&path, plans).unwrap();
    let out = summarize(&[path.to_str().unwrap()]);
    let text = ok(&out);
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("sim_plan"),
        "not ignored"
    );
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("# srv-sim plans"))
        .skip(2)
        .take_while(|l| l.starts_with("kimi"))
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    let fits: Vec<(String, String, String)> = rows
        .iter()
        .map(|r| {
            let c: Vec<&str> = r.split_whitespace().collect();
            (c[2].to_string(), c[3].to_string(), c[5].to_string())
        })
        .collect();
    assert!(
        fits.contains(&("4".into(), "1".into(), "no".into())),
        "{fits:?}"
    );
    assert!(
        fits.contains(&("8".into(), "1".into(), "yes".into())),
        "{fits:?}"
    );
    assert!(
        fits.contains(&("1".into(), "8".into(), "yes".into())),
        "{fits:?}"
    );
    assert!(
        text.contains("kimi-k2-nvfp4 TP=4 PP=1 does not fit")
            && text.contains(
                "fastest single stream among the layouts that fit: kimi-k2-nvfp4 TP=8 PP=1"
            ),
        "{text}"
    );
    // Without plans, no such table.
    assert!(!ok(&summarize(&["launch_kill.jsonl"])).contains("srv-sim plans"));
}

/// The widest line of a text table's header and rows (the `#` line and notes aside).
fn widest_row(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("note:"))
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(0)
}

/// With `--roofline` the load points were 240 characters wide, with `--compare` 270: they fit
/// 120 now, the header names what was left out, and `--wide` shows every column.
#[test]
fn tables_fit_120_columns_with_a_roofline_or_a_comparison_and_wide_shows_all() {
    let roof = ["loadgen_sim.jsonl", "--roofline", "llama-3.1-8b@h100"];
    let fitted = ok(&summarize(&roof));
    assert!(widest_row(&fitted) <= 120, "{fitted}");
    assert!(
        fitted.contains("hidden=") && fitted.contains("--wide shows all"),
        "{fitted}"
    );
    assert!(
        fitted.contains("% of step") && fitted.contains("TPOT p50 ms"),
        "{fitted}"
    );
    let wide = ok(&summarize(&[&roof[..], &["--wide"]].concat()));
    assert!(widest_row(&wide) > 120, "{wide}");
    assert!(
        wide.contains("send lag p99 ms") && !wide.contains("hidden="),
        "{wide}"
    );

    let cmp = ["--compare", "loadgen_base.jsonl", "loadgen_faster.jsonl"];
    let fitted = ok(&summarize(&cmp));
    assert!(widest_row(&fitted) <= 120, "{fitted}");
    assert!(fitted.contains("new/base"), "{fitted}");
    let wide = ok(&summarize(&[&cmp[..], &["--wide"]].concat()));
    assert!(widest_row(&wide) > 120, "{wide}");
    // Without a roofline or a comparison nothing is left out.
    let plain = ok(&summarize(&["loadgen_sim.jsonl"]));
    assert!(!plain.contains("hidden="), "{plain}");
}
