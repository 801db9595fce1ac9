//! `--hosts a,b,c`: one rank on each listed host (repeat a host for more ranks there), started
//! through the shared remote-execution trait (`servbench::exec`: SSH, or this machine for
//! `localhost`). Rank 0 listens on a free port of the first host; every rank runs this same
//! binary (`--remote-bin`, default: this one's path) with the same arguments, told its rank
//! through the environment. Rank 0's records come back to our stdout, every rank's stderr to
//! ours, once the ranks have finished.

use crate::launch::{ENV_COORDINATOR, ENV_RANK, ENV_WORLD};
use servbench::cli::{self, Exit};
use servbench::exec::{self, Exec, HostSpec, SshOptions, shell_quote};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::time::Duration;

/// Where the ranks go and how to reach them.
#[derive(Debug, Clone)]
pub struct HostsPlan {
    pub hosts: Vec<String>,
    /// The collbench binary on the remote hosts.
    pub remote_bin: String,
    pub ssh: SshOptions,
}

/// The address other hosts reach `host` at (the SSH target's address; loopback for `localhost`).
pub fn reachable_addr(host: &str) -> Result<String, String> {
    if host == "localhost" {
        return Ok("127.0.0.1".into());
    }
    let spec = HostSpec::parse(host)?;
    Ok(if spec.addr.contains(':') {
        format!("[{}]", spec.addr)
    } else {
        spec.addr
    })
}

/// Distinct machines among `hosts` (by address and SSH port).
pub fn distinct_hosts(hosts: &[String]) -> usize {
    let keys: std::collections::BTreeSet<String> = hosts
        .iter()
        .map(|h| match HostSpec::parse(h) {
            Ok(s) if h != "localhost" => format!("{}:{}", s.addr, s.port),
            _ => h.clone(),
        })
        .collect();
    keys.len()
}

/// The shell command that starts rank `rank` on its host.
pub fn rank_script(
    plan: &HostsPlan,
    args: &[OsString],
    rank: usize,
    local_rank: usize,
    coordinator: &str,
) -> String {
    let mut words = vec![
        format!("{ENV_RANK}={rank}"),
        format!("{ENV_WORLD}={}", plan.hosts.len()),
        format!("{ENV_COORDINATOR}={}", shell_quote(coordinator)),
        format!("{}={}", crate::ENV_HOSTS, distinct_hosts(&plan.hosts)),
        format!("COLLBENCH_LOCAL_RANK={local_rank}"),
        "exec".to_string(),
        shell_quote(&plan.remote_bin),
    ];
    words.extend(args.iter().map(|a| shell_quote(&a.to_string_lossy())));
    words.push("</dev/null".into());
    words.join(" ")
}

/// The most of one rank's output (records on stdout, messages on stderr) that is kept.
const RANK_OUTPUT_CAP: usize = 256 << 20;

/// Starts every rank, waits for all, relays rank 0's records and everyone's messages.
pub fn run(plan: &HostsPlan, args: &[OsString]) -> anyhow::Result<Exit> {
    let mut opts = plan.ssh.clone();
    // A rank other than 0 prints nothing until it ends: the SSH read must outwait the run.
    opts.command_timeout = Duration::from_secs(7 * 24 * 3600);
    let mut execs: Vec<Box<dyn Exec>> = Vec::with_capacity(plan.hosts.len());
    for host in &plan.hosts {
        execs.push(exec::connect(Some(host), &opts)?);
    }
    let port = execs[0].free_port()?;
    let addr = reachable_addr(&plan.hosts[0]).map_err(cli::usage)?;
    let coordinator = format!("{addr}:{port}");
    // Each rank runs at most as long as the SSH read waits, and its output is capped.
    let bounds = exec::Bounds::new(opts.command_timeout, RANK_OUTPUT_CAP);
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let scripts: Vec<String> = plan
        .hosts
        .iter()
        .enumerate()
        .map(|(rank, host)| {
            let local = seen.entry(host.as_str()).or_insert(0);
            *local += 1;
            rank_script(plan, args, rank, *local - 1, &coordinator)
        })
        .collect();
    let outputs: Vec<Result<exec::Output, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = execs
            .iter()
            .zip(&scripts)
            .map(|(e, script)| {
                scope.spawn(move || e.run(script, bounds).map_err(|err| err.to_string()))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("rank thread panicked".into()))
            })
            .collect()
    });
    let mut first_failure: Option<(usize, i32)> = None;
    for (rank, out) in outputs.iter().enumerate() {
        match out {
            Ok(o) => {
                if rank == 0 {
                    std::io::stdout()
                        .write_all(&o.stdout)
                        .map_err(servbench::jsonl::OutputError::from_io)?;
                }
                let err = String::from_utf8_lossy(&o.stderr);
                if !err.trim().is_empty() {
                    eprint!("{err}");
                }
                if o.status != 0 && first_failure.is_none() {
                    first_failure = Some((rank, o.status));
                }
            }
            Err(e) => {
                cli::error(format!("rank {rank} on {}: {e}", plan.hosts[rank]));
                first_failure.get_or_insert((rank, 1));
            }
        }
    }
    match first_failure {
        None => Ok(Exit::Ok),
        Some((0, 0)) => Ok(Exit::Ok),
        Some((_, 2)) => Ok(Exit::Usage),
        Some(_) if matches!(&outputs[0], Ok(o) if o.status == 0) => Ok(Exit::Ok),
        Some(_) => Ok(Exit::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_scripts_carry_identity_and_quoted_arguments() {
        let plan = HostsPlan {
            hosts: vec![
                "u@10.0.0.1:2222".into(),
                "u@10.0.0.2".into(),
                "u@10.0.0.2".into(),
            ],
            remote_bin: "/opt/sb/collbench".into(),
            ssh: SshOptions::default(),
        };
        let args: Vec<OsString> = ["-b", "8", "--label", "run=a b"]
            .iter()
            .map(OsString::from)
            .collect();
        let s = rank_script(&plan, &args, 2, 1, "10.0.0.1:4000");
        assert_eq!(
            s,
            "COLLBENCH_RANK=2 COLLBENCH_WORLD=3 COLLBENCH_COORDINATOR=10.0.0.1:4000 COLLBENCH_HOSTS=2 \
             COLLBENCH_LOCAL_RANK=1 exec /opt/sb/collbench -b 8 --label 'run=a b' </dev/null"
        );
        assert_eq!(reachable_addr("u@10.0.0.1:2222").unwrap(), "10.0.0.1");
        assert_eq!(reachable_addr("localhost").unwrap(), "127.0.0.1");
        assert_eq!(reachable_addr("u@[::1]:22").unwrap(), "[::1]");
        assert_eq!(distinct_hosts(&plan.hosts), 2);
    }
}
