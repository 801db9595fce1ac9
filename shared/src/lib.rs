//! servbench's shared core. Every tool links this crate and nothing of another tool's:
//!
//! - [`record`]: the record schema (the contract between tools), versioned;
//! - [`jsonl`]: reading and writing records as JSON lines, pass-through included;
//! - [`cli`]: flags, parsers, error style and exit codes every tool shares;
//! - [`stats`]: the one implementation of request statistics and histograms;
//! - [`presets`]: hardware and model presets and the roofline arithmetic over them.

pub mod cli;
pub mod jsonl;
pub mod presets;
pub mod record;
pub mod stats;
