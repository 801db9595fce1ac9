//! The tcp backend: each rank a process, the op run by the collective's tcp algorithm over
//! [`Comm`], timed on the host's clock by the one measure loop (`measure.rs`).

use crate::comm::{Comm, CommError};
use crate::harness::{Measured, RunConfig, buffer, count_wrong};
use crate::measure::{Runner, measure};
use crate::ops::{Algo, Op, Params, Scratch, Shape};
use std::time::Instant;

/// Runs the whole sweep on the tcp backend, handing each size's result to `each` (on every rank).
pub fn sweep(
    comm: &Comm,
    cfg: &RunConfig,
    mut each: impl FnMut(Measured) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let mut scratch = Scratch::default();
    for &size in &cfg.sizes {
        each(measure_size(comm, cfg, size, &mut scratch)?)?;
    }
    Ok(())
}

/// Measures one size (every rank calls this in step); the wrong elements summed over ranks.
fn measure_size(
    comm: &Comm,
    cfg: &RunConfig,
    requested: u64,
    scratch: &mut Scratch,
) -> anyhow::Result<Measured> {
    let params = cfg.params();
    let shape = cfg.op.shape(requested, cfg.dtype, comm.world);
    let algo = cfg
        .op
        .resolve_algo(cfg.algo, shape.bytes)
        .map_err(servbench::cli::usage)?;
    let esz = cfg.dtype.size();
    let mut send = buffer(shape.send_elems, esz, "send")?;
    let recv = buffer(shape.recv_elems, esz, "receive")?;
    cfg.op.fill(comm.rank, &shape, &params, &mut send);
    let mut run = TcpRun {
        comm,
        op: cfg.op,
        algo,
        params,
        shape,
        send,
        recv,
        scratch,
    };
    comm.take_lost_core();
    let sampled = measure(&mut run, cfg.iters, cfg.mode, cfg.check)?;
    let lost_core = comm.take_lost_core();
    let totals = comm
        .sum_f64(&[sampled.wrong as f64, lost_core as f64])
        .map_err(|e| run.failed(e))?;
    Ok(Measured {
        shape,
        algo: algo.name(),
        samples_us: sampled.samples_us,
        wrong: totals[0] as u64,
        lost_core: totals[1] as u64,
    })
}

/// One rank's side of one size: the measure loop's [`Runner`] on the host's clock.
struct TcpRun<'a> {
    comm: &'a Comm,
    op: Op,
    algo: Algo,
    params: Params,
    shape: Shape,
    send: Vec<u8>,
    recv: Vec<u8>,
    scratch: &'a mut Scratch,
}

impl TcpRun<'_> {
    /// The error naming this rank, the op and the size.
    fn failed(&self, e: CommError) -> anyhow::Error {
        servbench::cli::failure(format!(
            "rank {}: {} at {} bytes: {e}",
            self.comm.rank,
            self.op.name(),
            self.shape.bytes
        ))
    }
}

impl Runner for TcpRun<'_> {
    type Mark = Instant;

    fn run_once(&mut self) -> anyhow::Result<()> {
        let done = self.op.run_tcp(
            self.comm,
            self.algo,
            &self.params,
            &self.send,
            &mut self.recv,
            self.scratch,
        );
        done.map_err(|e| self.failed(e))
    }

    fn sync(&mut self) -> anyhow::Result<()> {
        // Each op has finished when run_once returns.
        Ok(())
    }

    fn barrier(&mut self) -> anyhow::Result<()> {
        self.comm.barrier().map_err(|e| self.failed(e))
    }

    fn new_mark(&mut self) -> anyhow::Result<Instant> {
        Ok(Instant::now())
    }

    fn record(&mut self, mark: &mut Instant) -> anyhow::Result<()> {
        *mark = Instant::now();
        Ok(())
    }

    fn elapsed_us(&mut self, from: &Instant, to: &Instant) -> anyhow::Result<f64> {
        Ok(to.duration_since(*from).as_secs_f64() * 1e6)
    }

    fn count_wrong(&mut self) -> anyhow::Result<u64> {
        // Poison the output (all-ones bytes are NaN in every dtype) so a stale result cannot pass.
        self.recv.fill(0xff);
        self.run_once()?;
        Ok(count_wrong(
            self.op,
            self.comm.rank,
            self.comm.world,
            &self.shape,
            &self.params,
            &self.recv,
        ))
    }
}
