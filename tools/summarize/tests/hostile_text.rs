//! Text from outside (labels, targets, a server's error message, an input excerpt) reaches a
//! terminal through summarize's tables and its warnings: control characters are escaped, so a
//! record cannot clear the screen, retitle the terminal, ring the bell or fake a line.

use std::io::Write;
use std::process::Stdio;

const HOSTILE: &str = concat!(
    r#"{"kind":"server","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{"run":"a\u001b[2Jb"},"engine":"sim\u0007","host":"localhost","pid":5,"pgid":5,"start_ticks":1,"port":0,"url":"http://127.0.0.1:1","command":"x","log":"/dev/null","ready_s":0.1}"#,
    "\n",
    r#"{"kind":"kill","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{},"target":"server \u001b]0;owned\u0007","host":"h","matched":[],"signals":[],"survivors":[],"elapsed_s":0.1,"ok":false,"error":"boom\nsummarize: fake line"}"#,
    "\n",
    "not json \u{1b}[31mred\u{1b}[0m\n",
);

fn summarize(args: &[&str]) -> std::process::Output {
    let mut child = testkit::cmd("summarize")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(HOSTILE.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// No control byte but the line ends.
fn assert_clean(what: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    assert!(
        !bytes.iter().any(|b| *b < 0x20 && *b != b'\n' || *b == 0x7f),
        "{what} carries control characters: {text:?}"
    );
}

#[test]
fn control_characters_in_records_are_escaped_in_tables_and_warnings() {
    for format in ["text", "md"] {
        let out = summarize(&["--format", format]);
        assert_eq!(out.status.code(), Some(0), "{format}");
        assert_clean(format, &out.stdout);
        assert_clean("stderr", &out.stderr);
        let text = String::from_utf8_lossy(&out.stdout);
        for escaped in [
            "sim\\x07",
            "server \\x1b]0;owned\\x07",
            "boom\\nsummarize: fake line",
        ] {
            assert!(text.contains(escaped), "{format}: no {escaped} in {text}");
        }
        assert!(
            !text.lines().any(|l| l.starts_with("summarize: fake line")),
            "{format}: {text}"
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("stdin:3") && err.contains("not json \\x1b[31mred\\x1b[0m"),
            "{err}"
        );
    }
}
