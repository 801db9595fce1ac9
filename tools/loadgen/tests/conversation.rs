//! Conversations (`--turns`) end to end: the real binary against a capture server in this
//! process (which answers each request with text of its own, so a resent reply can be traced
//! to the request it answered) and against srv-sim.

mod server;

use serde_json::{Value, json};
use server::Behavior;
use std::time::Duration;
use testkit::of_kind;
use testkit::{loadgen, loadgen_ok, num};

/// The capture server's reply to a request: one word naming the request's own text, so a
/// reply found in a later prompt says which request it answered.
fn reply_word(body: &Value) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let prompt = body.get("messages").unwrap_or(&body["prompt"]).to_string();
    prompt.hash(&mut h);
    format!("r{:x}.", h.finish() & 0xffff_ffff)
}

/// What the capture server streamed for `body` with `max` tokens of one word per chunk.
fn reply_to(body: &Value, max: usize) -> String {
    reply_word(body).repeat(max)
}

fn capture_server() -> server::TestServer {
    server::start(Behavior {
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        role_first: true,
        reply: reply_word,
        // A server that says how much of the prompt it had cached: all but the newest turn.
        cached: |prompt_tokens| Some(prompt_tokens / 2),
        ..Behavior::default()
    })
}

#[test]
fn turn_k_prompt_holds_turns_1_to_k_minus_1_and_their_replies_chat() {
    let srv = capture_server();
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "--api",
        "chat",
        "-c",
        "2",
        "-n",
        "3",
        "--turns",
        "3",
        "--input-len",
        "12",
        "--max-tokens",
        "3",
    ])
    .values();
    let bodies = srv.generations();
    assert_eq!(bodies.len(), 9, "3 sessions of 3 turns");
    let mut by_turns = [0; 4];
    for b in &bodies {
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len() % 2, 1, "user, (assistant, user)*: {m:?}");
        let turn = m.len().div_ceil(2);
        by_turns[turn] += 1;
        assert_eq!(m.last().unwrap()["role"], "user");
        if turn == 1 {
            continue;
        }
        // The earlier turn is a request the server read, and the assistant message is exactly
        // what the server answered it.
        let (earlier, reply) = (&m[..m.len() - 2], &m[m.len() - 2]);
        let asked = bodies
            .iter()
            .find(|p| p["messages"].as_array().unwrap()[..] == *earlier)
            .unwrap_or_else(|| panic!("turn {turn} resends a history no request had: {m:?}"));
        assert_eq!(
            reply,
            &json!({"role": "assistant", "content": reply_to(asked, 3)}),
            "the reply is the server's own"
        );
        // A new user message every turn.
        let users: Vec<&Value> = m.iter().filter(|x| x["role"] == "user").collect();
        for (i, u) in users.iter().enumerate() {
            assert!(!users[i + 1..].contains(u), "turns repeat a message: {m:?}");
        }
    }
    assert_eq!(by_turns, [0, 3, 3, 3]);

    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 9);
    let mut seen = std::collections::BTreeSet::new();
    for r in &reqs {
        let (s, t) = (r["session"].as_u64().unwrap(), r["turn"].as_u64().unwrap());
        assert!(seen.insert((s, t)), "{r}");
        assert!((1..=3).contains(&t));
        let prompt = r["prompt_tokens"].as_u64().unwrap();
        assert_eq!(r["cached_tokens"].as_u64(), Some(prompt / 2), "{r}");
        // Turn 1 aims at --input-len; later turns hold the history, so no target.
        assert_eq!(r["prompt_tokens_target"].as_u64().is_some(), t == 1, "{r}");
    }
    assert_eq!(seen.len(), 9);
    let s = of_kind(&recs, "summary")[0];
    assert_eq!(s["workload"]["turns"], "3");
    assert_eq!(s["workload"]["sessions"], 3);
    assert_eq!(s["workload"]["think_time"], "0s");
    let by_turn = s["by_turn"].as_array().unwrap();
    assert_eq!(by_turn.len(), 3);
    let prompt_mean = |t: usize| by_turn[t]["prompt_tokens_mean"].as_f64().unwrap();
    assert!(
        prompt_mean(0) < prompt_mean(1) && prompt_mean(1) < prompt_mean(2),
        "the history grows: {by_turn:?}"
    );
    for t in by_turn {
        assert_eq!(t["requests"], 3);
        assert!(t["ttft_ms"]["n"] == 3 && t["cached_tokens_mean"].is_number());
    }
}

