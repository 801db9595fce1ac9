//! `collbench p2p`: every ordered pair's bandwidth and latency.

use super::{RunArgs, checked_iters, job};
use clap::Args;
use collbench::dtype::{Dtype, RedOp};
use collbench::harness::RunConfig;
use collbench::measure::Mode;
use collbench::ops::{Algo, Op};
use servbench::cli::{self, Exit};
use std::ffi::OsString;

#[derive(Debug, Args)]
pub struct P2pArgs {
    /// Bytes of each bandwidth message (K/M/G are 1024-based); latency uses 8 bytes
    #[arg(long, value_parser = cli::parse_size, default_value = "4M")]
    pub bytes: u64,
    /// --backend nccl: only the copy engine (cuMemcpyPeerAsync) or only NCCL send/recv
    /// (default: both, each pair's records and matrices apart)
    #[arg(long, value_enum)]
    pub method: Option<P2pMethodArg>,
    #[command(flatten)]
    pub run: RunArgs,
}

/// `p2p --method`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum P2pMethodArg {
    CopyEngine,
    Nccl,
}

pub fn p2p(p: P2pArgs, args: Vec<OsString>) -> anyhow::Result<Exit> {
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
