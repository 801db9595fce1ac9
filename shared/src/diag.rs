//! What people read on stderr, in one style (`tool: msg`, `tool: warning: msg`,
//! `tool: error: msg`), and the error kinds behind the exit codes.
//!
//! This is the bottom of the crate: every other module may report through it and it uses none
//! of them, so [`crate::cli`] (which maps errors to exit codes and so knows the other modules'
//! error types) sits on top without a circle. Tools reach these through `cli`'s re-exports.

use std::fmt::Display;
use std::sync::OnceLock;

static TOOL: OnceLock<&'static str> = OnceLock::new();

/// Names the running tool in messages (the first call wins; [`crate::cli::main`] makes it).
pub(crate) fn set_tool(name: &'static str) {
    let _ = TOOL.set(name);
}

/// The running tool's name, for messages (`servbench` until [`crate::cli::main`] sets it).
pub fn tool() -> &'static str {
    TOOL.get().copied().unwrap_or("servbench")
}

/// Prints `tool: warning: msg` on stderr.
pub fn warn(msg: impl Display) {
    eprintln!("{}: warning: {msg}", tool());
}

/// Prints `tool: msg` on stderr (progress and information for people).
pub fn info(msg: impl Display) {
    eprintln!("{}: {msg}", tool());
}

/// Prints `tool: error: msg` on stderr: the line a failing tool ends with, and the line for a
/// failure a tool reports while it goes on (one rank of several).
pub fn error(msg: impl Display) {
    eprintln!("{}: error: {msg}", tool());
}

/// An error in what the user gave us (flags, input lines, files): exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The thing being measured failed (exit 1); the message says what and where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failure(pub String);

/// The run was interrupted after writing what it had (exit 130).
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// The next tool in the pipeline closed its end: stop quietly, exit 0.
#[derive(Debug, thiserror::Error)]
#[error("stdout closed")]
pub struct StdoutClosed;

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

pub fn failure(msg: impl Into<String>) -> anyhow::Error {
    Failure(msg.into()).into()
}
