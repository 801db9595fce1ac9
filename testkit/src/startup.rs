//! What every test of srv-launch's startup phases checks of a `server` record.

use serde_json::Value;

/// The record's `startup`: its `ready_s` is the record's, each phase of `want` is there (and
/// no other), in the order given, each seen at or after the one before and no later than
/// ready; returns the phases as `(name, at_s, took_s)`.
pub fn startup_phases(record: &Value, want: &[&str]) -> Vec<(String, f64, Option<f64>)> {
    let startup = &record["startup"];
    let ready_s = record["ready_s"].as_f64().expect("ready_s");
    assert_eq!(startup["ready_s"].as_f64(), Some(ready_s), "{record}");
    let phases: Vec<(String, f64, Option<f64>)> = startup["phases"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().expect("a phase name").to_string(),
                p["at_s"].as_f64().expect("a phase's at_s"),
                p["took_s"].as_f64(),
            )
        })
        .collect();
    let names: Vec<&str> = phases.iter().map(|p| p.0.as_str()).collect();
    assert_eq!(names, want, "{startup}");
    let mut before = 0.0;
    for (name, at_s, took_s) in &phases {
        assert!(
            *at_s >= before && *at_s <= ready_s,
            "{name} at {at_s} s: not between the phase before ({before} s) and ready ({ready_s} s): {startup}"
        );
        assert!(
            took_s.is_none_or(|t| t.is_finite() && t >= 0.0),
            "{startup}"
        );
        before = *at_s;
    }
    phases
}
