//! What people read on stderr, in one style (`tool: msg`, `tool: warning: msg`,
//! `tool: error: msg`), and the error kinds behind the exit codes.
//!
//! This is the bottom of the crate: every other module may report through it and it uses none
//! of them, so `cli` (which maps errors to exit codes and so knows the other modules'
//! error types) sits on top without a circle. Tools reach these through `cli`'s re-exports.

use std::borrow::Cow;
use std::fmt::Display;
use std::sync::OnceLock;

static TOOL: OnceLock<&'static str> = OnceLock::new();

/// Names the running tool in messages (the first call wins; `cli::main` makes it).
pub(crate) fn set_tool(name: &'static str) {
    let _ = TOOL.set(name);
}

/// The running tool's name, for messages (`servbench` until `cli::main` sets it).
pub fn tool() -> &'static str {
    TOOL.get().copied().unwrap_or("servbench")
}

/// Prints `tool: warning: msg` on stderr.
pub fn warn(msg: impl Display) {
    eprintln!("{}: warning: {}", tool(), printable(&msg.to_string()));
}

/// Prints `tool: msg` on stderr (progress and information for people).
pub fn info(msg: impl Display) {
    eprintln!("{}: {}", tool(), printable(&msg.to_string()));
}

/// Prints `tool: error: msg` on stderr: the line a failing tool ends with, and the line for a
/// failure a tool reports while it goes on (one rank of several).
pub fn error(msg: impl Display) {
    eprintln!("{}: error: {}", tool(), printable(&msg.to_string()));
}

/// `text` safe to show on a terminal, on one line: control characters (ESC, BEL, CR, LF, tab,
/// DEL, the C1 range) and the bidirectional overrides are written as escapes (`\x1b`, `\n`,
/// `\u{202e}`). Messages carry text we do not control (labels, a server's error body, an input
/// line): written raw, it could move the cursor, retitle the terminal or fake a line of ours.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) && (c as u32) < 0x80 => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// An error in what the user gave us (flags, input lines, files): exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// The thing being measured failed (exit 1); the message says what and where.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Failure(pub String);

/// A check before the measurement refused to go on (srv-launch `--strict-preflight`): exit 3.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// The run was interrupted after writing what it had (exit 130).
#[derive(Debug, thiserror::Error)]
#[error("interrupted")]
pub struct Interrupted;

/// Writing records or tables to stdout failed.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The next tool in the pipeline closed its end (EPIPE): stop quietly, exit 0.
    #[error("stdout closed")]
    Closed,
    /// Anything else (a full disk, an I/O error): what was written is lost, so it is one error
    /// line naming the cause and exit 1, never a quiet success.
    #[error("cannot write to stdout: {0}")]
    Failed(std::io::Error),
}

impl OutputError {
    /// Sorts a write error: only EPIPE means the reader is gone.
    pub fn from_io(err: std::io::Error) -> OutputError {
        if err.kind() == std::io::ErrorKind::BrokenPipe {
            OutputError::Closed
        } else {
            OutputError::Failed(err)
        }
    }

    /// True when the next tool closed its end (nothing more will be read).
    pub fn is_closed(&self) -> bool {
        matches!(self, OutputError::Closed)
    }
}

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

pub fn failure(msg: impl Into<String>) -> anyhow::Error {
    Failure(msg.into()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_from_outside_are_escaped_before_a_terminal_sees_them() {
        assert_eq!(printable("plain text, ünïcode"), "plain text, ünïcode");
        assert!(matches!(printable("plain"), Cow::Borrowed(_)));
        assert_eq!(
            printable("run=\x1b]0;owned\x07a\nb\rc\td\x7f"),
            "run=\\x1b]0;owned\\x07a\\nb\\rc\\td\\x7f"
        );
        // C1 CSI and a right-to-left override.
        assert_eq!(printable("x\u{9b}2J\u{202e}y"), "x\\u{9b}2J\\u{202e}y");
    }

    #[test]
    fn only_a_broken_pipe_is_a_closed_stdout() {
        use std::io::{Error, ErrorKind};
        assert!(OutputError::from_io(Error::from(ErrorKind::BrokenPipe)).is_closed());
        let full = OutputError::from_io(Error::from_raw_os_error(libc::ENOSPC));
        assert!(!full.is_closed());
        assert!(
            full.to_string()
                .starts_with("cannot write to stdout: No space left"),
            "{full}"
        );
    }
}
