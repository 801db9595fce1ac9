//! collbench: collectives measured the way nccl-tests does (sizes, algbw/busbw, #wrong), as
//! records, over TCP between processes and hosts or over NCCL on GPUs; and `collbench decode`,
//! which measures exactly the allreduces one decode step needs and sets them beside the step's
//! roofline time: is it latency or is it compute?

pub mod bootstrap;
pub mod comm;
pub mod compute;
pub mod culibs;
pub mod decode;
pub mod dtype;
pub mod harness;
pub mod hosts;
pub mod launch;
pub mod limits;
pub mod measure;
pub mod nccl;
pub mod ops;
pub mod p2p;
pub mod shape;
pub mod tcp;

use clap::ValueEnum;
use harness::{RecordContext, RunConfig};
use launch::Role;
use servbench::cli::{self, Exit};
use servbench::jsonl::{self, Disposition, RecordWriter};
use std::ffi::OsString;

/// Which transport runs the collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    /// Processes over TCP: works everywhere, CPU reductions.
    Tcp,
    /// NCCL on NVIDIA GPUs, loaded at run time.
    Nccl,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Tcp => "tcp",
            Backend::Nccl => "nccl",
        }
    }
}

/// How the job is laid out, besides what it measures.
#[derive(Debug, Clone)]
pub struct Job {
    pub role: Role,
    pub backend: Backend,
    /// GPUs driven by this process (nccl backend, `-g`).
    pub gpus: usize,
    /// Arguments to start more ranks of this binary with (`-np`, `--hosts`): ours, unchanged.
    pub args: Vec<OsString>,
    /// `--hosts`: the collbench binary there (default: this binary's path).
    pub remote_bin: Option<String>,
    /// `--hosts`: how to reach and trust them.
    pub ssh: servbench::exec::SshOptions,
    /// `--strict`: a malformed upstream line is an error, not a warning.
    pub strict_input: bool,
}

impl Job {
    /// The plan for `--hosts`.
    pub fn hosts_plan(&self, hosts: &[String]) -> anyhow::Result<hosts::HostsPlan> {
        let remote_bin = match &self.remote_bin {
            Some(b) => b.clone(),
            None => std::env::current_exe()?.to_string_lossy().into_owned(),
        };
        Ok(hosts::HostsPlan {
            hosts: hosts.to_vec(),
            remote_bin,
            ssh: self.ssh.clone(),
        })
    }
}

/// Set by launchers that know the number of hosts better than the ranks can tell.
pub const ENV_HOSTS: &str = "COLLBENCH_HOSTS";

/// Runs a collective sweep: forwards upstream records, then measures and writes records.
pub fn bench(cfg: &RunConfig, job: &Job) -> anyhow::Result<Exit> {
    // Check every size's algorithm up front so a bad --algo is one usage error, not one per rank.
    for &size in &cfg.sizes {
        let shape = cfg.op.shape(size, cfg.dtype, 2);
        cfg.op
            .resolve_algo(cfg.algo, shape.bytes)
            .map_err(cli::usage)?;
    }
    check_job(job)?;
    check_memory(cfg, job, "-e")?;
    if job.backend == Backend::Nccl {
        if cfg.algo != ops::Algo::Auto {
            return Err(cli::usage(
                "--algo is for the tcp backend: NCCL picks its own (set NCCL_ALGO=Ring|Tree to force it)",
            ));
        }
        report_libraries(job, nccl::check_libraries()?);
    }
    let mut out = RecordWriter::stdout();
    let is_writer = match &job.role {
        Role::Rank(id) => id.rank == 0,
        _ => true,
    };
    if is_writer {
        jsonl::pass_through(job.strict_input, &mut out, |_| Disposition::Forward)?;
    }
    match &job.role {
        Role::Local(n) if job.backend == Backend::Tcp && cfg.root >= *n => Err(cli::usage(
            format!("--root {} but -np {n} starts ranks 0..{}", cfg.root, n - 1),
        )),
        Role::Local(n) => run_local_ranks(job, *n, cfg.timeout),
        Role::Hosts(h) => hosts::run(&job.hosts_plan(h)?, &job.args),
        Role::Alone => run_rank(cfg, job, None, &mut out),
        Role::Rank(id) => run_rank(cfg, job, Some(id), &mut out),
    }
}

/// Runs `collbench p2p` on the job's backend: the TCP pairs ([`p2p::run`]) or one process's
/// GPUs over the copy engine and NCCL ([`nccl::p2p_run::run`]).
pub fn p2p(pc: &p2p::P2pConfig, job: &Job) -> anyhow::Result<Exit> {
    check_job(job)?;
    check_memory(&pc.run, job, "--bytes")?;
    match job.backend {
        Backend::Nccl => nccl::p2p_run::run(pc, job),
        Backend::Tcp => p2p::run(pc, job),
    }
}

/// Flags that do not fit the backend.
pub fn check_job(job: &Job) -> anyhow::Result<()> {
    if job.backend == Backend::Tcp && job.gpus != 1 {
        return Err(cli::usage(
            "-g/--ngpus is for --backend nccl (tcp ranks are processes: use -np)",
        ));
    }
    Ok(())
}

