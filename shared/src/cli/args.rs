//! Flags several tools take, as clap structs to flatten into each tool's own.

use super::parse::{parse_duration, parse_label, parse_positive_duration};
use crate::exec::SshOptions;
use crate::record::Labels;
use std::path::PathBuf;
use std::time::Duration;

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

/// The SSH flags every tool that reaches other hosts takes (flatten into its clap struct).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SshArgs {
    /// Private key for SSH (default: the agent, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa)
    #[arg(long, value_name = "KEY", env = "SERVBENCH_SSH_IDENTITY")]
    pub identity: Option<PathBuf>,
    /// known_hosts file to check host keys against (default ~/.ssh/known_hosts and
    /// known_hosts2; /etc/ssh/ssh_known_hosts and ssh_known_hosts2 are read too)
    #[arg(long, value_name = "FILE", env = "SERVBENCH_SSH_KNOWN_HOSTS")]
    pub known_hosts: Option<PathBuf>,
    /// Trust a host key seen for the first time and add it to known_hosts (a changed or
    /// @revoked key is always refused)
    #[arg(long)]
    pub accept_new_host: bool,
    /// Give up connecting to an SSH host after this long
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_positive_duration)]
    pub connect_timeout: Duration,
}

impl SshArgs {
    pub fn options(&self) -> SshOptions {
        SshOptions {
            identity: self.identity.clone(),
            known_hosts: self.known_hosts.clone(),
            accept_new_host: self.accept_new_host,
            connect_timeout: self.connect_timeout,
            ..SshOptions::default()
        }
    }
}

/// The flag of a tool that holds work for its input (srv-kill, summarize): how long the first
/// Ctrl-C/SIGTERM lets upstream take to end (see [`crate::interrupt`]).
#[derive(Debug, Clone, clap::Args)]
pub struct DrainArgs {
    /// After the first Ctrl-C/SIGTERM, how long to read on for the end of stdin (upstream
    /// finishing its partial results) before going on with what arrived; a second stops at once
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = parse_duration)]
    pub drain_wait: Duration,
}

impl Default for DrainArgs {
    fn default() -> Self {
        DrainArgs {
            drain_wait: crate::interrupt::DRAIN_WAIT,
        }
    }
}
