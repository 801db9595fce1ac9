use clap::{Args, Parser, Subcommand};
use collbench::compute::run::Target;
use collbench::compute::shapes::{GemmShape, parse_shape};
use collbench::compute::{ComputeBackend, GemmConfig, GemmDtype};
use collbench::decode::DecodeConfig;
use collbench::dtype::{Dtype, RedOp};
use collbench::harness::{RunConfig, size_sweep};
use collbench::launch::{self, RankFlags};
use collbench::measure::{Iters, Mode};
use collbench::ops::{Algo, Op, allreduce::Allreduce};
use collbench::{Backend, Job};
use servbench::cli::{self, CommonArgs, Exit, SshArgs};
use servbench::presets;
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

const EXAMPLES: &str = "\
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
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    bench: BenchArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
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
struct P2pArgs {
    /// Bytes of each bandwidth message (K/M/G are 1024-based); latency uses 8 bytes
    #[arg(long, value_parser = cli::parse_size, default_value = "4M")]
    bytes: u64,
    /// --backend nccl: only the copy engine (cuMemcpyPeerAsync) or only NCCL send/recv
    /// (default: both, each pair's records and matrices apart)
    #[arg(long, value_enum)]
    method: Option<P2pMethodArg>,
    #[command(flatten)]
    run: RunArgs,
}

/// `p2p --method`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum P2pMethodArg {
    CopyEngine,
    Nccl,
}

/// Where the compute half runs (`gemm`, `limits`, `decode --compute`).
#[derive(Debug, Args)]
struct ComputeArgs {
    /// cpu: this machine's cores, f32 (figures labelled cpu); cublas: an NVIDIA GPU (needs
    /// libcuda and libcublas at run time). decode: follows --backend (tcp: cpu, nccl: cublas)
    #[arg(long, value_enum)]
    compute_backend: Option<ComputeBackend>,
    /// CPU threads for the GEMMs and the bandwidth passes (default: all)
    #[arg(long)]
    threads: Option<usize>,
    /// GPU to run on (cublas)
    #[arg(long, default_value_t = 0)]
    device: usize,
    /// GEMM element type (default: the card's weights: bf16 or fp8 on cublas; f32 on cpu)
    #[arg(long, value_enum)]
    gemm_dtype: Option<GemmDtype>,
    /// Back-to-back runs of a whole step's GEMM sequence (its launch overhead)
    #[arg(long, default_value_t = 3)]
    step_iters: u32,
}

type ShapeList = Vec<GemmShape>;

fn shape_list(s: &str) -> Result<ShapeList, String> {
    s.split(',').map(parse_shape).collect()
}

#[derive(Debug, Args)]
struct GemmArgs {
    /// Model preset or JSON card whose decode-step GEMMs to time
    #[arg(long, required_unless_present = "shape")]
    model: Option<String>,
    /// Products by hand instead of a card's: MxNxK[,MxNxK...] (Y[m x n] = X[m x k] . W^T)
    #[arg(long, value_parser = shape_list, conflicts_with_all = ["model", "tp", "batch"])]
    shape: Option<ShapeList>,
    /// Hardware preset (or JSON card) whose peaks the figures are set against
    #[arg(long, default_value = "h100")]
    hardware: String,
    /// Tensor-parallel degree: the shapes of one GPU's shard
    #[arg(long)]
    tp: Option<u32>,
    /// Batch sizes (sequences per step): 1,8,64 or 1..64
    #[arg(long, value_parser = cli::u32_list)]
    batch: Option<U32List>,
    /// Timed calls per shape
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iters: u32,
    /// Untimed warm-up calls per shape
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 5)]
    warmup: u32,
    #[command(flatten)]
    compute: ComputeArgs,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, Args)]
struct LimitsArgs {
    /// Hardware preset (or JSON card) whose datasheet bandwidth is set beside the measurement
    #[arg(long, default_value = "h100")]
    hardware: String,
    /// Buffer size (default 1G on a GPU, 256M on the CPU: both far past the last-level cache)
    #[arg(long, value_parser = cli::parse_size)]
    bytes: Option<u64>,
    /// Timed copies and reads
    #[arg(short = 'n', long = "iters", default_value_t = 10)]
    iters: u32,
    /// Untimed warm-up passes
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 2)]
    warmup: u32,
    #[command(flatten)]
    compute: ComputeArgs,
    #[command(flatten)]
    common: CommonArgs,
}