/// Says which NCCL and driver this process loads, once per job: in the process that runs
/// rank 0 (a launcher starting ranks leaves it to them).
pub(crate) fn report_libraries(job: &Job, line: String) {
    match &job.role {
        Role::Alone => cli::info(line),
        Role::Rank(id) if id.rank == 0 => cli::info(line),
        _ => {}
    }
}

/// The buffers of the ranks this process starts or is must fit this host's free memory
/// (`--hosts` ranks check on their own hosts); `flag` names where the sizes came from.
pub fn check_memory(cfg: &RunConfig, job: &Job, flag: &str) -> anyhow::Result<()> {
    let per_process = match job.backend {
        Backend::Tcp => 1,
        Backend::Nccl => job.gpus.max(1),
    };
    let (world, here) = match &job.role {
        Role::Alone => (per_process, per_process),
        Role::Local(n) => (n * per_process, n * per_process),
        Role::Rank(id) => (id.world * per_process, per_process),
        Role::Hosts(_) => return Ok(()),
    };
    limits::check_memory(cfg, world, here, limits::mem_available(), flag)
}

/// `-np N`: start the ranks here and report the first failure's exit code.
pub(crate) fn run_local_ranks(
    job: &Job,
    n: usize,
    timeout: std::time::Duration,
) -> anyhow::Result<Exit> {
    match launch::run_local(&job.args, n, timeout)? {
        None => Ok(Exit::Ok),
        Some((rank, status)) => {
            // The rank printed its own error; say only which one, and pass its code on.
            match status.code() {
                Some(2) => Ok(Exit::Usage),
                Some(_) => Ok(Exit::Failed),
                None => Err(cli::failure(format!(
                    "rank {rank} was killed by a signal ({status})"
                ))),
            }
        }
    }
}

fn run_rank(
    cfg: &RunConfig,
    job: &Job,
    id: Option<&bootstrap::Identity>,
    out: &mut RecordWriter<std::io::Stdout>,
) -> anyhow::Result<Exit> {
    let comm = connect(cfg, id)?;
    let hosts = count_hosts(&comm)?;
    let ranks = match job.backend {
        Backend::Tcp => comm.world,
        Backend::Nccl => comm.world * job.gpus,
    };
    if cfg.root >= ranks {
        return Err(cli::usage(format!(
            "--root {} but the job has {ranks} rank(s) (0..{})",
            cfg.root,
            ranks - 1
        )));
    }
    let ctx = RecordContext {
        backend: job.backend.name(),
        ranks,
        hosts,
    };
    let writes = comm.rank == 0;
    let mut reporter = writes.then(|| harness::Reporter::new(out, cfg, &ctx));
    let swept = sweep(&comm, cfg, job, |m| match reporter.as_mut() {
        Some(rep) => rep.size(&harness::coll_record(cfg, &ctx, &m)),
        None => Ok(()),
    });
    let Some(rep) = reporter else {
        return swept.map(|_| Exit::Ok);
    };
    if let Err(err) = swept {
        // The footer says why the run stopped; the error still ends the process.
        let _ = rep.finish(cfg, &ctx, Some(format!("{err:#}")));
        return Err(err);
    }
    let wrong = rep.finish(cfg, &ctx, None)?;
    if wrong > 0 {
        return Err(cli::failure(format!(
            "{wrong} wrong element(s) in the {} results (see the #wrong column)",
            cfg.op.name()
        )));
    }
    Ok(Exit::Ok)
}

/// Runs `cfg`'s sizes on the job's backend, handing each result to `each` on every rank.
pub fn sweep(
    comm: &comm::Comm,
    cfg: &RunConfig,
    job: &Job,
    each: impl FnMut(harness::Measured) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match job.backend {
        Backend::Tcp => tcp::sweep(comm, cfg, each),
        Backend::Nccl => nccl::sweep(comm, cfg, job.gpus, each),
    }
}

/// This rank's connections: the bootstrap for a job, none alone.
pub fn connect(cfg: &RunConfig, id: Option<&bootstrap::Identity>) -> anyhow::Result<comm::Comm> {
    Ok(match id {
        Some(id) => bootstrap::connect(id, cfg.fingerprint(), cfg.timeout)
            .map_err(|e| cli::failure(format!("rank {}: {e:#}", id.rank)))?,
        None => comm::Comm::new(0, 1, vec![None], cfg.timeout)?,
    })
}

/// Distinct hosts among the ranks (by host name), unless a launcher said.
pub fn count_hosts(comm: &comm::Comm) -> anyhow::Result<u32> {
    if let Some(n) = std::env::var(ENV_HOSTS).ok().and_then(|v| v.parse().ok()) {
        return Ok(n);
    }
    let name = servbench::ranks::hostname();
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let mut hashes = vec![hash];
    if comm.rank == 0 {
        for peer in 1..comm.world {
            let mut buf = [0u8; 8];
            comm.recv(peer, &mut buf)?;
            hashes.push(u64::from_le_bytes(buf));
        }
    } else {
        comm.send(0, &hash.to_le_bytes())?;
    }
    hashes.sort_unstable();
    hashes.dedup();
    Ok(hashes.len() as u32)
}
