//! servbench's shared core. Every tool links this crate and nothing of another tool's:
//!
//! - [`record`]: the record schema (the contract between tools), versioned;
//! - [`jsonl`]: reading and writing records as JSON lines, pass-through included;
//! - [`cli`]: flags, parsers, error style and exit codes every tool shares;
//! - [`stats`]: the one implementation of request statistics and histograms;
//! - [`presets`]: hardware and model presets and the roofline arithmetic over them;
//! - [`exec`]: running commands and processes here or over SSH, behind one trait;
//! - [`procs`]: process trees and killing one completely;
//! - [`engines`]: how each inference engine is launched and checked for readiness.

pub mod cli;
pub mod engines;
pub mod exec;
pub mod jsonl;
pub mod presets;
pub mod procs;
pub mod record;
pub mod stats;
