use clap::{Parser, ValueEnum};
use servbench::cli::{self, CommonArgs, parse_duration, parse_label};
use servbench::exec::SshArgs;
use std::process::ExitCode;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  srv-launch sim | loadgen -c 1,8 | srv-kill | summarize          # nothing left running
  srv-launch vllm --model meta-llama/Llama-3.1-8B-Instruct --tp 4 --gpus 0,1,2,3 > server.jsonl
  srv-launch sglang --host gpu1 --model Qwen/Qwen3-32B --tp 8 --timeout 20m -- --mem-fraction-static 0.85
  srv-launch llama-cpp --bin ./llama-server --model tiny.gguf -- -t 1
  srv-launch --cmd 'python3 -m http.server {port}' --ready-url 'http://127.0.0.1:{port}/'
  srv-kill --from server.jsonl

The server runs detached in its own session (stdin /dev/null, output to --log), so it outlives
srv-launch and any SSH connection. Ready means: the engine's health endpoint answers 200 and
/v1/models lists a model (--probe adds a one-token completion). Exit 0 with one `server` record
on stdout; 1 if the server died during startup (its log's last 30 lines on stderr) or was not
ready in --timeout; 2 on bad usage, a taken port, or an SSH host that cannot be reached or trusted.";

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Engine {
    Sglang,
    Vllm,
    LlamaCpp,
    Trtllm,
    Sim,
}

impl Engine {
    fn preset_name(self) -> &'static str {
        match self {
            Engine::Sglang => "sglang",
            Engine::Vllm => "vllm",
            Engine::LlamaCpp => "llama-cpp",
            Engine::Trtllm => "trtllm",
            Engine::Sim => "sim",
        }
    }
}

/// Start an inference server detached, wait until it is really ready, print one `server` record.
#[derive(Debug, Parser)]
#[command(name = "srv-launch", version, after_help = EXAMPLES)]
struct Args {
    /// Engine to start (or use --cmd for anything else)
    #[arg(value_enum, required_unless_present = "cmd")]
    engine: Option<Engine>,
    /// Any server as a shell command; `{port}` is replaced by the port
    #[arg(
        long,
        value_name = "'...'",
        conflicts_with = "engine",
        requires = "ready_url"
    )]
    cmd: Option<String>,
    /// With --cmd: URL that answers 200 once ready; `{port}` is replaced by the port
    #[arg(long, value_name = "URL")]
    ready_url: Option<String>,
    /// Model (engine's own notion: HF id, path, GGUF file, srv-sim preset)
    #[arg(long)]
    model: Option<String>,
    /// Tensor-parallel degree
    #[arg(long, default_value_t = 1)]
    tp: u32,
    /// Pipeline-parallel degree
    #[arg(long, default_value_t = 1)]
    pp: u32,
    /// Port to listen on (default: a free one)
    #[arg(long)]
    port: Option<u16>,
    /// Address the server binds (default 127.0.0.1 here, 0.0.0.0 with --host)
    #[arg(long, value_name = "ADDR")]
    bind: Option<String>,
    /// GPUs to use, as CUDA_VISIBLE_DEVICES: 0,1,2,3
    #[arg(long, value_name = "LIST")]
    gpus: Option<String>,
    /// Environment variable for the server (repeatable)
    #[arg(long, value_name = "K=V", value_parser = parse_label)]
    env: Vec<(String, String)>,
    /// Name for this server (log file name, record)
    #[arg(long)]
    name: Option<String>,
    /// Server log (stdout+stderr), on the server's host (default /tmp/srv-launch/NAME-PORT-TIME.log)
    #[arg(long, value_name = "PATH")]
    log: Option<String>,
    /// Working directory for the server
    #[arg(long, value_name = "DIR")]
    cwd: Option<String>,
    /// Give up waiting for readiness after this long
    #[arg(long, value_name = "DUR", default_value = "15m", value_parser = parse_duration)]
    timeout: Duration,
    /// Run it on this host over SSH: [user@]addr[:port]
    #[arg(long, value_name = "[USER@]ADDR[:PORT]")]
    host: Option<String>,
    #[command(flatten)]
    ssh: SshArgs,
    /// Also require a one-token completion before declaring ready
    #[arg(long)]
    probe: bool,
    /// If the port is taken, kill whoever holds it first (srv-kill's logic)
    #[arg(long)]
    replace: bool,
    /// On --timeout, kill the server instead of leaving it running
    #[arg(long)]
    kill_on_timeout: bool,
    /// Path of the engine's program, replacing its default (e.g. a llama-server build)
    #[arg(long, value_name = "PATH")]
    bin: Option<String>,
    /// Print the exact command and log path on stderr
    #[arg(short, long)]
    verbose: bool,
    #[command(flatten)]
    common: CommonArgs,
    /// Extra arguments passed to the engine as given
    #[arg(last = true, value_name = "ENGINE ARGS")]
    extra: Vec<String>,
}

fn main() -> ExitCode {
    cli::main("srv-launch", || {
        let Some(a) = cli::parse_args::<Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        if a.tp == 0 || a.pp == 0 {
            return Err(cli::usage("--tp and --pp must be at least 1"));
        }
        srv_launch::run(&srv_launch::Config {
            engine: a.engine.map(|e| e.preset_name().to_string()),
            cmd: a.cmd,
            ready_url: a.ready_url,
            model: a.model,
            tp: a.tp,
            pp: a.pp,
            port: a.port,
            bind: a.bind,
            gpus: a.gpus,
            env: a.env,
            name: a.name,
            log: a.log,
            cwd: a.cwd,
            timeout: a.timeout,
            host: a.host,
            ssh: a.ssh.options(),
            probe: a.probe,
            replace: a.replace,
            kill_on_timeout: a.kill_on_timeout,
            verbose: a.verbose,
            bin: a.bin,
            extra: a.extra,
            labels: a.common.labels(),
            strict: a.common.strict,
            poll: Duration::from_millis(500),
        })
    })
}
