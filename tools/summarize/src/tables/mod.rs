//! The tables summarize prints, one section per kind of record present: load points (from
//! `request` and `summary` records), collectives, servers, kills, collbench's decode, compute and
//! p2p records, loadgen's ramps, searches and conversation turns, srv-sim's plans.
//!
//! A section is one function from the [`Facts`] and the [`View`] to its tables (none when its
//! records are absent) and one line in [`SECTIONS`]: a new record kind is shared's schema, its
//! place in `input`, a section file and its line (README, "Adding a record kind").

pub mod coll;
pub mod compute;
pub mod decode;
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
use view::View;

/// A table section: its name (tests and documentation) and its tables.
#[derive(Clone, Copy)]
pub struct Section {
    pub name: &'static str,
    pub tables: fn(&Facts, &View) -> Vec<Table>,
}

/// A line of [`SECTIONS`].
const fn section(name: &'static str, tables: fn(&Facts, &View) -> Vec<Table>) -> Section {
    Section { name, tables }
}

/// Every section, in the order they print.
pub const SECTIONS: &[Section] = &[
    section("servers", servers::section),
    section("load points", points::section),
    section("collectives", coll::section),
    section("turns", workloads::turns),
    section("ramps", ramps::section),
    section("searches", workloads::searches),
    section("decode allreduce budget", decode::section),
    section("gemms", compute::gemms),
    section("device limits", compute::limits),
    section("p2p", p2p::section),
    section("srv-sim plans", plans::section),
    section("kills", kills::section),
];

/// The tables of `sections`, in their order.
pub fn all(facts: &Facts, view: &View, sections: &[Section]) -> Vec<Table> {
    sections
        .iter()
        .flat_map(|s| (s.tables)(facts, view))
        .collect()
}