#[test]
fn completions_turns_continue_the_previous_prompt_and_its_reply() {
    let srv = capture_server();
    loadgen_ok(&[
        "--url",
        &srv.url(),
        "-c",
        "1",
        "-n",
        "2",
        "--turns",
        "2..4",
        "--input-len",
        "10",
        "--max-tokens",
        "2",
        "--seed",
        "3",
    ])
    .values();
    let bodies = srv.generations();
    let prompt = |b: &Value| b["prompt"].as_str().unwrap().to_string();
    // The server counts a BOS token besides the words: 9 words make the 10 tokens asked for.
    let words = prompt(&bodies[0]).split(' ').count();
    assert_eq!(words, 9);
    let mut later = 0;
    for b in &bodies {
        let p = prompt(b);
        // Turn k's prompt begins with turn k-1's whole prompt (the longest earlier prompt it
        // begins with) and the reply to it.
        if let Some(prev) = bodies
            .iter()
            .filter(|q| {
                let q = prompt(q);
                q.len() < p.len() && p.starts_with(&q)
            })
            .max_by_key(|q| prompt(q).len())
        {
            let head = format!("{}{}\n\n", prompt(prev), reply_to(prev, 2));
            assert!(p.starts_with(&head), "{p:?} does not continue {head:?}");
            assert_eq!(p[head.len()..].split(' ').count(), words, "a new user turn");
            later += 1;
        }
    }
    assert_eq!(bodies.len() - later, 2, "two sessions, each one first turn");
    assert!(bodies.len() >= 4 && bodies.len() <= 8, "2..4 turns each");
}

/// Each turn after the first is meant to leave --think-time after the reply before it ended,
/// and its latency counts from then; sessions (not requests) fill the -c slots.
#[test]
fn think_time_separates_turns_and_sessions_fill_the_slots() {
    let srv = capture_server();
    let recs = loadgen_ok(&[
        "--url",
        &srv.url(),
        "-c",
        "2",
        "-n",
        "4",
        "--turns",
        "2",
        "--think-time",
        "150ms",
        "--input-len",
        "8",
        "--max-tokens",
        "2",
    ])
    .values();
    let reqs = of_kind(&recs, "request");
    assert_eq!(reqs.len(), 8);
    let mut spans = Vec::new();
    for s in 0..4u64 {
        let turn = |t: u64| {
            *reqs
                .iter()
                .find(|r| r["session"] == s && r["turn"] == t)
                .unwrap()
        };
        let (one, two) = (turn(1), turn(2));
        let gap = num(two, "intended_ms") - (num(one, "intended_ms") + num(one, "e2e_ms"));
        // The reply's end (after its last content chunk) plus exactly the think time. (A closed
        // loop's first sends may precede the point's start by its 1 ms head start, where their
        // intended_ms reads 0: hence the slack below 150.)
        assert!((148.5..400.0).contains(&gap), "think gap {gap} ms");
        spans.push((
            num(one, "intended_ms"),
            num(two, "intended_ms") + num(two, "e2e_ms"),
        ));
    }
    // At most two sessions at any moment: a third starts only when one has ended.
    for &(start, _) in &spans {
        let open = spans
            .iter()
            .filter(|&&(a, b)| a <= start && start < b - 1.0)
            .count();
        assert!(open <= 2, "{open} sessions at {start} ms: {spans:?}");
    }
}

