//! The command line, read here only: clap's [`Args`], validated once by [`Args::plan`] into the
//! immutable [`Plan`] the rest of srv-launch reads.

use crate::plan::{Plan, Server};
use anyhow::Result;
use clap::Parser;
use servbench::cli::{self, CommonArgs, SshArgs, parse_label};
use servbench::engines::{self, EnginePreset};
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  srv-launch sim | loadgen -c 1,8 | srv-kill | summarize          # nothing left running
  srv-launch vllm --model meta-llama/Llama-3.1-8B-Instruct --tp 4 --gpus 0,1,2,3 > server.jsonl
  srv-launch sglang --host gpu1 --model Qwen/Qwen3-32B --tp 8 --timeout 20m -- --mem-fraction-static 0.85
  srv-launch llama-cpp --bin ./llama-server --model tiny.gguf -- -t 1
  srv-launch --cmd 'python3 -m http.server {port}' --ready-url 'http://127.0.0.1:{port}/'
  srv-launch sim --pd 1p1d | loadgen -c 1,4,16 | srv-kill | summarize   # a P/D group as one
  srv-launch vllm --model M --pd 2p1d --gpus 0,1,2 > group.jsonl           # 3 servers + proxy
  srv-kill --from server.jsonl

The server runs detached in its own session (stdin /dev/null, output to --log), so it outlives
srv-launch and any SSH connection. Ready means: the engine's health endpoint answers 200 and
/v1/models lists a model (--probe adds a one-token completion). Exit 0 with one `server` record
on stdout; 1 if the server died during startup (its log's last 30 lines on stderr) or was not
ready in --timeout (then it is killed, unless --keep-on-timeout); 2 on bad usage, a taken port, or an SSH host that cannot be reached or trusted.";

/// Start an inference server detached, wait until it is really ready, print one `server` record.
#[derive(Debug, Clone, Parser)]
#[command(name = "srv-launch", version, after_help = EXAMPLES)]
pub struct Args {
    /// Engine to start (or use --cmd for anything else)
    #[arg(value_enum, required_unless_present = "cmd")]
    pub engine: Option<EnginePreset>,
    /// Any server as a shell command; `{port}` is replaced by the port
    #[arg(
        long,
        value_name = "'...'",
        conflicts_with = "engine",
        requires = "ready_url"
    )]
    pub cmd: Option<String>,
    /// With --cmd: URL that answers 200 once ready; `{port}` is replaced by the port
    #[arg(long, value_name = "URL")]
    pub ready_url: Option<String>,
    /// Model (engine's own notion: HF id, path, GGUF file, srv-sim preset)
    #[arg(long)]
    pub model: Option<String>,
    /// Tensor-parallel degree
    #[arg(long, default_value_t = 1)]
    pub tp: u32,
    /// Pipeline-parallel degree
    #[arg(long, default_value_t = 1)]
    pub pp: u32,
    /// Launch a disaggregated prefill/decode group as one unit: x prefill servers, y decode
    /// servers (each with --tp/--pp, GPUs split from --gpus in that order) and the engine's
    /// proxy in front; one `server` record per member, the proxy's URL the one to load
    #[arg(long, value_name = "xPyD", conflicts_with = "cmd")]
    pub pd: Option<servbench::record::PdLayout>,
    /// Port to listen on (default: a free one)
    #[arg(long)]
    pub port: Option<u16>,
    /// Address the server binds (default 127.0.0.1 here, 0.0.0.0 with --host)
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<String>,
    /// GPUs to use, as CUDA_VISIBLE_DEVICES: 0,1,2,3
    #[arg(long, value_name = "LIST")]
    pub gpus: Option<String>,
    /// Environment variable for the server (repeatable)
    #[arg(long, value_name = "K=V", value_parser = parse_label)]
    pub env: Vec<(String, String)>,
    /// Name for this server (log file name, record)
    #[arg(long)]
    pub name: Option<String>,
    /// Server log (stdout+stderr), on the server's host (default /tmp/srv-launch/NAME-PORT-TIME.log)
    #[arg(long, value_name = "PATH")]
    pub log: Option<String>,
    /// Working directory for the server
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<String>,
    /// Give up waiting for readiness after this long
    #[arg(long, value_name = "DUR", default_value = "15m", value_parser = servbench::cli::parse_positive_duration)]
    pub timeout: Duration,
    /// Run it on this host over SSH: [user@]addr[:port]
    #[arg(long, value_name = "[USER@]ADDR[:PORT]")]
    pub host: Option<String>,
    #[command(flatten)]
    pub ssh: SshArgs,
    /// Also require a one-token completion before declaring ready
    #[arg(long)]
    pub probe: bool,
    /// If the port is taken, kill whoever holds it first (srv-kill's logic)
    #[arg(long)]
    pub replace: bool,
    /// On --timeout, leave the server running (default: it is killed, since no record names it)
    #[arg(long)]
    pub keep_on_timeout: bool,
    /// The default since round 4 (a server that timed out is killed); kept so scripts run
    #[arg(long, hide = true, conflicts_with = "keep_on_timeout")]
    pub kill_on_timeout: bool,
    /// Path of the engine's program, replacing its default (e.g. a llama-server build)
    #[arg(long, value_name = "PATH")]
    pub bin: Option<String>,
    /// nvidia-smi to ask for the GPUs in the record's `env` (a path where it is not on PATH)
    #[arg(long, value_name = "PROGRAM", default_value = "nvidia-smi")]
    pub nvidia_smi: String,
    /// Add the engine's own flags that make it report on itself (per-request server timing, a
    /// log line per engine step, FLOP and byte counters; see README), recorded in the record
    #[arg(long)]
    pub self_report: bool,
    /// Refuse to start the server (exit 3) when the pre-flight check warns of anything
    #[arg(long)]
    pub strict_preflight: bool,
    /// Read the host's /proc and /sys under this directory (for tests, and containers with the
    /// host's mounted elsewhere)
    #[arg(long, value_name = "DIR", env = servbench::host::ROOT_VAR, default_value = "")]
    pub host_root: String,
    /// Print the exact command and log path on stderr
    #[arg(short, long)]
    pub verbose: bool,
    /// Print the command that would run (its argv, one JSON array on stdout); start nothing
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub common: CommonArgs,
    /// Extra arguments passed to the engine as given
    #[arg(last = true, value_name = "ENGINE ARGS")]
    pub extra: Vec<String>,
}

