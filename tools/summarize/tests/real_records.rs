//! Real tools' records (srv-launch and srv-kill, collbench, a loadgen ramp) become summarize's
//! tables.

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use testkit::ok;

#[test]
fn real_launch_and_kill_records_become_status_tables() {
    let text = ok(&summarize(&["launch_kill.jsonl"]));
    assert!(
        text.contains("# servers") && text.contains("llama-3.1-8b"),
        "{text}"
    );
    assert!(text.contains("# kills") && text.contains("TERM"), "{text}");
    let kill_row = text.lines().last().unwrap();
    assert!(kill_row.ends_with("ok"), "{text}");
}

/// Real collbench output: `collbench -np 2 -b 8 -e 4M -f 4` (tcp) and `collbench decode --model
/// llama-3.1-8b --tp 2 --batch 1,8,32 --hardware h100` (coll branch 449913d).
#[test]
fn real_collbench_records_become_the_collectives_and_decode_tables() {
    let text = ok(&summarize(&["collbench_tcp.jsonl", "--hardware", "h100"]));
    assert!(
        text.contains("# collectives: link=NVLink 4 via NVSwitch (HGX 8-GPU): nvswitch 370 GB/s"),
        "{text}"
    );
    assert_eq!(
        text.lines().filter(|l| l.starts_with("allreduce")).count(),
        10,
        "{text}"
    );
    assert!(text.contains("every result checked OK"), "{text}");
    let out = summarize(&["collbench_decode.jsonl"]);
    let text = ok(&out);
    assert!(text.contains("# decode allreduce budget"), "{text}");
    assert_eq!(text.matches("note: batch ").count(), 3, "{text}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ignored"));
}

/// Real `loadgen --ramp -c 1 -n 32 --max-tokens 16 --input-len 32
/// --no-requests` against `srv-sim --ttft 5ms --itl 1ms --max-running-requests 8`.
#[test]
fn a_real_ramp_shows_its_levels_its_outcome_and_the_knee() {
    let out = summarize(&["loadgen_ramp.jsonl"]);
    let text = ok(&out);
    assert!(
        text.contains("# ramps") && text.contains("saturated"),
        "{text}"
    );
    assert!(text.contains("note: ramp stopped: output"), "{text}");
    assert!(text.contains("saturation knee at C=8"), "{text}");
    // loadgen's best level and summarize's knee are the same point.
    let ramp_row = text
        .lines()
        .skip_while(|l| !l.starts_with("# ramps"))
        .nth(2)
        .unwrap_or_default();
    let cells: Vec<&str> = ramp_row.split_whitespace().collect();
    assert_eq!(cells.get(5), Some(&"8"), "best C in: {ramp_row}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("ignored"));
}
