//! servbench's shared core. Every tool links this crate and nothing of another tool's:
//!
//! - [`record`]: the record schema (the contract between tools), versioned;
//! - [`jsonl`]: reading and writing records as JSON lines, pass-through included;
//! - [`files`]: reading the files flags name, each within the bound of its kind;
//! - [`cli`]: flags, parsers, exit codes and the error style every tool shares;
//! - [`diag`]: the messages on stderr (`tool: warning: ...`) and the error kinds behind exit codes;
//! - [`stats`]: the one implementation of request statistics and histograms;
//! - [`presets`]: hardware and model presets and the roofline arithmetic over them;
//! - [`procs`]: process tables and kill targets as data, and the /proc text parsers;
//! - [`exec`]: running commands and processes here or over SSH, behind one trait;
//! - [`kill`]: ending a process tree completely, on any host;
//! - [`engines`]: how each inference engine is launched and checked for readiness;
//! - [`rlimit`]: this process's resource limits (open files);
//! - [`ranks`]: processes of one job on many machines: rank detection (flags, mpirun, srun),
//!   the coordinator rendezvous, framed messages, clock offsets;
//! - [`telemetry`]: the server's `/metrics` and its GPUs over a point, in one vocabulary;
//! - [`host`]: the box itself: its tunables, GPUs and topology, and the pre-flight verdict;
//! - [`interrupt`]: Ctrl-C/SIGTERM in a pipeline: the first drains the input, a second leaves.
//! - [`load`]: the load a workload applies (arrival processes, conversation turns, think times).
//!
//! Modules use each other one way only (no circle): `files` uses none; `jsonl` uses `record`,
//! `files`, `diag` and `interrupt`; `interrupt` uses `diag`; `stats` uses `record`; `presets`
//! uses `record`, `files` and `jsonl` (measured collective curves); `telemetry` uses `record`
//! and `exec`; `host` uses `record`, `exec`, `jsonl` and `presets`; `exec` uses `procs` and `diag`; `kill` uses `exec` and `procs`; `ranks` uses
//! `diag`; `cli` (exit codes for every module's errors) may use any of them, and no module uses
//! `cli`.

pub mod cli;
pub mod diag;
pub mod engines;
pub mod exec;
pub mod files;
pub mod host;
pub mod interrupt;
pub mod jsonl;
pub mod kill;
pub mod load;
pub mod presets;
pub mod procs;
pub mod ranks;
pub mod record;
pub mod rlimit;
pub mod startup;
pub mod stats;
pub mod telemetry;
