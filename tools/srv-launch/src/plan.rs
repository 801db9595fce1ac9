//! What srv-launch is asked to do, validated once from the command line (`Args::plan`) and
//! read, never changed, by everything after: the server to start, its layout, where and how.

use servbench::engines::EnginePreset;
use servbench::exec::SshOptions;
use servbench::record::{Labels, PdLayout};
use std::time::Duration;

/// The server to start.
#[derive(Debug, Clone)]
pub enum Server {
    /// An engine preset (`vllm`, `sglang`, `llama-cpp`, `sim`, ...); boxed, as it is large.
    Preset(Box<EnginePreset>),
    /// `--cmd`: any server as a shell command, ready once `ready_url` answers 200 (`{port}`
    /// in either is the port).
    Cmd { cmd: String, ready_url: String },
}

/// The validated run: every flag srv-launch acts on, in the form it acts on it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub server: Server,
    pub model: Option<String>,
    pub tp: u32,
    pub pp: u32,
    /// `--pd`: a disaggregated prefill/decode group of this layout, not one server.
    pub pd: Option<PdLayout>,
    /// `--port`; a free one is picked on the server's host when absent.
    pub port: Option<u16>,
    pub bind: Option<String>,
    /// `--gpus`, as CUDA_VISIBLE_DEVICES.
    pub gpus: Option<String>,
    pub env: Vec<(String, String)>,
    pub name: Option<String>,
    pub log: Option<String>,
    pub cwd: Option<String>,
    pub timeout: Duration,
    /// `--host`: where the server runs (here when absent), reached with `ssh`.
    pub host: Option<String>,
    pub ssh: SshOptions,
    pub probe: bool,
    pub replace: bool,
    /// `--keep-on-timeout`: a server not ready in time is left running (else killed: no
    /// record names it, so nobody downstream would stop it).
    pub keep_on_timeout: bool,
    pub bin: Option<String>,
    pub nvidia_smi: String,
    pub self_report: bool,
    pub strict_preflight: bool,
    pub host_root: String,
    pub verbose: bool,
    pub dry_run: bool,
    /// `--strict`: a malformed upstream line is an error.
    pub strict_input: bool,
    /// `--label`s for the record.
    pub labels: Labels,
    /// Arguments after `--`, passed to the engine as given.
    pub extra: Vec<String>,
}

impl Plan {
    /// The preset, when the server is one (not `--cmd`).
    pub fn preset(&self) -> Option<EnginePreset> {
        match &self.server {
            Server::Preset(p) => Some(**p),
            Server::Cmd { .. } => None,
        }
    }
}
