//! `--eval` and `--record-text` against the real srv-sim, whose answer to a prompt is fixed by
//! the prompt and its `--seed`: a first run records srv-sim's answers, a question set made of
//! them (9 of 12 right, 3 wrong) is then judged exactly; requests with no whole answer are
//! counted apart; a bad line is one error naming file:line.

use servbench::record::{RequestRecord, SummaryRecord, Verdict, joined_text};
use std::collections::BTreeMap;
use testkit::run::in_the_schema;
use testkit::{loadgen, srv_sim, the_error_line};

const SIM: &[&str] = &["--ttft", "20ms", "--itl", "1ms", "--seed", "7"];

/// The example question set shipped for the README.
fn example() -> String {
    format!("{}/examples/arith-12.jsonl", env!("CARGO_MANIFEST_DIR"))
}

/// srv-sim's answer to each question of the example (by line), from a `--record-text` run.
fn sims_answers(url: &str) -> BTreeMap<u32, String> {
    let out = loadgen(&[
        "--url",
        url,
        "-c",
        "4",
        "--eval",
        &example(),
        "--max-tokens",
        "6",
        "--seed",
        "1",
    ])
    .ok();
    let mut answers = BTreeMap::new();
    for r in out.of::<RequestRecord>() {
        let pieces = r.output_pieces.expect("an eval request records its text");
        // One piece per chunk: srv-sim streams a token a chunk.
        assert_eq!(pieces.len(), 6, "{pieces:?}");
        answers.insert(r.eval.unwrap().line, joined_text(&pieces));
    }
    assert_eq!(answers.len(), 12, "every question asked once");
    answers
}

/// A question set of the example's prompts: srv-sim's own answer where `right(line)`, else
/// one it never gives.
fn question_set(
    dir: &std::path::Path,
    answers: &BTreeMap<u32, String>,
    right: impl Fn(u32) -> bool,
) -> String {
    let text = std::fs::read_to_string(example()).unwrap();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let n = i as u32 + 1;
        let mut v: serde_json::Value = serde_json::from_str(line).unwrap();
        v["match"] = "exact".into();
        v["answer"] = if right(n) {
            answers[&n].clone()
        } else {
            "not srv-sim's".to_string()
        }
        .into();
        out.push_str(&format!("{v}\n"));
    }
    let path = dir.join("questions.jsonl");
    std::fs::write(&path, out).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn eval_accuracy_is_counted_exactly_and_each_record_carries_its_verdict() {
    let (_sim, url) = srv_sim(SIM);
    let answers = sims_answers(&url);
    let dir = tempfile::tempdir().unwrap();
    let wrong = [2, 7, 11];
    let set = question_set(dir.path(), &answers, |n| !wrong.contains(&n));
    // Cycled: 24 requests ask every question twice.
    let out = loadgen(&[
        "--url",
        &url,
        "-c",
        "4",
        "-n",
        "24",
        "--eval",
        &set,
        "--max-tokens",
        "6",
    ])
    .ok();
    for (i, line) in out.out().lines().enumerate() {
        in_the_schema(line, &format!("loadgen stdout:{}", i + 1));
    }
    let s = out.one::<SummaryRecord>();
    assert_eq!(s.workload.eval.as_deref(), Some(set.as_str()));
    let e = s.eval.expect("the summary carries the accuracy");
    assert_eq!((e.correct, e.judged, e.not_judged), (18, 24, 0));
    assert_eq!(e.accuracy, Some(0.75));
    for r in out.of::<RequestRecord>() {
        let v = r.eval.clone().unwrap();
        assert_eq!(
            v.line as u64,
            r.id % 12 + 1,
            "request id n asks question n % 12"
        );
        let want = if wrong.contains(&v.line) {
            Verdict::Wrong
        } else {
            Verdict::Correct
        };
        assert_eq!(v.verdict, want, "{r:?}");
        assert_eq!(v.got.as_deref(), Some(answers[&v.line].trim()));
    }
}

#[test]
fn answers_that_never_came_whole_are_not_judged_but_counted() {
    // Cancelled 5 ms after leaving, before srv-sim's first token at 20 ms: a quarter of 12.
    let (_sim, url) = srv_sim(SIM);
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
        "3",
        "--cancel-rate",
        "0.25",
        "--cancel-after",
        "5ms",
    ])
    .ok();
    let s = out.one::<SummaryRecord>();
    let e = s.eval.unwrap();
    assert_eq!((e.judged, e.not_judged, s.cancelled), (9, 3, 3));
    for r in out.of::<RequestRecord>() {
        let v = r.eval.clone().unwrap();
        assert_eq!(v.verdict == Verdict::NotJudged, r.is_cancelled(), "{r:?}");
    }
}

#[test]
fn record_text_keeps_every_replys_pieces_and_the_same_seed_gives_the_same_text() {
    let (_sim, url) = srv_sim(SIM);
    let run_with = |extra: &[&str]| {
        let mut args = vec![
            "--url",
            &url,
            "-c",
            "2",
            "-n",
            "6",
            "--prompts",
            "builtin",
            "--max-tokens",
            "5",
            "--seed",
            "9",
            "--record-text",
        ];
        args.extend_from_slice(extra);
        let out = loadgen(&args).ok();
        let mut texts: Vec<(u64, Vec<String>)> = out
            .of::<RequestRecord>()
            .into_iter()
            .map(|r| (r.id, r.output_pieces.expect("--record-text")))
            .collect();
        texts.sort();
        texts
    };
    let run = || run_with(&[]);
    let (a, b) = (run(), run());
    assert_eq!(a.len(), 6);
    assert!(
        a.iter()
            .all(|(_, p)| p.len() == 5 && p.iter().all(|w| !w.is_empty())),
        "{a:?}"
    );
    assert_eq!(a, b, "srv-sim answers a prompt the same under one seed");
    // A whole answer (--no-stream) is one piece: the same text.
    let whole = run_with(&["--no-stream"]);
    let joined = |t: &[(u64, Vec<String>)]| -> Vec<(u64, String)> {
        t.iter().map(|(id, p)| (*id, joined_text(p))).collect()
    };
    assert!(whole.iter().all(|(_, p)| p.len() == 1), "{whole:?}");
    assert_eq!(joined(&whole), joined(&a));
    // Without the flag, no text.
    let out = loadgen(&[
        "--url",
        &url,
        "-n",
        "2",
        "--prompts",
        "builtin",
        "--max-tokens",
        "3",
    ])
    .ok();
    assert!(
        out.of::<RequestRecord>()
            .iter()
            .all(|r| r.output_pieces.is_none())
    );
}

#[test]
fn a_bad_eval_line_is_one_error_naming_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.jsonl");
    std::fs::write(
        &path,
        "{\"prompt\":\"1+1=\",\"answer\":2}\n{\"prompt\":\"2+2=\"}\n",
    )
    .unwrap();
    let (_sim, url) = srv_sim(SIM);
    let out = loadgen(&["--url", &url, "--eval", path.to_str().unwrap()]);
    assert_eq!(out.code(), Some(2), "{}", out.err());
    let line = the_error_line(&out.err()).to_string();
    assert!(
        line.contains(&format!("{}:2: needs an \"answer\"", path.display())),
        "{line}"
    );
    // Sampled answers are not an eval.
    let out = loadgen(&["--url", &url, "--eval", &example(), "--temperature", "0.7"]);
    assert_eq!(out.code(), Some(2), "{}", out.err());
}
