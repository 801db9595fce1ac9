//! Conventions every tool's command line shares: one error style (`tool: error: what and where`,
//! from [`crate::diag`]), exit codes, the flags several tools take ([`args`]: labels, SSH), and
//! parsers for durations (`500ms`, `30s`, `15m`), lists (`1,2,4`), doubling ranges (`1..256` =
//! 1,2,4,...,256) and binary sizes (`8`, `64K`, `256M`, `1G`) ([`parse`]).
//!
//! `cli` is the top of the crate: [`exit_for`] knows the error types of the modules below it
//! (a closed stdout, an SSH host that cannot be reached), so tools just `?` them.

pub mod args;
pub mod parse;

pub use crate::diag::{
    Failure, Interrupted, OutputError, Refused, UsageError, error, failure, info, printable, tool,
    usage, warn,
};
pub use args::{CommonArgs, DrainArgs, SshArgs};
pub use parse::{
    DoubleStep, MAX_DURATION, f64_list, parse_duration, parse_label, parse_list,
    parse_positive_duration, parse_size, u32_list,
};

use crate::exec::ExecError;
use std::process::ExitCode;

/// Exit codes, the same for every tool (README "Exit codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// The measured thing failed: server never ready, kill left survivors, every request failed.
    Failed = 1,
    /// Bad usage or input.
    Usage = 2,
    /// A pre-flight check refused to start (srv-launch `--strict-preflight`).
    Refused = 3,
    /// Interrupted (Ctrl-C, SIGTERM); results so far were written.
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// The exit code an error maps to.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    if let Some(out) = err.downcast_ref::<OutputError>() {
        // Only a reader that went away is a success; a full disk lost what we wrote.
        if out.is_closed() {
            Exit::Ok
        } else {
            Exit::Failed
        }
    } else if err.downcast_ref::<Interrupted>().is_some() {
        Exit::Interrupted
    } else if err.downcast_ref::<Refused>().is_some() {
        Exit::Refused
    } else if err.downcast_ref::<UsageError>().is_some() {
        Exit::Usage
    } else if let Some(ExecError::Connect(_)) = err.downcast_ref::<ExecError>() {
        // The host as named cannot be reached or trusted: the user must fix something.
        Exit::Usage
    } else {
        Exit::Failed
    }
}

/// Runs a tool's body: sets the name used in messages, prints one `tool: error: ...` line for
/// an error, and maps it to the documented exit code. A closed stdout (EPIPE) is a quiet
/// success; any other write error on stdout is an error like the others.
pub fn main(tool_name: &'static str, body: impl FnOnce() -> anyhow::Result<Exit>) -> ExitCode {
    crate::diag::set_tool(tool_name);
    match body() {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit_for(&err);
            if code != Exit::Ok && code != Exit::Interrupted {
                error(format!("{err:#}"));
            }
            code.into()
        }
    }
}

/// Parses the command line with clap, its mistakes in the one error style: `Err` carries a
/// one-line usage error (`tool: error: invalid value 'x' for '-c <LIST>': ... (see --help)`,
/// exit 2). `--help` and `--version` print and give `Ok(None)`: the tool ends with exit 0.
pub fn parse_args<T: clap::Parser>() -> anyhow::Result<Option<T>> {
    parse_args_from(std::env::args_os())
}

/// [`parse_args`] over given arguments (the program name first).
pub fn parse_args_from<T, I>(args: I) -> anyhow::Result<Option<T>>
where
    T: clap::Parser,
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString> + Clone,
{
    use clap::error::ErrorKind;
    match T::try_parse_from(args) {
        Ok(parsed) => Ok(Some(parsed)),
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                // Into a closed pipe (`tool --help | head`) is still a success; a full disk is not.
                match e.print().map_err(OutputError::from_io) {
                    Err(err @ OutputError::Failed(_)) => Err(err.into()),
                    _ => Ok(None),
                }
            }
            _ => Err(usage(format!("{} (see --help)", one_line_clap_error(&e)))),
        },
    }
}

/// clap's message on one line, without its `error: ` prefix and its usage block: the message
/// and clap's tip, if any (a missing-argument error names the arguments on lines of their own).
fn one_line_clap_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut message = String::new();
    for line in text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
    {
        if !message.is_empty() {
            message.push_str(if line.starts_with("tip:") { "; " } else { " " });
        }
        message.push_str(line);
    }
    message.trim_start_matches("error: ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_errors_keep_their_exit_codes_through_question_mark() {
        fn connect() -> anyhow::Result<()> {
            Err(ExecError::Connect("ssh u@h:22: connection refused".into()))?
        }
        fn command() -> anyhow::Result<()> {
            Err(ExecError::Command("ssh u@h:22: no free port found".into()))?
        }
        let err = connect().unwrap_err();
        assert_eq!(exit_for(&err), Exit::Usage);
        assert_eq!(format!("{err:#}"), "ssh u@h:22: connection refused");
        let err = command().unwrap_err();
        assert_eq!(exit_for(&err), Exit::Failed);
        assert_eq!(format!("{err:#}"), "ssh u@h:22: no free port found");
        assert_eq!(exit_for(&usage("bad flag")), Exit::Usage);
        assert_eq!(exit_for(&OutputError::Closed.into()), Exit::Ok);
        let full = OutputError::from_io(std::io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(exit_for(&full.into()), Exit::Failed);
    }
}
