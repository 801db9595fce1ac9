//! Engine arguments that look like secrets (`--api-key X`, `--token X`, `OPENAI_API_KEY=X`)
//! are redacted in the `server` record, on stderr and in srv-kill's records; look-alikes such
//! as `--max-tokens` are not.

use testkit::{json_lines, kill_records, sh};

#[test]
fn secret_engine_arguments_are_redacted_in_the_server_record_and_srv_kills_output() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("server.jsonl");
    // `; :` keeps the shell (and its command line, with every argument) alive beside python.
    let launch = sh(&format!(
        "srv-launch -v --cmd 'python3 -m http.server {{port}} --bind 127.0.0.1; : --api-key sk-live-123' \
         --ready-url 'http://127.0.0.1:{{port}}/' -- --token tok-456 OPENAI_API_KEY=sk-789 --max-tokens 16 > {}",
        rec.display()
    ));
    let launch_err = String::from_utf8_lossy(&launch.stderr).into_owned();
    assert!(launch.status.success(), "{launch_err}");
    let record = std::fs::read_to_string(&rec).unwrap();
    let dry = sh(&format!("srv-kill --from {} --dry-run", rec.display()));
    let kill = sh(&format!("srv-kill --from {} --grace 2s", rec.display()));
    assert!(
        kill.status.success(),
        "{}",
        String::from_utf8_lossy(&kill.stderr)
    );

    let server = &json_lines(record.as_bytes())[0];
    assert_eq!(
        server["command"],
        "python3 -m http.server ".to_string()
            + &server["port"].to_string()
            + " --bind 127.0.0.1; : --api-key ***"
    );
    let killed = &kill_records(&kill.stdout)[0];
    let commands: Vec<&str> = killed["matched"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["command"].as_str().unwrap())
        .collect();
    assert!(
        commands
            .iter()
            .any(|c| c.contains("--token *** OPENAI_API_KEY=*** --max-tokens 16")),
        "{commands:?}"
    );
    let everything = [
        launch_err.as_str(),
        &record,
        &String::from_utf8_lossy(&dry.stdout),
        &String::from_utf8_lossy(&dry.stderr),
        &String::from_utf8_lossy(&kill.stdout),
        &String::from_utf8_lossy(&kill.stderr),
    ]
    .concat();
    for secret in ["sk-live-123", "tok-456", "sk-789"] {
        assert!(
            !everything.contains(secret),
            "{secret} leaked: {everything}"
        );
    }
    assert!(String::from_utf8_lossy(&dry.stderr).contains("would kill"));
}
