//! Who runs which rank: this process alone, ranks started here (`-np N`, re-executing this
//! binary), or this process as one rank of a job someone else started (`--rank/--world`, or the
//! variables mpirun, PMI launchers and srun set).

use crate::bootstrap::Identity;
use servbench::cli;
use servbench::ranks::{self, Detected, Launcher};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Set by `-np` on the ranks it starts (flags of the same meaning win).
pub const ENV_RANK: &str = "COLLBENCH_RANK";
pub const ENV_WORLD: &str = "COLLBENCH_WORLD";
pub const ENV_COORDINATOR: &str = "COLLBENCH_COORDINATOR";

/// collbench's own launcher variables (`-np` and `--hosts` set them), looked at before those
/// of mpirun, PMI launchers and srun ([`servbench::ranks::LAUNCHERS`]).
const OWN: &[Launcher] = &[Launcher {
    rank_var: ENV_RANK,
    world_var: ENV_WORLD,
    name: "collbench",
}];

/// What this process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// One rank, no network.
    Alone,
    /// Start `n` ranks on this host and wait for them.
    Local(usize),
    /// Start one rank per listed host (over SSH; `localhost` here) and wait for them.
    Hosts(Vec<String>),
    /// Run as one rank of a job.
    Rank(Identity),
}

/// The rank flags as given.
#[derive(Debug, Clone, Default)]
pub struct RankFlags {
    pub rank: Option<usize>,
    pub world: Option<usize>,
    pub coordinator: Option<String>,
    pub np: Option<usize>,
    /// `--hosts a,b,c`: one rank on each.
    pub hosts: Option<Vec<String>>,
}

/// Decides the role from flags, then environment (`env` looks a variable up): the shared rank
/// detection first, then `--hosts` and `-np`.
pub fn resolve(flags: &RankFlags, env: impl Fn(&str) -> Option<String>) -> anyhow::Result<Role> {
    let given = ranks::Flags {
        rank: flags.rank,
        world: flags.world,
        coordinator: flags.coordinator.clone(),
    };
    match ranks::detect(&given, OWN, ENV_COORDINATOR, env)? {
        Detected::Single => return Ok(Role::Alone),
        Detected::Rank(id) => return Ok(Role::Rank(id)),
        Detected::Nothing => {}
    }
    if let Some(hosts) = &flags.hosts {
        if flags.np.is_some() {
            return Err(cli::usage(
                "-np and --hosts do not go together: --hosts starts one rank per listed host (repeat a host for more)",
            ));
        }
        if hosts.is_empty() || hosts.iter().any(|h| h.trim().is_empty()) {
            return Err(cli::usage(
                "--hosts needs a comma-separated list of [user@]host[:port]",
            ));
        }
        return Ok(Role::Hosts(
            hosts.iter().map(|h| h.trim().to_string()).collect(),
        ));
    }
    if let Some(n) = flags.np {
        crate::limits::check_local_ranks("-np", n)?;
    }
    match flags.np {
        Some(0) => Err(cli::usage("-np must be at least 1")),
        Some(n) if n > 1 => Ok(Role::Local(n)),
        _ => Ok(Role::Alone),
    }
}

/// A port on 127.0.0.1 that was free a moment ago, for `-np` runs.
pub fn free_local_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Starts `n` ranks of this very binary with the same arguments on this host and waits for
/// them. Rank 0 writes the records to our stdout; the others' stdout is discarded. If a rank
/// fails, the others notice (its connections close) and fail within their timeout; any still
/// running after that are killed. The ranks die with this process (SIGTERM, Ctrl-C, a kill):
/// none is left behind. Returns the first failing rank's exit status, if any.
pub fn run_local(
    args: &[std::ffi::OsString],
    n: usize,
    timeout: Duration,
) -> anyhow::Result<Option<(usize, ExitStatus)>> {
    let exe = std::env::current_exe()?;
    let coordinator = format!("127.0.0.1:{}", free_local_port()?);
    let mut children: Vec<Child> = Vec::with_capacity(n);
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    for rank in 0..n {
        let mut c = Command::new(&exe);
        // SAFETY: between fork and exec the child only calls prctl and getppid, both
        // async-signal-safe, and touches no memory shared with the parent.
        unsafe {
            c.pre_exec(move || {
                // This thread (the one waiting for the ranks) dying sends the rank SIGTERM.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The parent may have died before the prctl: then nothing would tell us.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other(
                        "collbench exited while starting ranks",
                    ));
                }
                Ok(())
            });
        }
        c.args(args)
            .env(ENV_RANK, rank.to_string())
            .env(ENV_WORLD, n.to_string())
            .env(ENV_COORDINATOR, &coordinator)
            .env("COLLBENCH_LOCAL_RANK", rank.to_string())
            .stdin(Stdio::null())
            .stdout(if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        match c.spawn() {
            Ok(child) => children.push(child),
            Err(e) => {
                kill_all(&mut children);
                return Err(cli::failure(format!(
                    "cannot start rank {rank} ({}): {e}",
                    exe.display()
                )));
            }
        }
    }
    wait_all(children, timeout)
}

