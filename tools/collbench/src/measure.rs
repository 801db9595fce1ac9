//! The one measure loop every backend runs for one size (nccl-tests' `BenchTime`): warmup,
//! the start barrier, the two timing modes and the exact check. A backend supplies the small
//! [`Runner`] trait: run the op once, wait for it, a barrier, a clock, and the check; the tcp
//! backend's clock is the host's, the nccl backend's is CUDA events on the GPU's stream.

use clap::ValueEnum;

/// How ops are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Back-to-back ops, time per op = total / iterations (nccl-tests' default figure).
    Pipelined,
    /// A barrier before each op and the op timed alone: percentiles of single ops, what a
    /// decode step pays for each of its allreduces.
    Latency,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Pipelined => "pipelined",
            Mode::Latency => "latency",
        }
    }
}

/// How many times a timed loop runs: `warmup` untimed calls, then `timed` timed ones (`-w`,
/// `-n`). Named fields, so the two counts cannot be swapped by position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Iters {
    pub warmup: u32,
    pub timed: u32,
}

/// One rank's side of one op at one size on one backend: everything [`measure`] needs.
pub trait Runner {
    /// A point in time on the backend's clock (an `Instant`, a CUDA event).
    type Mark;

    /// Starts the op once (on a GPU: enqueues it on the stream).
    fn run_once(&mut self) -> anyhow::Result<()>;

    /// Waits until every op started so far has finished (nothing to wait for on the host).
    fn sync(&mut self) -> anyhow::Result<()>;

    /// Waits until the op just run has landed where this clock cannot see it (a stream's last
    /// message at its receiver); called before the mark that ends the timed ops. Nothing to
    /// wait for where the op is done when it returns, or the clock is the GPU's.
    fn settle(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Waits until every rank measured together has reached this point.
    fn barrier(&mut self) -> anyhow::Result<()>;

    /// A mark to [`Runner::record`] into later: made before the timed loop, so that making
    /// one (cuEventCreate) is never inside it.
    fn new_mark(&mut self) -> anyhow::Result<Self::Mark>;

    /// Sets `mark` to now, in the order of the ops started.
    fn record(&mut self, mark: &mut Self::Mark) -> anyhow::Result<()>;

    /// Microseconds from `from` to `to`, both recorded and synced.
    fn elapsed_us(&mut self, from: &Self::Mark, to: &Self::Mark) -> anyhow::Result<f64>;

    /// Poisons the output, runs the op once more and counts the elements of the result that
    /// differ from the exactly known one (on this rank).
    fn count_wrong(&mut self) -> anyhow::Result<u64>;
}

/// What [`measure`] found on one rank: its per-op times and its wrong elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// Per-op times in microseconds, one per timed iteration.
    pub samples_us: Vec<f64>,
    /// Wrong elements on this rank (0 when not checked).
    pub wrong: u64,
}

