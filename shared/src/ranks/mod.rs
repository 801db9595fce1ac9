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