#[derive(Debug, Args)]
struct BenchArgs {
    /// Collective to measure
    #[arg(long, value_enum, default_value = "allreduce")]
    coll: Op,
    /// Smallest size in bytes (K/M/G are 1024-based, as nccl-tests)
    #[arg(short = 'b', long = "minbytes", value_parser = cli::parse_size, default_value = "8")]
    min_bytes: u64,
    /// Largest size in bytes
    #[arg(short = 'e', long = "maxbytes", value_parser = cli::parse_size, default_value = "32M")]
    max_bytes: u64,
    /// Multiply the size by this between steps
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    step_factor: u64,
    /// Reduction operator (allreduce, reduce_scatter)
    #[arg(long = "op", value_enum, default_value = "sum")]
    redop: RedOp,
    /// Root rank (broadcast)
    #[arg(short = 'r', long, default_value_t = 0)]
    root: usize,
    /// Algorithm (tcp backend): auto picks the latency-optimal one below 64 KiB, ring above
    #[arg(long, value_enum, default_value = "auto")]
    algo: Algo,
    #[command(flatten)]
    run: RunArgs,
}

/// Flags `decode` shares with the sweep: timing, dtype and where the ranks run.
#[derive(Debug, Args)]
struct RunArgs {
    /// Timed iterations per size
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iters: u32,
    /// Untimed warmup iterations per size
    #[arg(short = 'w', long = "warmup-iters", default_value_t = 5)]
    warmup: u32,
    /// Element type
    #[arg(short = 'd', long, value_enum)]
    dtype: Option<Dtype>,
    /// pipelined: back-to-back ops (nccl-tests' figure); latency: each op timed alone
    #[arg(long, value_enum)]
    mode: Option<Mode>,
    /// Skip the exact correctness check
    #[arg(long)]
    no_check: bool,
    /// tcp: processes over TCP; nccl: GPUs through NCCL (needs libcuda and libnccl at run time)
    #[arg(long, value_enum, default_value = "tcp")]
    backend: Backend,
    /// Start this many ranks on this host (also written -np, as mpirun)
    #[arg(long = "np", value_name = "N")]
    np: Option<usize>,
    /// GPUs driven by this process, one thread each (nccl backend)
    #[arg(short = 'g', long = "ngpus", default_value_t = 1)]
    gpus: usize,
    /// This process's rank when joining by hand (with --world and --coordinator)
    #[arg(long)]
    rank: Option<usize>,
    /// Number of ranks in the job
    #[arg(long)]
    world: Option<usize>,
    /// HOST:PORT where rank 0 listens and the others join
    #[arg(long)]
    coordinator: Option<String>,
    /// Start one rank on each of these hosts over SSH ([user@]host[:port], comma-separated;
    /// repeat a host for more ranks there; localhost runs here)
    #[arg(long, value_parser = host_list)]
    hosts: Option<StrList>,
    /// Path of the collbench binary on the --hosts (default: this binary's path)
    #[arg(long, value_name = "PATH")]
    remote_bin: Option<String>,
    #[command(flatten)]
    ssh: SshArgs,
    /// Give up on a silent peer (or a rank that never joins) after this long
    #[arg(long, value_parser = cli::parse_duration, default_value = "60s")]
    timeout: Duration,
    #[command(flatten)]
    common: CommonArgs,
}

/// A whole list in one value (`1,8,64`); the alias keeps clap from expecting repeated flags.
type U32List = Vec<u32>;
type StrList = Vec<String>;

fn host_list(s: &str) -> Result<StrList, String> {
    Ok(s.split(',').map(|h| h.trim().to_string()).collect())
}

