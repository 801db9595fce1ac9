//! Processes of one job on many machines, under the launchers people already run: who this
//! process is (its rank and the world size, from flags or from the variables mpirun, PMI
//! launchers and srun set), how the ranks find each other (rank 0 listens on the coordinator
//! address, the others join it: [`rendezvous`]), small framed messages over those connections
//! ([`frame`]) and how far each rank's clock is from rank 0's ([`clock`]). collbench builds its
//! collectives' mesh on this; loadgen synchronizes its load points through it.
//!
//! Uses `diag` only.

pub mod clock;
pub mod frame;
pub mod rendezvous;

use crate::diag;

/// Who this process is in a job of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub rank: usize,
    pub world: usize,
    /// `host:port` where rank 0 listens, reachable from every rank.
    pub coordinator: String,
}

/// A launcher's variables: the rank, the world size, and the launcher's name in messages.
#[derive(Debug, Clone, Copy)]
pub struct Launcher {
    pub rank_var: &'static str,
    pub world_var: &'static str,
    pub name: &'static str,
}

/// The launchers every tool understands, in the order they are looked at.
pub const LAUNCHERS: &[Launcher] = &[
    Launcher {
        rank_var: "OMPI_COMM_WORLD_RANK",
        world_var: "OMPI_COMM_WORLD_SIZE",
        name: "Open MPI's mpirun",
    },
    Launcher {
        rank_var: "MV2_COMM_WORLD_RANK",
        world_var: "MV2_COMM_WORLD_SIZE",
        name: "MVAPICH2's mpirun_rsh or mpiexec",
    },
    Launcher {
        rank_var: "PMI_RANK",
        world_var: "PMI_SIZE",
        name: "a PMI launcher (MPICH, Intel MPI)",
    },
    Launcher {
        rank_var: "SLURM_PROCID",
        world_var: "SLURM_NTASKS",
        name: "srun",
    },
];

/// Slurm's step ids from here up are its special steps (the batch script 0xfffffffe, the
/// extern step 0xffffffff, pending 0xfffffffd, the interactive step 0xfffffffa), not srun's.
const SLURM_FIRST_SPECIAL_STEP: u64 = 0xffff_fff0;

/// Whether this process is a task of an srun step. The shell of an sbatch script has the
/// job's SLURM_PROCID=0 and SLURM_NTASKS too, but no srun ran: srun sets SLURM_STEP_ID to the
/// step's number, the batch shell has none or the batch step's special id.
pub fn is_srun_task(env: &impl Fn(&str) -> Option<String>) -> bool {
    ["SLURM_STEP_ID", "SLURM_STEPID"]
        .iter()
        .find_map(|v| env(v))
        .and_then(|id| id.trim().parse::<u64>().ok())
        .is_some_and(|id| id < SLURM_FIRST_SPECIAL_STEP)
}

/// The local-rank variables of the launchers, innermost first: each launcher's own, then
/// torchrun's, then Slurm's (which every process inherits inside an allocation, so under
/// Hydra or mpirun every rank of a node would read SLURM_LOCALID=0).
const LOCAL_RANK_VARS: &[&str] = &[
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "PMI_LOCAL_RANK",
    "LOCAL_RANK",
    "SLURM_LOCALID",
];

/// This process's index among the job's processes on its host, from the launcher that
/// started it (SLURM_LOCALID only in an srun task), and the variable it came from.
pub fn local_rank(env: impl Fn(&str) -> Option<String>) -> Option<(usize, &'static str)> {
    LOCAL_RANK_VARS
        .iter()
        .filter(|v| **v != "SLURM_LOCALID" || is_srun_task(&env))
        .find_map(|v| Some((env(v)?.trim().parse().ok()?, *v)))
}

/// The rank flags as given (`--rank`, `--world`, `--coordinator`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flags {
    pub rank: Option<usize>,
    pub world: Option<usize>,
    pub coordinator: Option<String>,
}

/// What the flags and the environment say about this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detected {
    /// Neither rank flags nor a launcher's variables (or a launcher's world of one): the tool
    /// decides (alone, or ranks of its own).
    Nothing,
    /// `--world 1`: a job of one, no network.
    Single,
    /// One rank of a job.
    Rank(Identity),
}

/// Decides from the flags, then the variables of `own` launchers (a tool's own, looked at
/// first), then [`LAUNCHERS`]. `coordinator_env` is the tool's variable naming the
/// coordinator when `--coordinator` is not given; `env` looks a variable up.
pub fn detect(
    flags: &Flags,
    own: &[Launcher],
    coordinator_env: &str,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Detected> {
    let coordinator = flags.coordinator.clone().or_else(|| env(coordinator_env));
    if flags.world == Some(1) && flags.rank.is_none_or(|r| r == 0) {
        // `--world 1` alone: run as a job of one whatever a launcher says.
        return Ok(Detected::Single);
    }
    if flags.rank.is_some() || flags.world.is_some() {
        let (Some(rank), Some(world)) = (flags.rank, flags.world) else {
            return Err(diag::usage(
                "--rank and --world go together (and --coordinator HOST:PORT where rank 0 listens)",
            ));
        };
        return identity(rank, world, coordinator, "--rank/--world");
    }
    for l in own.iter().chain(LAUNCHERS) {
        if l.rank_var == "SLURM_PROCID" && !is_srun_task(&env) {
            // An sbatch script's own shell: the job's variables, but no srun task.
            continue;
        }
        if let (Some(r), Some(w)) = (env(l.rank_var), env(l.world_var)) {
            let parse = |name: &str, v: &str| {
                v.trim().parse::<usize>().map_err(|_| {
                    diag::usage(format!("{name}='{v}' is not a number (set by {})", l.name))
                })
            };
            let (rank, world) = (parse(l.rank_var, &r)?, parse(l.world_var, &w)?);
            if world <= 1 {
                return Ok(Detected::Nothing);
            }
            return identity(rank, world, coordinator, l.name);
        }
    }
    Ok(Detected::Nothing)
}

fn identity(
    rank: usize,
    world: usize,
    coordinator: Option<String>,
    from: &str,
) -> anyhow::Result<Detected> {
    if world == 0 || rank >= world {
        return Err(diag::usage(format!(
            "rank {rank} is outside a world of {world} (from {from})"
        )));
    }
    if world == 1 {
        return Ok(Detected::Single);
    }
    let Some(coordinator) = coordinator else {
        return Err(diag::usage(format!(
            "running as rank {rank} of {world} (from {from}) needs --coordinator HOST:PORT: where rank 0 listens, reachable from every rank (or --world 1 to run alone)"
        )));
    };
    Ok(Detected::Rank(Identity {
        rank,
        world,
        coordinator,
    }))
}

/// This machine's host name (as the kernel has it), for labels and messages.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Splits `total` over `world` parts, the first `total % world` parts one larger: rank
/// `rank`'s part. The parts add up to `total` exactly.
pub fn share(total: u64, world: usize, rank: usize) -> u64 {
    let world = world.max(1) as u64;
    let rank = rank as u64;
    total / world + u64::from(rank < total % world)
}

/// A seed of its own for each rank, derived from the job's (splitmix64 of seed and rank), so
/// ranks draw independent streams and the job stays reproducible from one `--seed`.
pub fn rank_seed(seed: u64, rank: usize) -> u64 {
    let mut z = seed ^ (rank as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
