//! The tables summarize prints, one section per kind of record present: load points (from
//! `request` and `summary` records), collectives, servers, kills, collbench's decode, compute and
//! p2p records, loadgen's ramps, searches and conversation turns, srv-sim's plans.

pub mod coll;
pub mod compute;
pub mod decode;
pub mod kills;
pub mod p2p;
pub mod plans;
pub mod points;
pub mod ramps;
pub mod servers;
pub mod workloads;
