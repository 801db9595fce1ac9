//! `--compare` of two runs of the one-line loop (`srv-launch | loadgen | srv-kill`): srv-kill
//! passes the server record on (marked killed), so the environment table shows which engine
//! flag differed; runs of another output length are matched on the rest, the field named.

fn run(dir: &std::path::Path, name: &str, sim_flags: &str, max_tokens: u32) -> String {
    let path = dir.join(name);
    testkit::sh_ok(&format!(
        "srv-launch sim -- {sim_flags} | loadgen -c 1,2 -n 6 --max-tokens {max_tokens} --input-len 16 | srv-kill > {}",
        path.display()
    ));
    path.to_str().unwrap().to_string()
}

fn compare(a: &str, b: &str) -> String {
    testkit::call("summarize")
        .args(["--compare", a, b])
        .run_ok()
        .out()
}

#[test]
fn the_one_line_loop_keeps_the_server_record_and_another_output_length_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let base = run(dir.path(), "base.jsonl", "--step-overhead 1ms", 8);
    let same = run(dir.path(), "same.jsonl", "--step-overhead 1ms", 8);
    let other = run(dir.path(), "other.jsonl", "--step-overhead 3ms", 16);

    // The same launch and load: rows for both loads, no environment difference, no note.
    let text = compare(&base, &same);
    assert!(!text.contains("environment differences"), "{text}");
    assert!(!text.contains("the runs differ in"), "{text}");
    assert!(!text.contains("only in"), "{text}");

    let text = compare(&base, &other);
    // srv-kill passed the server record on: the flag that differed is shown.
    assert!(text.contains("environment differences"), "{text}");
    let flags = text
        .lines()
        .find(|l| l.starts_with("flags"))
        .unwrap_or_else(|| panic!("no flags row: {text}"));
    assert!(
        flags.contains("--step-overhead 1ms") && flags.contains("--step-overhead 3ms"),
        "{flags}"
    );
    // Another max_tokens: named, and the loads compared on the rest (C=1 and C=2 both).
    assert!(
        text.contains("the runs differ in output length (max_tokens): base out=8, new out=16"),
        "{text}"
    );
    assert!(!text.contains("only in"), "{text}");
    assert!(
        text.contains("2 worse") || text.contains("point(s)"),
        "{text}"
    );
    let rows = text
        .lines()
        .filter(|l| l.trim_start().starts_with('1') || l.trim_start().starts_with('2'))
        .filter(|l| l.contains('x'))
        .count();
    assert_eq!(rows, 2, "a row per load: {text}");
}