/// Waits for every rank; once one has failed, the rest get `timeout` plus a grace to notice.
pub fn wait_all(
    mut children: Vec<Child>,
    timeout: Duration,
) -> anyhow::Result<Option<(usize, ExitStatus)>> {
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; children.len()];
    let mut first_failure: Option<(usize, ExitStatus)> = None;
    let mut failed_at: Option<Instant> = None;
    while statuses.iter().any(Option::is_none) {
        for (rank, child) in children.iter_mut().enumerate() {
            if statuses[rank].is_some() {
                continue;
            }
            if let Some(status) = child.try_wait()? {
                statuses[rank] = Some(status);
                if !status.success() && first_failure.is_none() {
                    first_failure = Some((rank, status));
                    failed_at = Some(Instant::now());
                }
            }
        }
        let grace_over = failed_at.is_some_and(|t| t.elapsed() > timeout + Duration::from_secs(5));
        if grace_over {
            for (rank, child) in children.iter_mut().enumerate() {
                if statuses[rank].is_none() {
                    cli::warn(format!(
                        "rank {rank} still running after rank failures; killing it (pid {})",
                        child.id()
                    ));
                    let _ = child.kill();
                    statuses[rank] = child.wait().ok();
                }
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    if statuses[0].is_some_and(|s| s.success()) {
        return Ok(None);
    }
    Ok(first_failure)
}

fn kill_all(children: &mut [Child]) {
    for c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn flags_then_launcher_variables_then_np() {
        let none = env_of(&[]);
        assert_eq!(resolve(&RankFlags::default(), &none).unwrap(), Role::Alone);
        let np = RankFlags {
            np: Some(4),
            ..Default::default()
        };
        assert_eq!(resolve(&np, &none).unwrap(), Role::Local(4));
        let ompi = env_of(&[("OMPI_COMM_WORLD_RANK", "2"), ("OMPI_COMM_WORLD_SIZE", "4")]);
        let with_coord = RankFlags {
            coordinator: Some("h:1".into()),
            np: Some(4),
            ..Default::default()
        };
        assert_eq!(
            resolve(&with_coord, &ompi).unwrap(),
            Role::Rank(Identity {
                rank: 2,
                world: 4,
                coordinator: "h:1".into()
            })
        );
        let err = resolve(&RankFlags::default(), &ompi)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--coordinator") && err.contains("mpirun"),
            "{err}"
        );
        let slurm = env_of(&[
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_STEP_ID", "0"),
            (ENV_COORDINATOR, "c:9"),
        ]);
        assert_eq!(
            resolve(&RankFlags::default(), &slurm).unwrap(),
            Role::Rank(Identity {
                rank: 1,
                world: 2,
                coordinator: "c:9".into()
            })
        );
        let pmi = env_of(&[("PMI_RANK", "0"), ("PMI_SIZE", "1")]);
        assert_eq!(resolve(&RankFlags::default(), &pmi).unwrap(), Role::Alone);
        let bad = RankFlags {
            rank: Some(3),
            world: Some(2),
            coordinator: Some("h:1".into()),
            ..Default::default()
        };
        assert!(resolve(&bad, &none).is_err());
        let half = RankFlags {
            rank: Some(0),
            ..Default::default()
        };
        assert!(resolve(&half, &none).is_err());
    }
}