/// Measures one size: `iters.warmup` untimed runs, a barrier, `iters.timed` timed runs in
/// `mode`, then the check when `check` is set.
pub fn measure<R: Runner>(
    run: &mut R,
    iters: Iters,
    mode: Mode,
    check: bool,
) -> anyhow::Result<Sampled> {
    for _ in 0..iters.warmup {
        run.run_once()?;
    }
    run.sync()?;
    run.barrier()?;
    let timed = iters.timed as usize;
    let mut samples_us = Vec::with_capacity(timed);
    match mode {
        Mode::Pipelined => {
            // One mark before the first op and one after each: op i's time is the gap between
            // marks i and i+1.
            let mut marks = (0..=timed)
                .map(|_| run.new_mark())
                .collect::<anyhow::Result<Vec<_>>>()?;
            run.record(&mut marks[0])?;
            for (i, mark) in marks[1..].iter_mut().enumerate() {
                run.run_once()?;
                if i + 1 == timed {
                    run.settle()?;
                }
                run.record(mark)?;
            }
            run.sync()?;
            for pair in marks.windows(2) {
                samples_us.push(run.elapsed_us(&pair[0], &pair[1])?);
            }
        }
        Mode::Latency => {
            let mut start = run.new_mark()?;
            let mut end = run.new_mark()?;
            for _ in 0..timed {
                run.barrier()?;
                run.record(&mut start)?;
                run.run_once()?;
                run.settle()?;
                run.record(&mut end)?;
                run.sync()?;
                samples_us.push(run.elapsed_us(&start, &end)?);
            }
        }
    }
    let wrong = if check { run.count_wrong()? } else { 0 };
    Ok(Sampled { samples_us, wrong })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner that logs what the loop asks of it, on a clock that advances one tick (1 us)
    /// per op: the loop's order and sample count are checked without timing anything.
    #[derive(Default)]
    struct Log {
        calls: Vec<&'static str>,
        clock: u64,
        wrong: u64,
        /// Log `settle` too (a runner whose op lands after it returns).
        settles: bool,
    }

    impl Runner for Log {
        type Mark = u64;
        fn run_once(&mut self) -> anyhow::Result<()> {
            self.calls.push("run");
            self.clock += 1;
            Ok(())
        }
        fn sync(&mut self) -> anyhow::Result<()> {
            self.calls.push("sync");
            Ok(())
        }
        fn barrier(&mut self) -> anyhow::Result<()> {
            self.calls.push("barrier");
            Ok(())
        }
        fn settle(&mut self) -> anyhow::Result<()> {
            if self.settles {
                self.calls.push("settle");
                self.clock += 1;
            }
            Ok(())
        }
        fn new_mark(&mut self) -> anyhow::Result<u64> {
            Ok(0)
        }
        fn record(&mut self, mark: &mut u64) -> anyhow::Result<()> {
            self.calls.push("mark");
            *mark = self.clock;
            Ok(())
        }
        fn elapsed_us(&mut self, from: &u64, to: &u64) -> anyhow::Result<f64> {
            Ok((to - from) as f64)
        }
        fn count_wrong(&mut self) -> anyhow::Result<u64> {
            self.calls.push("check");
            Ok(self.wrong)
        }
    }

    const TWO_AFTER_ONE: Iters = Iters {
        warmup: 1,
        timed: 2,
    };

    #[test]
    fn pipelined_times_back_to_back_ops_after_the_warmup_and_one_barrier() {
        let mut log = Log {
            wrong: 3,
            ..Log::default()
        };
        let got = measure(&mut log, TWO_AFTER_ONE, Mode::Pipelined, true).unwrap();
        assert_eq!(
            log.calls,
            [
                "run", "sync", "barrier", "mark", "run", "mark", "run", "mark", "sync", "check"
            ]
        );
        assert_eq!(got.samples_us, [1.0, 1.0]);
        assert_eq!(got.wrong, 3);
    }

    /// p2p's stream: the last message's arrival (its ack) is inside the timed span, once.
    #[test]
    fn a_runner_that_settles_is_settled_before_the_last_mark_only() {
        let mut log = Log {
            settles: true,
            ..Log::default()
        };
        let got = measure(&mut log, TWO_AFTER_ONE, Mode::Pipelined, false).unwrap();
        assert_eq!(
            log.calls,
            [
                "run", "sync", "barrier", "mark", "run", "mark", "run", "settle", "mark", "sync"
            ]
        );
        assert_eq!(got.samples_us, [1.0, 2.0]);
    }

    #[test]
    fn latency_puts_a_barrier_before_each_timed_op_and_skips_an_unasked_check() {
        let mut log = Log {
            wrong: 3,
            ..Log::default()
        };
        let got = measure(&mut log, TWO_AFTER_ONE, Mode::Latency, false).unwrap();
        assert_eq!(
            log.calls,
            [
                "run", "sync", "barrier", "barrier", "mark", "run", "mark", "sync", "barrier",
                "mark", "run", "mark", "sync"
            ]
        );
        assert_eq!(got.samples_us, [1.0, 1.0]);
        assert_eq!(got.wrong, 0);
    }
}
