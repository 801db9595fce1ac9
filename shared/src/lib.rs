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
//! - [`load`]: the load a workload applies, declared once for loadgen and srv-sim's `--predict`:
//!   its flags, its points, arrival processes, conversation turns, think times, the ramp and
//!   find-max rules.
//! - [`startup`]: a server's startup phases, read from its engine's log.
//! - [`steplog`]: the engines' step log lines (vLLM, SGLang, TensorRT-LLM) read into `engine_steps`.
//!
//! Modules use each other one way only (no circle; `.ci/run` checks it, test files aside). From
//! the bottom: `record`, `files`, `diag`, `procs` and `rlimit` use none of the others; `stats`
//! and `startup` use `record`; `engines` uses `startup` and `record`; `steplog` uses `record`,
//! `engines` and `jsonl`; `interrupt` and `ranks` use `diag`;
//! `exec` uses `procs` and `diag`; `kill` uses `exec` and `procs`; `jsonl` uses `record`,
//! `files`, `diag` and `interrupt`; `presets` uses `record`, `files`, `jsonl` (measured
//! collective curves) and `diag`; `telemetry` uses `record` and `exec`; `host` uses `record`,
//! `exec`, `jsonl` and `presets`; `cli` (exit codes for every module's errors, the flag parsers)
//! uses `diag`, `exec`, `interrupt` and `record`; `load` uses `record`, `files`, `stats` and
//! `cli` (its flag parsers and usage errors). A doc comment names a module above its own in plain words, not as a `crate::` link.

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
pub mod steplog;
pub mod telemetry;
