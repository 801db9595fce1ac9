//! The tables summarize prints, one section per kind of record present: load points (from
//! `request` and `summary` records), collectives, servers, kills, collbench's decode, compute and
//! p2p records, loadgen's ramps, searches and conversation turns, srv-sim's plans.
//!
//! A section is one function from the [`Facts`] and the [`View`] to its tables (none when its
//! records are absent) and one line in [`SECTIONS`] naming the record kinds it reads. A new
//! record kind is shared's schema, a section file and its line: `input` keeps a kind it has no
//! field for whole (`Inputs::records`) for the section that reads it, and one no section reads
//! is reported as ignored (README, "Adding a record kind").

pub mod coll;
pub mod compute;
pub mod decode;
pub mod eval;
pub mod kills;
pub mod p2p;
pub mod plans;
pub mod points;
pub mod ramps;
pub mod servers;
pub mod view;
pub mod workloads;

use crate::notes::note::Facts;
use crate::render::Table;
use servbench::record::{
    CollRecord, CollRunRecord, DecodeRecord, DeviceLimitsRecord, GemmRecord, KillRecord, P2pRecord,
    RampRecord, Record, RecordKind, RequestRecord, SearchRecord, ServerRecord, SimPlanRecord,
    SummaryRecord,
};
use std::collections::BTreeMap;
use view::View;

/// A table section: its name (tests and documentation), the record kinds it reads, and its
/// tables.
#[derive(Clone, Copy)]
pub struct Section {
    pub name: &'static str,
    pub kinds: &'static [&'static str],
    pub tables: fn(&Facts, &View) -> Vec<Table>,
}

/// A line of [`SECTIONS`].
const fn section(
    name: &'static str,
    kinds: &'static [&'static str],
    tables: fn(&Facts, &View) -> Vec<Table>,
) -> Section {
    Section {
        name,
        kinds,
        tables,
    }
}

const POINTS: &[&str] = &[RequestRecord::KIND, SummaryRecord::KIND];

/// Every section, in the order they print.
pub const SECTIONS: &[Section] = &[
    section("servers", &[ServerRecord::KIND], servers::section),
    section("load points", POINTS, points::section),
    section(
        "collectives",
        &[CollRecord::KIND, CollRunRecord::KIND],
        coll::section,
    ),
    section("turns", POINTS, workloads::turns),
    section("eval", POINTS, eval::section),
    section("adapters", POINTS, workloads::adapters),
    section("ramps", &[RampRecord::KIND], ramps::section),
    section("searches", &[SearchRecord::KIND], workloads::searches),
    section(
        "decode allreduce budget",
        &[DecodeRecord::KIND],
        decode::section,
    ),
    section("gemms", &[GemmRecord::KIND], compute::gemms),
    section(
        "device limits",
        &[DeviceLimitsRecord::KIND],
        compute::limits,
    ),
    section("p2p", &[P2pRecord::KIND], p2p::section),
    section("srv-sim plans", &[SimPlanRecord::KIND], plans::section),
    section("kills", &[KillRecord::KIND], kills::section),
];

/// The records kept whole (`Inputs::records`) that no section of `sections` reads, counted by
/// kind: summarize says it ignored them.
pub fn unread(records: &[Record], sections: &[Section]) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in records {
        if !sections.iter().any(|s| s.kinds.contains(&r.kind())) {
            *out.entry(r.kind().to_string()).or_default() += 1;
        }
    }
    out
}

/// The tables of `sections`, in their order.
pub fn all(facts: &Facts, view: &View, sections: &[Section]) -> Vec<Table> {
    sections
        .iter()
        .flat_map(|s| (s.tables)(facts, view))
        .collect()
}
