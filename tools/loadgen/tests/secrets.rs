//! An API key is never silently dropped nor echoed: one with a line break (a pasting mistake
//! no header can carry) is refused with one line before any request.

use std::process::Stdio;

#[test]
fn an_api_key_with_a_line_break_is_refused_with_one_line_and_not_echoed() {
    let secret = "sk-live-4711";
    for (how, key) in [
        ("--api-key", format!("{secret}\r\n")),
        ("env", format!("{secret}\nX")),
    ] {
        let mut c = testkit::cmd("loadgen");
        // Port 9 (discard) on loopback: nothing must be sent anyway.
        c.args(["--url", "http://127.0.0.1:9", "-n", "1"]);
        if how == "env" {
            c.env("OPENAI_API_KEY", &key);
        } else {
            c.env_remove("OPENAI_API_KEY").args(["--api-key", &key]);
        }
        let out = c.stdin(Stdio::null()).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{how}: {err}");
        assert_eq!(err.lines().count(), 1, "{how}: one line: {err}");
        assert!(
            err.starts_with(
                "loadgen: error: --api-key (or OPENAI_API_KEY): the key holds a line break"
            ),
            "{how}: {err}"
        );
        assert!(!err.contains(secret), "{how}: the key was echoed: {err}");
        assert!(out.stdout.is_empty(), "{how}");
    }
}