impl Args {
    /// Checks the flags that need no host and gives the plan; `Args` is not read after this.
    pub fn plan(&self) -> Result<Plan> {
        if self.tp == 0 || self.pp == 0 {
            return Err(cli::usage("--tp and --pp must be at least 1"));
        }
        let server = match (self.engine, &self.cmd) {
            (Some(preset), None) => Server::Preset(Box::new(preset)),
            (None, Some(cmd)) => {
                if self.self_report {
                    return Err(cli::usage(
                        "--self-report needs an engine preset: with --cmd, pass the engine's own flags in the command",
                    ));
                }
                let ready_url = self.ready_url.clone().ok_or_else(|| {
                    cli::usage("--cmd needs --ready-url URL (answers 200 once the server is ready)")
                })?;
                Server::Cmd {
                    cmd: cmd.clone(),
                    ready_url,
                }
            }
            _ => {
                return Err(cli::usage(format!(
                    "give an ENGINE ({}) or --cmd '...' --ready-url URL",
                    engines::names().join(", ")
                )));
            }
        };
        Ok(Plan {
            server,
            model: self.model.clone(),
            tp: self.tp,
            pp: self.pp,
            pd: self.pd,
            port: self.port,
            bind: self.bind.clone(),
            gpus: self.gpus.clone(),
            env: self.env.clone(),
            name: self.name.clone(),
            log: self.log.clone(),
            cwd: self.cwd.clone(),
            timeout: self.timeout,
            host: self.host.clone(),
            ssh: self.ssh.options(),
            probe: self.probe,
            replace: self.replace,
            keep_on_timeout: self.keep_on_timeout,
            bin: self.bin.clone(),
            nvidia_smi: self.nvidia_smi.clone(),
            self_report: self.self_report,
            strict_preflight: self.strict_preflight,
            host_root: self.host_root.clone(),
            verbose: self.verbose,
            dry_run: self.dry_run,
            strict_input: self.common.strict,
            labels: self.common.labels(),
            extra: self.extra.clone(),
        })
    }
}
