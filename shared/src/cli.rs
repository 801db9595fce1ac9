//! Conventions every tool's command line shares: one error style (`tool: error: what and where`),
//! exit codes, label flags, and parsers for durations (`500ms`, `30s`, `15m`), lists (`1,2,4`),
//! doubling ranges (`1..256` = 1,2,4,...,256) and binary sizes (`8`, `64K`, `256M`, `1G`).

use crate::jsonl::StdoutClosed;
use crate::record::Labels;
use std::fmt::Display;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

/// Exit codes, the same for every tool (README "Exit codes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok = 0,
    /// The measured thing failed: server never ready, kill left survivors, every request failed.
    Failed = 1,
    /// Bad usage or input.
    Usage = 2,
    /// Interrupted (Ctrl-C, SIGTERM); results so far were written.
    Interrupted = 130,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

static TOOL: OnceLock<&'static str> = OnceLock::new();

/// The running tool's name, for messages (`servbench` until [`main`] sets it).
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

pub fn usage(msg: impl Into<String>) -> anyhow::Error {
    UsageError(msg.into()).into()
}

pub fn failure(msg: impl Into<String>) -> anyhow::Error {
    Failure(msg.into()).into()
}

/// The exit code an error maps to.
pub fn exit_for(err: &anyhow::Error) -> Exit {
    if err.downcast_ref::<StdoutClosed>().is_some() {
        Exit::Ok
    } else if err.downcast_ref::<Interrupted>().is_some() {
        Exit::Interrupted
    } else if err.downcast_ref::<UsageError>().is_some() {
        Exit::Usage
    } else {
        Exit::Failed
    }
}

/// Runs a tool's body: sets the name used in messages, prints one `tool: error: ...` line for
/// an error, and maps it to the documented exit code. A closed stdout is a quiet success.
pub fn main(tool_name: &'static str, body: impl FnOnce() -> anyhow::Result<Exit>) -> ExitCode {
    let _ = TOOL.set(tool_name);
    match body() {
        Ok(code) => code.into(),
        Err(err) => {
            let code = exit_for(&err);
            if code != Exit::Ok && code != Exit::Interrupted {
                eprintln!("{tool_name}: error: {err:#}");
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
                // Into a closed pipe (`tool --help | head`) is still a success.
                let _ = e.print();
                Ok(None)
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

/// Flags every tool takes (flatten into the tool's clap struct).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct CommonArgs {
    /// Add a label to every record this tool writes (repeatable): --label run=baseline
    #[arg(long = "label", value_name = "K=V", value_parser = parse_label)]
    pub labels: Vec<(String, String)>,
    /// Treat a malformed input line as an error (exit 2) instead of warning and skipping it
    #[arg(long)]
    pub strict: bool,
}

impl CommonArgs {
    pub fn labels(&self) -> Labels {
        self.labels.iter().cloned().collect()
    }
}

/// `k=v` with a non-empty key.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got '{s}'")),
    }
}

/// `500ms`, `30s`, `15m`, `1h 30m`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if let Ok(secs) = t.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Ok(Duration::from_secs_f64(secs));
        }
        return Err(format!("'{s}' is not a duration"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("'{s}' is not a duration ({e}); examples: 500ms, 30s, 15m"))
}

/// `1,2,4,8` or a doubling range `1..256` (1,2,4,...,256; the end is included when reached by
/// doubling, and always included as the last value), or a mix: `1..8,12`.
pub fn parse_list<T>(s: &str) -> Result<Vec<T>, String>
where
    T: FromStr + Copy + PartialOrd + Into<f64> + DoubleStep,
    T::Err: Display,
{
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("empty item in list '{s}'"));
        }
        if let Some((a, b)) = part.split_once("..") {
            let start: T = a
                .trim()
                .parse()
                .map_err(|e| format!("'{a}' in '{part}': {e}"))?;
            let end: T = b
                .trim()
                .parse()
                .map_err(|e| format!("'{b}' in '{part}': {e}"))?;
            if start.into() <= 0.0 || end < start {
                return Err(format!(
                    "range '{part}' must go up from a positive start, e.g. 1..256"
                ));
            }
            let mut x = start;
            while x < end {
                out.push(x);
                x = x.double();
            }
            out.push(end);
        } else {
            out.push(part.parse().map_err(|e| format!("'{part}': {e}"))?);
        }
    }
    Ok(out)
}

/// Doubling for [`parse_list`] ranges.
pub trait DoubleStep {
    fn double(self) -> Self;
}
impl DoubleStep for u32 {
    fn double(self) -> Self {
        self.saturating_mul(2)
    }
}
impl DoubleStep for f64 {
    fn double(self) -> Self {
        self * 2.0
    }
}

/// clap value parser for `Vec<u32>` lists: `value_parser = servbench::cli::u32_list`.
pub fn u32_list(s: &str) -> Result<Vec<u32>, String> {
    parse_list::<u32>(s)
}

/// clap value parser for `Vec<f64>` lists.
pub fn f64_list(s: &str) -> Result<Vec<f64>, String> {
    parse_list::<f64>(s)
}

/// A byte count with an optional binary suffix: `8`, `64K`, `256M`, `1G` (K = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; examples: 8, 64K, 256M, 1G"))?;
    n.checked_mul(mult)
        .ok_or_else(|| format!("'{s}' is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_and_doubling_ranges() {
        let cases: &[(&str, &[u32])] = &[
            ("1,2,4,8", &[1, 2, 4, 8]),
            ("1..256", &[1, 2, 4, 8, 16, 32, 64, 128, 256]),
            ("3..20", &[3, 6, 12, 20]),
            ("1..8,12", &[1, 2, 4, 8, 12]),
            ("5", &[5]),
            ("4..4", &[4]),
        ];
        for (input, want) in cases {
            assert_eq!(parse_list::<u32>(input).unwrap(), *want, "{input}");
        }
        for bad in ["", "1,,2", "0..8", "8..1", "a", "1..x"] {
            assert!(parse_list::<u32>(bad).is_err(), "{bad} should fail");
        }
        assert_eq!(parse_list::<f64>("0.5,2.5").unwrap(), vec![0.5, 2.5]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("30s").unwrap(), Duration::from_secs(30));
        assert_eq!(parse_duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_duration("2.5").unwrap(), Duration::from_millis(2500));
        assert!(parse_duration("soon").unwrap_err().contains("examples"));
        assert!(parse_duration("-1").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8").unwrap(), 8);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert!(parse_size("12Q").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(
            parse_label("run=base").unwrap(),
            ("run".into(), "base".into())
        );
        assert_eq!(parse_label("k=a=b").unwrap(), ("k".into(), "a=b".into()));
        assert!(parse_label("novalue").is_err());
        assert!(parse_label("=v").is_err());
    }
}
