//! collbench p2p's pair records as nvbandwidth's matrices: a row per source rank, a column per
//! destination, `-` on the diagonal; one table each for the bandwidth one way, both ways and
//! the latency, a block of rows per run (backend, or on the nccl backend the method: copy engine
//! or NCCL; ranks; message size).

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::{P2pMethod, P2pRecord};
use std::collections::{BTreeMap, BTreeSet};

/// The p2p matrices.
pub fn section(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.p2p.as_slice() {
        [] => Vec::new(),
        pairs => tables(pairs),
    }
}

/// One run's matrix: backend (with its labels), ranks, message bytes.
type RunKey = (String, u32, u64);

/// Reads one figure of a pair.
type Figure = fn(&P2pRecord) -> Cell;

/// The three matrices (`p2p unidirectional GB/s`, `p2p bidirectional GB/s`, `p2p latency us`),
/// and where records carry it, a fourth of each pair's `nvidia-smi topo -m` link.
pub fn tables(pairs: &[P2pRecord]) -> Vec<Table> {
    let figures: [(&str, Figure); 3] = [
        ("p2p unidirectional GB/s", |p| Cell::num(Some(p.uni_gbps))),
        ("p2p bidirectional GB/s", |p| Cell::num(Some(p.bidir_gbps))),
        ("p2p latency us (half an 8-byte round trip)", |p| {
            Cell::num(Some(p.latency_us))
        }),
    ];
    let mut out: Vec<Table> = figures
        .iter()
        .map(|(title, get)| matrix(title, pairs, *get))
        .collect();
    let linked: Vec<P2pRecord> = pairs.iter().filter(|p| p.link.is_some()).cloned().collect();
    if !linked.is_empty() {
        out.push(matrix("p2p link (nvidia-smi topo -m)", &linked, |p| {
            Cell::Text(p.link.clone().unwrap_or_default())
        }));
    }
    out
}

/// A run's method as its block names it: the backend (`tcp`), or on the nccl backend how the
/// bytes moved (`copy_engine`, `nccl`, `other` for a newer tool's method: never the backend's
/// name, which is also the `nccl` method's, so its figures cannot overwrite NCCL's).
fn how(p: &P2pRecord) -> String {
    match p.method {
        P2pMethod::Tcp => p.backend.to_string(),
        P2pMethod::CopyEngine | P2pMethod::Nccl | P2pMethod::Other => p.method.name().to_string(),
    }
}

/// The block's name: its method, and its labels where it has any (`tcp input_run=2`: a second
/// run of the matrix in one input, kept apart by the reader).
fn block(p: &P2pRecord) -> String {
    let mut name = how(p);
    for (k, v) in &p.labels {
        name.push_str(&format!(" {k}={v}"));
    }
    name
}

fn matrix(title: &str, pairs: &[P2pRecord], get: Figure) -> Table {
    // A run's pairs by (method and labels, ranks, bytes); the reader keeps a pair given twice in
    // one input apart as a later run (`input_run`).
    let mut runs: BTreeMap<RunKey, BTreeMap<(u32, u32), Cell>> = BTreeMap::new();
    for p in pairs {
        runs.entry((block(p), p.ranks, p.bytes))
            .or_default()
            .insert((p.src, p.dst), get(p));
    }
    // The ranks the records name, not the `ranks` they claim: a complete run names every
    // rank, and a line claiming 4e8 ranks with one pair is two rows, not 4e8 (a hostile or
    // torn file once made summarize ask for 19 GB and abort).
    let ranks_of = |cells: &BTreeMap<(u32, u32), Cell>| -> BTreeSet<u32> {
        cells.keys().flat_map(|&(s, d)| [s, d]).collect()
    };
    let named: BTreeSet<u32> = runs.values().flat_map(ranks_of).collect();
    let mut columns = vec![
        Column {
            name: "backend".into(),
            header: "backend".into(),
        },
        Column {
            name: "bytes".into(),
            header: "bytes".into(),
        },
        Column {
            name: "src".into(),
            header: "src\\dst".into(),
        },
    ];
    columns.extend(named.iter().map(|d| Column {
        name: format!("to_{d}"),
        header: d.to_string(),
    }));
    let mut t = Table::new(title, columns);
    for (group, ((backend, _, bytes), cells)) in runs.iter().enumerate() {
        for s in ranks_of(cells) {
            let mut row = vec![Cell::Text(backend.clone()), Cell::int(*bytes), Cell::int(s)];
            row.extend(named.iter().map(|&d| match cells.get(&(s, d)) {
                _ if d == s => Cell::Text("-".into()),
                Some(v) => v.clone(),
                None => Cell::Empty,
            }));
            t.push(row, group);
        }
    }
    t
}
