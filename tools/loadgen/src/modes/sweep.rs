//! The sweep matrix: every load of `-c`, `-r` or `--trace-speed`, each `--repeat` times.

use crate::pacing::Load;
use crate::run::point::{Run, Work};
use crate::stop::stopped;
use servbench::record::PointKey;
use std::io::Write;

impl<W: Write> Run<'_, W> {
    /// Runs each load of the sweep for one workload (`key`), `--repeat` times each.
    pub(crate) async fn sweep(
        &mut self,
        loads: &[Load],
        index: &mut u32,
        key: PointKey,
        work: &Work,
    ) -> anyhow::Result<()> {
        let stop = self.ctx.stop.clone();
        for &load in loads {
            for repeat in 0..self.plan.budget.repeat {
                let mut key = key.clone();
                key.index = *index;
                key.repeat = repeat;
                *index += 1;
                // A stop after the last point ended: no next point, not even an empty one (the
                // ranks of a job decide together, in the phase; a ramp or a search writes its
                // record from the cut point).
                if self.ranks.is_none() && stop.is_stopped() {
                    return Err(stopped(&stop));
                }
                let p = self.point(key, load, work).await?;
                self.check_point(&p)?;
            }
        }
        Ok(())
    }
}