#[test]
fn a_conversations_file_gives_its_user_turns_in_order() {
    let srv = capture_server();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("chats.json");
    std::fs::write(
        &file,
        r#"[{"conversations":[{"from":"human","value":"What is a prefix cache?"},{"from":"gpt","value":"..."},{"from":"human","value":"And its hit rate?"}]}]"#,
    )
    .unwrap();
    loadgen_ok(&[
        "--url",
        &srv.url(),
        "--api",
        "chat",
        "-n",
        "1",
        "--turns",
        "all",
        "--prompts",
        file.to_str().unwrap(),
        "--max-tokens",
        "2",
    ])
    .values();
    let bodies = srv.generations();
    assert_eq!(bodies.len(), 2);
    let m = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(m[0]["content"], "What is a prefix cache?");
    assert_eq!(m[1]["content"], reply_to(&bodies[0], 2));
    assert_eq!(m[2]["content"], "And its hit rate?");
}

#[test]
fn conversations_refuse_what_they_cannot_run() {
    for (args, want) in [
        (&["--turns", "0"][..], "at least 1"),
        (&["--turns", "3", "--ramp"], "--ramp"),
        (&["--think-time", "1s"], "--turns"),
        (&["--turns", "3", "--prompts", "builtin"], "--turns needs"),
    ] {
        let out = loadgen(&[&["--url", "http://127.0.0.1:9"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

/// srv-sim: the history sent is the history counted (its prompt tokens grow by each turn's
/// message and reply), and the prompt lengths of turn 1 are exact.
#[test]
fn conversations_against_srv_sim_count_the_whole_history() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "5ms", "--itl", "1ms"]);
    for api in ["chat", "completions"] {
        let recs = loadgen_ok(&[
            "--url",
            &url,
            "--api",
            api,
            "-c",
            "2",
            "-n",
            "2",
            "--turns",
            "3",
            "--input-len",
            "20",
            "--max-tokens",
            "4",
        ])
        .values();
        for r in of_kind(&recs, "request") {
            let t = r["turn"].as_u64().unwrap();
            // srv-sim counts words: 20 per user turn, 4 per reply.
            assert_eq!(
                r["prompt_tokens"].as_u64(),
                Some(20 * t + 4 * (t - 1)),
                "{api}: {r}"
            );
        }
        let s = of_kind(&recs, "summary")[0];
        assert_eq!(s["prompt_len_exact"], 2, "{api}: turn 1 of each session");
        assert_eq!(s["ok"], 6);
    }
}

/// `--no-stream` conversations resend the reply too: the whole answer's content goes into the
/// next turn's history as the stream's chunks would (it went in empty), and the answer's
/// cached-token count is recorded.
#[test]
fn no_stream_conversations_resend_the_reply_and_record_cached_tokens() {
    let (_sim, url) = testkit::srv_sim(&[
        "--ttft",
        "1ms",
        "--itl",
        "0",
        "--enable-prompt-tokens-details",
    ]);
    let turns = |extra: &[&str]| -> Vec<(u64, u64, Option<u64>)> {
        let args = [
            &["--url", &url, "--api", "chat", "-c", "1", "-n", "1"][..],
            &["--turns", "2", "--input-len", "40", "--max-tokens", "4"],
            extra,
        ]
        .concat();
        let records = loadgen_ok(&args).values();
        let mut t: Vec<_> = of_kind(&records, "request")
            .iter()
            .map(|r| {
                (
                    r["turn"].as_u64().unwrap(),
                    r["prompt_tokens"].as_u64().unwrap(),
                    r["cached_tokens"].as_u64(),
                )
            })
            .collect();
        t.sort_unstable();
        t
    };
    let streamed = turns(&[]);
    let whole = turns(&["--no-stream"]);
    assert_eq!(streamed.len(), 2, "{streamed:?}");
    // Turn 2 holds turn 1's 40 words, its 4-word reply and 40 new words.
    assert_eq!(streamed[1].1, whole[1].1, "{streamed:?} vs {whole:?}");
    assert!(whole[1].1 >= 84, "{whole:?}");
    assert!(whole.iter().all(|t| t.2.is_some()), "{whole:?}");
}
