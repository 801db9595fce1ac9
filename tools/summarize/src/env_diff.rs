//! `--compare`'s first table: what differs between the environments of the two runs' servers
//! (srv-launch's `server` records: engine version, GPUs, driver, CUDA, kernel, CPU, host, and
//! the flags the engine was launched with), so a difference in the figures below can be
//! traced to what changed. Nothing when neither side carries a server record.

use crate::table::{Cell, Column, Table};
use servbench::record::ServerRecord;
use std::collections::BTreeSet;

/// Flags whose value differs on every launch and says nothing about the setup.
const IGNORED_FLAGS: [&str; 2] = ["--port", "--host"];

/// The differences between the first server record of each side, as a table; `None` when
/// either side has none or nothing differs.
pub fn table(base: &[ServerRecord], new: &[ServerRecord]) -> Option<Table> {
    let (b, n) = (base.first()?, new.first()?);
    let (be, ne) = (
        b.env.clone().unwrap_or_default(),
        n.env.clone().unwrap_or_default(),
    );
    let fields: [(&str, Option<String>, Option<String>); 10] = [
        ("engine", Some(b.engine.clone()), Some(n.engine.clone())),
        ("engine version", be.engine_version, ne.engine_version),
        ("model", b.model.clone(), n.model.clone()),
        ("GPU model", be.gpu_model, ne.gpu_model),
        (
            "GPUs",
            be.gpu_count.map(|c| c.to_string()),
            ne.gpu_count.map(|c| c.to_string()),
        ),
        ("driver", be.driver_version, ne.driver_version),
        ("CUDA", be.cuda_version, ne.cuda_version),
        ("kernel", be.kernel, ne.kernel),
        ("CPU", be.cpu_model, ne.cpu_model),
        ("host", be.hostname, ne.hostname),
    ];
    let mut t = Table::new(
        "environment differences",
        vec![
            Column {
                name: "what".into(),
                header: "what".into(),
            },
            Column {
                name: "base".into(),
                header: "base".into(),
            },
            Column {
                name: "new".into(),
                header: "new".into(),
            },
        ],
    );
    let text = |v: &Option<String>| Cell::Text(v.clone().unwrap_or_else(|| "-".into()));
    for (what, x, y) in &fields {
        if x != y {
            t.push(vec![Cell::Text(what.to_string()), text(x), text(y)], 0);
        }
    }
    let (fb, fnew) = (flags(&b.argv), flags(&n.argv));
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Option<String> {
        let d: Vec<&str> = a.difference(b).map(String::as_str).collect();
        (!d.is_empty()).then(|| d.join(" "))
    };
    let (ob, on) = (only(&fb, &fnew), only(&fnew, &fb));
    if ob.is_some() || on.is_some() {
        t.push(vec![Cell::Text("flags".into()), text(&ob), text(&on)], 0);
    }
    (!t.rows.is_empty()).then_some(t)
}

/// The flags of an argv, each with its value (`--tp 4`, `--enforce-eager`), the program and
/// per-launch flags left out.
fn flags(argv: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i];
        if !a.starts_with('-') {
            out.insert(a.clone());
            i += 1;
            continue;
        }
        let name = a.split('=').next().unwrap_or(a);
        let takes_value = !a.contains('=') && argv.get(i + 1).is_some_and(|v| !v.starts_with('-'));
        let flag = if takes_value {
            format!("{a} {}", argv[i + 1])
        } else {
            a.clone()
        };
        if !IGNORED_FLAGS.contains(&name) {
            out.insert(flag);
        }
        i += if takes_value { 2 } else { 1 };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_pair_with_their_values() {
        let argv: Vec<String> = [
            "vllm",
            "serve",
            "m",
            "--tp",
            "4",
            "--enforce-eager",
            "--port",
            "8000",
            "--x=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let f = flags(&argv);
        assert!(f.contains("--tp 4") && f.contains("--enforce-eager") && f.contains("--x=1"));
        assert!(!f.iter().any(|s| s.starts_with("--port")));
    }
}
