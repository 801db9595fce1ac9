//! Kill only what is ours, tested where ids can be forced to repeat: a private pid namespace
//! (`unshare -p -f --mount-proc`, as root), whose init is a shell running the scenario, with a
//! stranger process that must survive. Everything left in the namespace dies with its init
//! when the scenario ends.

use std::process::{Command, Output, Stdio};
use testkit::{bin, json_lines};

/// Runs `script` with `sh` as pid 1 of a new pid namespace; `$SRV_KILL` is the binary.
fn in_pid_namespace(script: &str) -> Output {
    let out = Command::new("unshare")
        .args(["-p", "-f", "--mount-proc", "sh", "-c", script])
        .env("SRV_KILL", bin("srv-kill"))
        .stdin(Stdio::null())
        .output()
        .expect("run unshare (util-linux)");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("unshare failed"),
        "these tests need root for a private pid namespace: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `name=value` lines the scenario printed.
fn report(out: &Output, name: &str) -> Option<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")).map(str::to_string))
}

/// Shell for a server record of pid `$1` (group and session `$2`, start ticks `$3`, launch id
/// `$4`) written to the file `$5`.
const WRITE_RECORD: &str = r#"
record() {
  printf '{"kind":"server","v":1,"ts":"2026-11-30T00:00:00.000Z","labels":{},"engine":"cmd","host":"localhost","pid":%s,"pgid":%s,"start_ticks":%s,"port":0,"url":"http://127.0.0.1:1","command":"x","log":"/dev/null","ready_s":0.1,"launch_id":"%s"}\n' "$1" "$2" "$3" "$4" > "$5"
}
ticks() { sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f20; }
"#;

#[test]
fn a_server_record_naming_pid_1_is_refused_like_pid_1_and_its_descendants_live() {
    let dir = tempfile::tempdir().unwrap();
    let script = format!(
        r#"{WRITE_RECORD}
sleep 60 & stranger=$!
record 1 1 "$(ticks 1)" x {dir}/init.jsonl
"$SRV_KILL" --from {dir}/init.jsonl --dry-run > {dir}/dry.out 2>/dev/null; echo "dry_rc=$?"
"$SRV_KILL" --from {dir}/init.jsonl --grace 1s > {dir}/kill.out 2> {dir}/kill.err; echo "rc=$?"
sleep 0.3
kill -0 $stranger 2>/dev/null && echo stranger=alive
"#,
        dir = dir.path().display()
    );
    let out = in_pid_namespace(&script);
    let err = std::fs::read_to_string(dir.path().join("kill.err")).unwrap_or_default();
    assert_eq!(report(&out, "rc").as_deref(), Some("1"), "{err}");
    assert_eq!(
        report(&out, "stranger").as_deref(),
        Some("alive"),
        "init's child was killed: {err}"
    );
    for file in ["dry.out", "kill.out"] {
        let recs = json_lines(&std::fs::read(dir.path().join(file)).unwrap());
        assert_eq!(recs.len(), 1, "{file}");
        assert_eq!(recs[0]["ok"], false, "{file}: {}", recs[0]);
        assert_eq!(recs[0]["matched"], serde_json::json!([]), "{file}");
        assert_eq!(
            recs[0]["error"], "refused: the server record's pid 1 is init: not signalled",
            "{file}"
        );
    }
    assert_eq!(report(&out, "dry_rc").as_deref(), Some("1"));
}

#[test]
fn a_server_record_naming_srv_kills_caller_is_refused_and_the_callers_child_lives() {
    let dir = tempfile::tempdir().unwrap();
    // The caller: a shell (not init) with a child of its own, which must live.
    let caller = dir.path().join("caller.sh");
    std::fs::write(
        &caller,
        format!(
            r#"{WRITE_RECORD}
sleep 60 & child=$!
record $$ $$ "$(ticks $$)" x {dir}/caller.jsonl
"$SRV_KILL" --from {dir}/caller.jsonl --grace 1s > {dir}/caller.out 2>&1; echo "rc=$?"
sleep 0.3
kill -0 $child 2>/dev/null && echo child=alive
"#,
            dir = dir.path().display()
        ),
    )
    .unwrap();
    let out = in_pid_namespace(&format!("sh {}", caller.display()));
    let caller_out = std::fs::read_to_string(dir.path().join("caller.out")).unwrap_or_default();
    assert_eq!(report(&out, "rc").as_deref(), Some("1"), "{caller_out}");
    assert!(
        caller_out.contains("the server record's pid")
            && caller_out.contains("is one of srv-kill's callers"),
        "{caller_out}"
    );
    assert_eq!(
        report(&out, "child").as_deref(),
        Some("alive"),
        "the caller's child was killed: {caller_out}"
    );
}

