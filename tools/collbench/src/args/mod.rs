//! collbench's command line: the flags of the sweep and of each subcommand, each subcommand's
//! flags in its own file with what turns them into the library's config. `main.rs` only parses
//! and hands over.

mod compute;
mod decode;
mod p2p;

use clap::{Args, Parser, Subcommand};
use collbench::dtype::{Dtype, RedOp};
use collbench::harness::{RunConfig, size_sweep};
use collbench::launch::{self, RankFlags};
use collbench::measure::{Iters, Mode};
use collbench::ops::{Algo, Op};
use collbench::{Backend, Job};
use servbench::cli::{self, CommonArgs, Exit, SshArgs};
use std::ffi::OsString;
use std::time::Duration;

pub use compute::{GemmArgs, LimitsArgs, gemm, limits};
pub use decode::{DecodeArgs, decode};
pub use p2p::{P2pArgs, p2p};

pub const EXAMPLES: &str = "\
Examples:
  collbench -np 4 -b 8 -e 64M -f 2                  allreduce over 4 local tcp ranks
  collbench -np 2 --coll allgather --dtype bf16     allgather, bf16
  collbench -np 4 -b 8 -e 8 -n 1000 --mode latency  per-op latency percentiles at 8 bytes
  collbench --backend nccl -g 8 -b 8 -e 1G          NCCL on 8 local GPUs
  collbench --rank 1 --world 2 --coordinator hostA:29500   join a job by hand (rank 0 listens there)
  mpirun -np 8 collbench --coordinator hostA:29500  under mpirun (OMPI_COMM_WORLD_RANK/SIZE)
  collbench --hosts gpu1,gpu2 -b 8 -e 1G            one rank per host, started over SSH
  collbench decode --model llama-3.1-70b --tp 8 --batch 1,8,64
  collbench decode --model llama-3.1-8b --tp 2 --batch 1,8 --compute   both halves of a step
  collbench gemm --model llama-3.1-8b --tp 2 --batch 1,8,64   a step's GEMMs (CPU)
  collbench gemm --compute-backend cublas --model kimi-k2 --tp 8 --batch 1,64
  collbench gemm --shape 1024x1024x1024 -n 10        one product, by hand
  collbench p2p -np 4 --bytes 4M                    every pair's bandwidth and latency matrix
  collbench p2p --backend nccl -g 8                 the same between 8 GPUs: copy engine and NCCL
  collbench limits --compute-backend cublas --hardware h200   bandwidth and launch, measured
Pipeline:
  srv-launch ... | collbench -np 8 -b 8 -e 256M | summarize";

/// Collectives measured the way nccl-tests does, as JSON-line records (`coll` per size, then a
/// `coll_run` footer); nccl-tests' table on stderr.
#[derive(Debug, Parser)]
#[command(name = "collbench", version, after_help = EXAMPLES, args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Allreduces at one decode step's sizes, beside the step's roofline time
    Decode(Box<DecodeArgs>),
    /// The GEMMs of one decode step (or --shape), timed on the CPU or through cuBLAS
    Gemm(GemmArgs),
    /// Memory bandwidth (copy, read) and launch cost, measured
    Limits(LimitsArgs),
    /// Bandwidth (one way, both ways) and latency of every ordered pair of ranks, as matrices
    P2p(Box<P2pArgs>),
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Collective to measure
    #[arg(long, value_enum, default_value = "allreduce")]
    pub coll: Op,
    /// Smallest size in bytes (K/M/G are 1024-based, as nccl-tests)
    #[arg(short = 'b', long = "minbytes", value_parser = cli::parse_size, default_value = "8")]
    pub min_bytes: u64,
    /// Largest size in bytes
    #[arg(short = 'e', long = "maxbytes", value_parser = cli::parse_size, default_value = "32M")]
    pub max_bytes: u64,
    /// Multiply the size by this between steps
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    pub step_factor: u64,
    /// Reduction operator (allreduce, reduce_scatter)
    #[arg(long = "op", value_enum, default_value = "sum")]
    pub redop: RedOp,
    /// Root rank (broadcast)
    #[arg(short = 'r', long, default_value_t = 0)]
    pub root: usize,
    /// Algorithm (tcp backend): auto picks the latency-optimal one below 64 KiB, ring above
    #[arg(long, value_enum, default_value = "auto")]
    pub algo: Algo,
    #[command(flatten)]
    pub run: RunArgs,
}

