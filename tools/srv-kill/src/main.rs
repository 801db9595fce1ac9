use clap::Parser;
use servbench::cli::{self, CommonArgs, parse_duration};
use servbench::exec::SshArgs;
use std::process::ExitCode;
use std::time::Duration;

const EXAMPLES: &str = "\
Examples:
  srv-launch sim | loadgen -c 1,8 | srv-kill | summarize      # nothing left running
  srv-kill --from server.jsonl                                # the records srv-launch wrote
  srv-kill --port 8000 --grace 30s
  srv-kill --match 'sglang::scheduler' --dry-run              # list, signal nothing
  srv-kill --host gpu1 --match 'VLLM::Worker' --gpu

Kills whole trees: the process group and session, descendants found through /proc and every
process carrying the server's launch id, each checked against its start time (a reused pid is
never signalled). SIGTERM, --grace, SIGKILL, then waits until all are gone and the port is free.
Exit 0 only when every target was found and is gone; 1 on survivors or nothing matched; 2 on bad
usage or an SSH host that cannot be reached or trusted.";

/// Stop exactly the servers named, their whole process trees included; one `kill` record each.
#[derive(Debug, Parser)]
#[command(name = "srv-kill", version, after_help = EXAMPLES)]
struct Args {
    /// Read server records from FILE (repeatable; `-` is stdin). Piped stdin is always read.
    #[arg(long, value_name = "FILE")]
    from: Vec<String>,
    /// Kill this pid and its tree (repeatable)
    #[arg(long, value_name = "N")]
    pid: Vec<u32>,
    /// Kill whoever listens on this TCP port, with their trees (repeatable)
    #[arg(long, value_name = "N")]
    port: Vec<u16>,
    /// Kill processes whose command line matches REGEX, with their trees (never srv-kill, its
    /// callers or the SSH session running it); repeatable
    #[arg(long = "match", value_name = "REGEX")]
    matches: Vec<String>,
    /// Kill every GPU compute process nvidia-smi lists
    #[arg(long)]
    gpu: bool,
    /// Run on this host over SSH: [user@]addr[:port] (server records carry their own host)
    #[arg(long, value_name = "[USER@]ADDR[:PORT]")]
    host: Option<String>,
    #[command(flatten)]
    ssh: SshArgs,
    /// Time between SIGTERM and SIGKILL
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    /// How long to wait for killed processes to release GPU memory (where nvidia-smi exists)
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    gpu_wait: Duration,
    /// List what would be killed; signal nothing
    #[arg(long)]
    dry_run: bool,
    /// Exit 0 when a target matched nothing
    #[arg(long)]
    missing_ok: bool,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    cli::main("srv-kill", || {
        let Some(a) = cli::parse_args::<Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        srv_kill::run(&srv_kill::Config {
            from: a.from,
            pids: a.pid,
            ports: a.port,
            matches: a.matches,
            gpu: a.gpu,
            host: a.host,
            ssh: a.ssh.options(),
            grace: a.grace,
            gpu_wait: a.gpu_wait,
            dry_run: a.dry_run,
            missing_ok: a.missing_ok,
            labels: a.common.labels(),
            strict: a.common.strict,
        })
    })
}
