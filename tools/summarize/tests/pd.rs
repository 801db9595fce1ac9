//! A disaggregated (P/D) run's TTFT by role: the note names each role's part and what limits
//! the point, on a real run (tests/fixtures/pd_ttft_by_role.jsonl: srv-sim prefill, decode
//! and proxy over a 2 GB/s link, so the KV transfer outweighs the prefill).

#[path = "support/fixtures.rs"]
mod fixtures;

use fixtures::*;
use summarize::notes::note::Facts;
use summarize::notes::pd::{PdPart, PdSplit, ttft_by_role};

#[test]
fn a_slow_link_is_named_as_what_limits_a_p_d_ttft() {
    let ps = points("pd_ttft_by_role.jsonl");
    let notes = ttft_by_role(&Facts::of_points(&ps));
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = &notes[0];
    assert!(
        note.starts_with("P/D TTFT at C=1: 160 ms = prefill servers"),
        "{note}"
    );
    assert!(note.contains("KV transfer 99.6 ms"), "{note}");
    assert!(
        note.ends_with("KV transfer is 62% of TTFT at C=1: the link, not the prefill, limits"),
        "{note}"
    );
    let s = PdSplit::of(&ps[0]).unwrap();
    let parts = s.prefill_queue + s.prefill + s.transfer + s.decode_queue + s.first_decode;
    assert!((parts + s.outside - s.client).abs() < 1e-6, "{s:?}");
    assert_eq!(s.limit().0, PdPart::Transfer);
    // The printed run says it too.
    let text = testkit::ok(&summarize(&["pd_ttft_by_role.jsonl"]).output);
    assert!(text.contains("the link, not the prefill, limits"), "{text}");
}
