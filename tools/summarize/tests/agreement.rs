//! `summarize --compare` of two runs that recorded their text (`loadgen --eval`, or
//! `--record-text`), made with one `--seed` against the real srv-sim, whose answer to a prompt
//! is fixed by the prompt and srv-sim's own `--seed`: two servers of one seed agree on every
//! request, servers of different seeds on none (from the first token), and the accuracy of
//! each side stands beside it (and in the plain report's eval table).

use testkit::{cmd, loadgen, srv_sim, stderr};

fn example() -> String {
    format!(
        "{}/../loadgen/examples/arith-12.jsonl",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// One eval run against a srv-sim of `seed`, into `dir/name.jsonl`.
fn run(dir: &std::path::Path, name: &str, seed: &str) -> String {
    let (_sim, url) = srv_sim(&["--ttft", "5ms", "--itl", "1ms", "--seed", seed]);
    let out = loadgen(&[
        "--url",
        &url,
        "-c",
        "4",
        "--eval",
        &example(),
        "--max-tokens",
        "6",
        "--seed",
        "1",
        "--label",
        &format!("run={name}"),
    ])
    .ok();
    let path = dir.join(format!("{name}.jsonl"));
    std::fs::write(&path, out.out()).unwrap();
    path.to_str().unwrap().to_string()
}

/// The agreement table's one row, as CSV cells.
fn agreement_row(base: &str, new: &str) -> Vec<String> {
    let out = cmd("summarize")
        .args(["--compare", base, new, "--format", "csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("point,matched,identical_pct,first_diff_p50"));
    assert!(lines.next().is_some(), "no agreement table: {text}");
    let row = lines.next().unwrap_or_else(|| panic!("no row: {text}"));
    row.split(',').map(str::to_string).collect()
}

/// A cell as a number (None when empty).
fn num(cell: &str) -> Option<f64> {
    (!cell.is_empty()).then(|| cell.parse().unwrap())
}

#[test]
fn two_servers_of_one_seed_agree_on_every_answer_and_of_two_seeds_on_none() {
    let dir = tempfile::tempdir().unwrap();
    let a = run(dir.path(), "a", "7");
    let again = run(dir.path(), "again", "7");
    let other = run(dir.path(), "other", "8");
    // point, requests, identical %, first diff token p50, accuracy % base, new
    let same = agreement_row(&a, &again);
    let figures = |row: &[String]| row[1..].iter().map(|c| num(c)).collect::<Vec<_>>();
    assert_eq!(
        figures(&same)[..3],
        [Some(12.0), Some(100.0), None],
        "{same:?}"
    );
    // From the first token on, and srv-sim answers words, never a number: every answer
    // judged, none right.
    let differ = agreement_row(&a, &other);
    // The plain report carries the accuracy too, from the request records.
    let out = cmd("summarize").arg(&a).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let eval = text
        .split("# eval\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    let row: Vec<&str> = eval.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row, ["C=4", "12", "0", "0", "0.0"], "{text}");
    assert_eq!(
        figures(&differ),
        [Some(12.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0)],
        "{differ:?}"
    );
}

/// A structured-output run of 200 requests against a srv-sim breaking `rate` of its JSON.
fn structured_run(dir: &std::path::Path, name: &str, rate: &str) -> String {
    let (_sim, url) = srv_sim(&[
        "--ttft",
        "2ms",
        "--itl",
        "0ms",
        "--seed",
        "5",
        "--invalid-json-rate",
        rate,
    ]);
    let schema = format!(
        "{}/../loadgen/examples/person.schema.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let out = loadgen(&[
        "--url",
        &url,
        "-c",
        "8",
        "-n",
        "200",
        "--response-format",
        &schema,
        "--max-tokens",
        "64",
        "--seed",
        "2",
    ])
    .ok();
    let path = dir.join(format!("{name}.jsonl"));
    std::fs::write(&path, out.out()).unwrap();
    path.to_str().unwrap().to_string()
}

/// The comparison of two structured-output runs carries each side's JSON validity beside the
/// speed, judged as a share of its requests (a binomial interval, not the speed's noise): a
/// server that breaks half its JSON is worse, though it may be as fast. Without the share on
/// both sides, no such column.
#[test]
fn compare_of_structured_runs_sets_json_validity_beside_the_speed() {
    let dir = tempfile::tempdir().unwrap();
    let good = structured_run(dir.path(), "good", "0");
    let broken = structured_run(dir.path(), "broken", "0.5");
    let out = cmd("summarize")
        .args(["--compare", &good, &broken, "--format", "csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines().skip_while(|l| !l.contains("tok_s_base"));
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_else(|| panic!("{text}"))
        .split(',')
        .collect();
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_else(|| panic!("{text}"))
        .split(',')
        .collect();
    let cell = |name: &str| {
        let i = header.iter().position(|h| *h == name);
        row[i.unwrap_or_else(|| panic!("no {name} column: {text}"))]
    };
    assert_eq!(cell("json_valid_base"), "100", "{text}");
    let new: f64 = cell("json_valid_new").parse().unwrap();
    // 200 draws at one half: within 35..65 but for one run in ten thousand.
    assert!((35.0..=65.0).contains(&new), "{text}");
    assert!(cell("json_valid_ratio").ends_with("worse"), "{text}");

    // Two eval runs carry their accuracy and no JSON validity: that column and not this one.
    let (a, b) = (run(dir.path(), "a", "7"), run(dir.path(), "b", "7"));
    let out = cmd("summarize")
        .args(["--compare", &a, &b, "--format", "csv"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(",accuracy_base,accuracy_new,accuracy_ratio"),
        "{text}"
    );
    assert!(!text.contains("json_valid_base"), "{text}");
}