#[derive(Debug, Args)]
struct DecodeArgs {
    /// Model preset or JSON card (layers, hidden size, parameters), e.g. llama-3.1-70b
    #[arg(long)]
    model: String,
    /// Hardware preset (or JSON card) for the roofline
    #[arg(long, default_value = "h100")]
    hardware: String,
    /// Tensor-parallel degree = ranks (-np defaults to it on the tcp backend)
    #[arg(long)]
    tp: usize,
    /// Batch sizes (sequences per step): 1,8,64 or 1..64
    #[arg(long, value_parser = cli::u32_list, default_value = "1")]
    batch: U32List,
    /// Context length (tokens per sequence) for the KV-cache bytes of the roofline
    #[arg(long, default_value_t = 1024)]
    context: u32,
    /// Also time the step's GEMMs at the same batches (gemm and gemm_step records)
    #[arg(long)]
    compute: bool,
    #[command(flatten)]
    compute_args: ComputeArgs,
    #[command(flatten)]
    run: RunArgs,
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

fn main() -> ExitCode {
    cli::main("collbench", || {
        // mpirun spells it -np; clap's long flags take two dashes.
        let args: Vec<OsString> = std::env::args_os()
            .map(|a| {
                if a == "-np" {
                    OsString::from("--np")
                } else {
                    a
                }
            })
            .collect();
        let Some(cli) = cli::parse_args_from::<Cli, _>(&args)? else {
            return Ok(Exit::Ok);
        };
        let rest: Vec<OsString> = args[1..].to_vec();
        match cli.command {
            None => bench(cli.bench, rest),
            Some(Command::Decode(d)) => decode(*d, rest),
            Some(Command::Gemm(g)) => gemm(g),
            Some(Command::Limits(l)) => limits(l),
            Some(Command::P2p(p)) => p2p(*p, rest),
        }
    })
}

fn job(run: &RunArgs, default_np: Option<usize>, args: Vec<OsString>) -> anyhow::Result<Job> {
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
fn checked_iters(warmup: u32, timed: u32) -> anyhow::Result<Iters> {
    collbench::limits::check_iters("-n/--iters", timed)?;
    collbench::limits::check_iters("-w/--warmup-iters", warmup)?;
    Ok(Iters { warmup, timed })
}

fn bench(b: BenchArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
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

fn decode(d: DecodeArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
    let model = presets::load_model(&d.model).map_err(|e| cli::usage(format!("--model: {e}")))?;
    let hardware =
        presets::load_hardware(&d.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    if d.tp < 1 {
        return Err(cli::usage("--tp must be at least 1"));
    }
    if d.batch.contains(&0) {
        return Err(cli::usage(
            "--batch 0: a decode step runs at least one sequence (give 1 or more)",
        ));
    }
    let iters = checked_iters(d.run.warmup, d.run.iters)?;
    collbench::limits::check_local_ranks("--tp", d.tp)?;
    let dtype = d.run.dtype.unwrap_or(if model.act_bytes >= 4.0 {
        Dtype::F32
    } else {
        Dtype::Bf16
    });
    let sizes: Vec<u64> = d
        .batch
        .iter()
        .map(|&b| collbench::decode::allreduce_bytes(b, model.hidden, dtype.size()))
        .collect();
    let run = RunConfig {
        op: Op::new(&Allreduce),
        algo: Algo::Auto,
        sizes,
        iters,
        dtype,
        redop: RedOp::Sum,
        root: 0,
        mode: d.run.mode.unwrap_or(Mode::Latency),
        check: !d.run.no_check,
        timeout: d.run.timeout,
        labels: d.run.common.labels(),
    };
    // The allreduce runs over tp ranks: tp local processes (tcp) or tp local GPUs (nccl) unless
    // the job is laid out otherwise.
    let (default_np, gpus) = match d.run.backend {
        Backend::Tcp => (Some(d.tp), d.run.gpus),
        Backend::Nccl => (
            None,
            if d.run.np.is_none() && d.run.world.is_none() && d.run.gpus == 1 {
                d.tp
            } else {
                d.run.gpus
            },
        ),
    };
    let compute = if d.compute {
        let backend = d
            .compute_args
            .compute_backend
            .unwrap_or(match d.run.backend {
                Backend::Tcp => ComputeBackend::Cpu,
                Backend::Nccl => ComputeBackend::Cublas,
            });
        let cfg = gemm_config(
            &d.compute_args,
            backend,
            Some(model.clone()),
            hardware.clone(),
            (d.tp as u32, d.batch.clone()),
            iters,
            d.run.common.labels(),
        )?;
        Some((cfg, target(&d.compute_args, backend)))
    } else {
        None
    };
    let mut job = job(&d.run, default_np, args)?;
    job.gpus = gpus;
    let dc = DecodeConfig {
        model,
        hardware,
        tp: d.tp,
        batches: d.batch,
        context: d.context,
        run,
        compute,
    };
    collbench::decode::run(&dc, &job)
}

fn p2p(p: P2pArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
    if p.run.dtype.is_some() || p.run.mode.is_some() || p.run.no_check {
        return Err(cli::usage(
            "--dtype, --mode and --no-check are not for p2p (it moves bytes, times streams and round trips, and checks nothing)",
        ));
    }
    if p.bytes == 0 || p.bytes > collbench::p2p::MAX_BYTES {
        return Err(cli::usage(format!(
            "--bytes {}: give 1 to {} (1G)",
            p.bytes,
            collbench::p2p::MAX_BYTES
        )));
    }
    if p.run.iters == 0 {
        return Err(cli::usage("-n/--iters must be at least 1"));
    }
    let iters = checked_iters(p.run.warmup, p.run.iters)?;
    let run = RunConfig {
        op: Op::named("sendrecv").ok_or_else(|| cli::failure("sendrecv is not registered"))?,
        algo: Algo::Auto,
        sizes: vec![p.bytes],
        iters,
        dtype: Dtype::F32,
        redop: RedOp::Sum,
        root: 0,
        mode: Mode::Pipelined,
        check: false,
        timeout: p.run.timeout,
        labels: p.run.common.labels(),
    };
    let job = job(&p.run, None, args)?;
    let pc = collbench::p2p::P2pConfig {
        bytes: p.bytes,
        run,
        only: p.method.map(|m| match m {
            P2pMethodArg::CopyEngine => servbench::record::P2pMethod::CopyEngine,
            P2pMethodArg::Nccl => servbench::record::P2pMethod::Nccl,
        }),
    };
    collbench::p2p(&pc, &job)
}

fn target(c: &ComputeArgs, backend: ComputeBackend) -> Target {
    Target {
        backend,
        threads: c.threads,
        device: c.device,
    }
}

fn gemm_config(
    c: &ComputeArgs,
    backend: ComputeBackend,
    model: Option<presets::ModelCard>,
    hardware: presets::Hardware,
    (tp, batches): (u32, U32List),
    iters: Iters,
    labels: servbench::record::Labels,
) -> anyhow::Result<GemmConfig> {
    if iters.timed == 0 {
        return Err(cli::usage("-n/--iters must be at least 1"));
    }
    let iters = checked_iters(iters.warmup, iters.timed)?;
    collbench::limits::check_iters("--step-iters", c.step_iters)?;
    let dtype = match c.gemm_dtype {
        Some(d) => d,
        None => GemmDtype::for_card(backend, model.as_ref())
            .map_err(|e| cli::usage(format!("--gemm-dtype: {e}")))?,
    };
    Ok(GemmConfig {
        model,
        hardware,
        tp,
        batches,
        custom: Vec::new(),
        dtype,
        iters,
        step_iters: c.step_iters.max(1),
        labels,
    })
}

fn gemm(g: GemmArgs) -> anyhow::Result<Exit> {
    let hardware =
        presets::load_hardware(&g.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    let model = match &g.model {
        Some(m) => Some(presets::load_model(m).map_err(|e| cli::usage(format!("--model: {e}")))?),
        None => None,
    };
    let backend = g.compute.compute_backend.unwrap_or(ComputeBackend::Cpu);
    let (tp, batches) = match &g.shape {
        Some(_) => (1, vec![1]),
        None => (
            g.tp.unwrap_or(1),
            g.batch.clone().unwrap_or_else(|| vec![1]),
        ),
    };
    let mut cfg = gemm_config(
        &g.compute,
        backend,
        model,
        hardware,
        (tp, batches),
        Iters {
            warmup: g.warmup,
            timed: g.iters,
        },
        g.common.labels(),
    )?;
    if let Some(shapes) = g.shape {
        cfg.batches = vec![shapes.iter().map(|s| s.m).max().unwrap_or(1)];
        cfg.custom = shapes;
    }
    let target = target(&g.compute, backend);
    collbench::compute::run::gemm(&cfg, &target, g.common.strict)
}

fn limits(l: LimitsArgs) -> anyhow::Result<Exit> {
    let hardware =
        presets::load_hardware(&l.hardware).map_err(|e| cli::usage(format!("--hardware: {e}")))?;
    let backend = l.compute.compute_backend.unwrap_or(ComputeBackend::Cpu);
    let bytes = l.bytes.unwrap_or(match backend {
        ComputeBackend::Cpu => 256 << 20,
        ComputeBackend::Cublas => 1 << 30,
    });
    if bytes < 1 << 20 || l.iters == 0 {
        return Err(cli::usage(
            "--bytes must be at least 1M and -n at least 1 (a bandwidth needs a buffer past the caches)",
        ));
    }
    let iters = checked_iters(l.warmup, l.iters)?;
    collbench::compute::run::limits(
        &target(&l.compute, backend),
        &hardware,
        bytes,
        iters,
        &l.common.labels(),
        l.common.strict,
    )
}
