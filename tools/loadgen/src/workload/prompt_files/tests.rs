use super::*;

fn write(name: &str, text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    let p = p.to_str().unwrap().to_string();
    (dir, p)
}

#[test]
fn prompt_files() {
    let (_d, p) = write(
        "p.jsonl",
        "{\"prompt\":\"a\",\"max_tokens\":5}\n\n{\"messages\":[{\"role\":\"user\",\"content\":\"b\"}]}\n",
    );
    let got = read_prompts_file(&p).unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].max_tokens, Some(5));
    assert!(matches!(got[1].prompt, PromptText::Messages(_)));
    let (_d, p) = write("p.jsonl", "{\"text\":\"a\"}\n");
    assert!(read_prompts_file(&p).unwrap_err().contains("p.jsonl:1:"));
}

#[test]
fn a_prompts_max_tokens_that_is_not_a_token_count_is_refused_naming_the_line() {
    for bad in ["4294967297", "4294967296", "-5", "2.9", "0", "\"8\""] {
        let (_d, p) = write(
            "p.jsonl",
            &format!("{{\"prompt\":\"a\"}}\n{{\"prompt\":\"a b c\",\"max_tokens\":{bad}}}\n"),
        );
        let e = parse_prompts(&p).unwrap_err();
        assert!(
            e.contains("p.jsonl:2:") && e.contains("not a token count"),
            "{bad}: {e}"
        );
    }
    let (_d, p) = write("p.jsonl", "{\"prompt\":\"a\",\"max_tokens\":4294967295}\n");
    assert_eq!(parse_prompts(&p).unwrap().0[0].max_tokens, Some(u32::MAX));
}

#[test]
fn sharegpt_prompts_ask_for_the_replys_length_and_skipped_entries_are_counted() {
    let (_d, p) = write(
        "s.json",
        r#"[{"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"abcdefghij"}]},
            {"conversations":[]},
            {"conversations":[{"role":"user","content":"q2"},{"role":"assistant","content":"abcd"}]},
            {"conversations":[{"from":"system","value":"s"},{"from":"human","value":"q3"}]},
            {"id":"no turns"}]"#,
    );
    let (got, note) = parse_prompts(&p).unwrap();
    let want = |text: &str, max| Entry {
        prompt: PromptText::Text(text.into()),
        max_tokens: max,
    };
    assert_eq!(
        got,
        vec![want("q1", Some(3)), want("q2", Some(1)), want("q3", None)]
    );
    let note = note.unwrap();
    assert!(note.contains("2 of 5 entries skipped"), "{note}");
    // ShareGPT entries as JSON lines read the same.
    let (_d, p) = write(
        "s.jsonl",
        "{\"conversations\":[{\"from\":\"human\",\"value\":\"q\"},{\"from\":\"gpt\",\"value\":\"12345\"}]}\n",
    );
    assert_eq!(parse_prompts(&p).unwrap().0, vec![want("q", Some(2))]);
}

#[test]
fn conversation_files_keep_the_user_turns_in_order() {
    let (_d, sg) = write(
        "s.json",
        r#"[{"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"}]},
            {"conversations":[{"from":"gpt","value":"only a reply"}]},
            {"conversations":[{"role":"user","content":"r1"},{"role":"assistant","content":"x"},{"role":"user","content":"r2"}]}]"#,
    );
    assert_eq!(
        read_conversations(&sg).unwrap(),
        vec![
            vec!["q1".to_string(), "q2".to_string()],
            vec!["r1".to_string(), "r2".to_string()]
        ]
    );
    let (_d, jl) = write(
        "m.jsonl",
        "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"x\"},{\"role\":\"user\",\"content\":\"b\"}]}\n",
    );
    assert_eq!(
        read_conversations(&jl).unwrap(),
        vec![vec!["a".to_string(), "b".to_string()]]
    );
    let (_d, jl) = write("m.jsonl", "{\"prompt\":\"a\"}\n");
    let e = read_conversations(&jl).unwrap_err();
    assert!(e.contains("m.jsonl:1:"), "{e}");
}

#[test]
fn an_endless_prompts_file_is_one_error_naming_it() {
    let e = parse_prompts("/dev/zero").unwrap_err();
    assert!(e.contains("/dev/zero:1") && e.contains("64 MiB"), "{e}");
}