/// Flags `decode` shares with the sweep: timing, dtype and where the ranks run.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Timed iterations per size
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: u32,
    /// Untimed warmup iterations per size
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 5)]
    pub warmup: u32,
    /// Element type
    #[arg(short = 'd', long, value_enum)]
    pub dtype: Option<Dtype>,
    /// pipelined: back-to-back ops (nccl-tests' figure); latency: each op timed alone
    #[arg(long, value_enum)]
    pub mode: Option<Mode>,
    /// Skip the exact correctness check
    #[arg(long)]
    pub no_check: bool,
    /// tcp: processes over TCP; nccl: GPUs through NCCL (needs libcuda and libnccl at run time)
    #[arg(long, value_enum, default_value = "tcp")]
    pub backend: Backend,
    /// Start this many ranks on this host (also written -np, as mpirun)
    #[arg(long = "np", value_name = "N")]
    pub np: Option<usize>,
    /// GPUs driven by this process, one thread each (nccl backend)
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    pub gpus: usize,
    /// This process's rank when joining by hand (with --world and --coordinator)
    #[arg(long)]
    pub rank: Option<usize>,
    /// Number of ranks in the job
    #[arg(long)]
    pub world: Option<usize>,
    /// HOST:PORT where rank 0 listens and the others join
    #[arg(long)]
    pub coordinator: Option<String>,
    /// Start one rank on each of these hosts over SSH ([user@]host[:port], comma-separated;
    /// repeat a host for more ranks there; localhost runs here)
    #[arg(long, value_parser = host_list)]
    pub hosts: Option<StrList>,
    /// Path of the collbench binary on the --hosts (default: this binary's path)
    #[arg(long, value_name = "PATH")]
    pub remote_bin: Option<String>,
    #[command(flatten)]
    pub ssh: SshArgs,
    /// Give up on a silent peer (or a rank that never joins) after this long
    #[arg(long, value_parser = cli::parse_duration, default_value = "60s")]
    pub timeout: Duration,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A whole list in one value (`1,8,64`); the alias keeps clap from expecting repeated flags.
pub type U32List = Vec<u32>;
pub type StrList = Vec<String>;

pub fn host_list(s: &str) -> Result<StrList, String> {
    Ok(s.split(',').map(|h| h.trim().to_string()).collect())
}

impl RunArgs {
    fn rank_flags(&self, default_np: Option<usize>) -> RankFlags {
        RankFlags {
            rank: self.rank,
            world: self.world,
            coordinator: self.coordinator.clone(),
            np: if self.hosts.is_some() {
                self.np
            } else {
                self.np.or(default_np)
            },
            hosts: self.hosts.clone(),
        }
    }
}

pub fn job(run: &RunArgs, default_np: Option<usize>, args: Vec<OsString>) -> anyhow::Result<Job> {
    let role = launch::resolve(&run.rank_flags(default_np), |k| std::env::var(k).ok())?;
    Ok(Job {
        role,
        backend: run.backend,
        gpus: run.gpus,
        args,
        remote_bin: run.remote_bin.clone(),
        ssh: run.ssh.options(),
        strict_input: run.common.strict,
    })
}

/// `-w` and `-n`, bounded (each timed iteration keeps a sample).
pub fn checked_iters(warmup: u32, timed: u32) -> anyhow::Result<Iters> {
    collbench::limits::check_iters("-n/--iters", timed)?;
    collbench::limits::check_iters("-w/--warmup-iters", warmup)?;
    Ok(Iters { warmup, timed })
}

pub fn bench(b: BenchArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
    let iters = checked_iters(b.run.warmup, b.run.iters)?;
    let sizes = size_sweep(b.min_bytes, b.max_bytes, b.step_factor).map_err(cli::usage)?;
    let cfg = RunConfig {
        op: b.coll,
        algo: b.algo,
        sizes,
        iters,
        dtype: b.run.dtype.unwrap_or(Dtype::F32),
        redop: b.redop,
        root: b.root,
        mode: b.run.mode.unwrap_or(Mode::Pipelined),
        check: !b.run.no_check,
        timeout: b.run.timeout,
        labels: b.run.common.labels(),
    };
    let job = job(&b.run, None, args)?;
    collbench::bench(&cfg, &job)
}