#[test]
fn a_reused_group_id_without_a_member_that_proves_it_is_nothing_matched_and_the_stranger_lives() {
    let dir = tempfile::tempdir().unwrap();
    // The server leads its own session and group P, and is gone; then a stranger is forced to
    // get pid P (ns_last_pid), leaves a child in group and session P, and exits, so that no
    // process has pid P but one has group P, started after the record's time.
    let script = format!(
        r#"{WRITE_RECORD}
setsid sleep 60 & server=$!
sleep 0.1
record $server $server "$(ticks $server)" launch-that-is-gone {dir}/server.jsonl
kill $server; wait $server 2>/dev/null
echo $((server - 1)) > /proc/sys/kernel/ns_last_pid
setsid sh -c 'sleep 60 & echo $! > {dir}/stranger' & wait $!
stranger=$(cat {dir}/stranger)
echo "stranger_group=$(sed 's/.*) //' /proc/$stranger/stat | cut -d' ' -f3)"
echo "server=$server"
[ -e /proc/$server ] && echo server_pid_taken=yes
"$SRV_KILL" --from {dir}/server.jsonl --grace 1s > {dir}/kill.out 2> {dir}/kill.err; echo "rc=$?"
sleep 0.3
kill -0 $stranger 2>/dev/null && echo stranger=alive
"#,
        dir = dir.path().display()
    );
    let out = in_pid_namespace(&script);
    let err = std::fs::read_to_string(dir.path().join("kill.err")).unwrap_or_default();
    let server = report(&out, "server").expect("scenario ran");
    assert_eq!(
        report(&out, "stranger_group"),
        Some(server.clone()),
        "the stranger did not get the server's group id: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(report(&out, "server_pid_taken"), None);
    assert_eq!(report(&out, "rc").as_deref(), Some("1"), "{err}");
    assert!(err.contains("nothing matched"), "{err}");
    assert_eq!(
        report(&out, "stranger").as_deref(),
        Some("alive"),
        "a stranger in a reused group was killed: {err}"
    );
    let recs = json_lines(&std::fs::read(dir.path().join("kill.out")).unwrap());
    assert_eq!(recs[0]["matched"], serde_json::json!([]));
    assert_eq!(recs[0]["ok"], false);
}

#[test]
fn a_group_whose_leader_is_gone_is_still_killed_through_a_worker_carrying_the_launch_marker() {
    let dir = tempfile::tempdir().unwrap();
    // A launch: the leader starts a marked worker and an unmarked one (env cleared) in its
    // group, then exits. The marked worker proves the group, so both are ours.
    let script = format!(
        r#"{WRITE_RECORD}
export SERVBENCH_LAUNCH_ID=launch-42
setsid sh -c 'sleep 60 & echo $! > {dir}/marked; env -u SERVBENCH_LAUNCH_ID sleep 60 & echo $! > {dir}/unmarked; sleep 1' &
leader=$!
sleep 0.3
record $leader $leader "$(ticks $leader)" launch-42 {dir}/server.jsonl
unset SERVBENCH_LAUNCH_ID
sleep 60 & outsider=$!
wait $leader
[ -e /proc/$leader ] && echo leader=still-there
"$SRV_KILL" --from {dir}/server.jsonl --grace 1s > {dir}/kill.out 2> {dir}/kill.err; echo "rc=$?"
sleep 0.3
for w in marked unmarked; do kill -0 "$(cat {dir}/$w)" 2>/dev/null && echo "$w=alive"; done
kill -0 $outsider 2>/dev/null && echo outsider=alive
"#,
        dir = dir.path().display()
    );
    let out = in_pid_namespace(&script);
    let err = std::fs::read_to_string(dir.path().join("kill.err")).unwrap_or_default();
    assert_eq!(report(&out, "leader"), None, "the leader was not reaped");
    assert_eq!(report(&out, "rc").as_deref(), Some("0"), "{err}");
    assert_eq!(report(&out, "marked"), None, "the marked worker lives");
    assert_eq!(
        report(&out, "unmarked"),
        None,
        "the group's unmarked worker lives"
    );
    assert_eq!(report(&out, "outsider").as_deref(), Some("alive"));
    let recs = json_lines(&std::fs::read(dir.path().join("kill.out")).unwrap());
    assert_eq!(recs[0]["ok"], true, "{}", recs[0]);
    assert_eq!(recs[0]["matched"].as_array().unwrap().len(), 2);
}
