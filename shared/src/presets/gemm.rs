//! The GEMM part of a decode step as collbench measured it (`gemm_step` records): the step's
//! GEMM time on one GPU of the TP group by batch, read linearly between the measured batches
//! and flat beyond them. A measured curve replaces the roofline's weight-GEMM time (weight
//! bytes over bandwidth against FLOPs over peak); attention over the KV cache stays modelled.

use crate::jsonl::{self, Source};
use crate::record::{GemmStepRecord, Record};

/// `gemm_us_per_step` by batch for one model and TP.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCurve {
    /// (batch, µs per step), by batch, one point per batch (the mean of repeats).
    points: Vec<(u32, f64)>,
}

impl GemmCurve {
    /// The curve of `model` at `tp` from `gemm_step` records; None when none match.
    pub fn from_records(steps: &[GemmStepRecord], model: &str, tp: u32) -> Option<GemmCurve> {
        let mut pts: Vec<(u32, f64)> = steps
            .iter()
            .filter(|s| s.model == model && s.tp == tp)
            .map(|s| (s.batch, s.gemm_us_per_step))
            .collect();
        if pts.is_empty() {
            return None;
        }
        pts.sort_by_key(|p| p.0);
        // Several records of one batch: their mean.
        let points = pts
            .chunk_by(|a, b| a.0 == b.0)
            .map(|same| {
                let mean = same.iter().map(|p| p.1).sum::<f64>() / same.len() as f64;
                (same[0].0, mean)
            })
            .collect();
        Some(GemmCurve { points })
    }

    /// The smallest and largest batch measured.
    pub fn range(&self) -> (u32, u32) {
        (self.points[0].0, self.points[self.points.len() - 1].0)
    }

    /// µs of GEMMs for a step of `tokens` tokens: linear between the measured batches,
    /// clamped to the nearest end outside them.
    pub fn us_at(&self, tokens: u32) -> f64 {
        let (lo, hi) = self.range();
        if tokens <= lo {
            return self.points[0].1;
        }
        if tokens >= hi {
            return self.points[self.points.len() - 1].1;
        }
        let k = self.points.partition_point(|p| p.0 <= tokens);
        let ((b0, t0), (b1, t1)) = (self.points[k - 1], self.points[k]);
        if b0 == tokens {
            return t0;
        }
        t0 + (t1 - t0) * f64::from(tokens - b0) / f64::from(b1 - b0)
    }

    /// `batches 1-64 (4 points)`.
    pub fn describe(&self) -> String {
        let (lo, hi) = self.range();
        format!("batches {lo}-{hi} ({} points)", self.points.len())
    }
}

/// Every `gemm_step` record of `path`, with the line of each; one that is no measurement is
/// refused with its file:line.
pub fn gemm_step_records_from(path: &str) -> anyhow::Result<Vec<GemmStepRecord>> {
    let mut out = Vec::new();
    jsonl::read_all(&[Source::parse(path)], true, |line| {
        let location = line.location();
        if let Record::GemmStep(g) = line.record {
            if let Some(why) = g.implausible() {
                return Err(crate::diag::usage(format!(
                    "{location}: {why} (measure again: collbench gemm --model M --tp N --batch 1,8,64)"
                )));
            }
            out.push(g);
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(points: &[(u32, f64)]) -> GemmCurve {
        GemmCurve {
            points: points.to_vec(),
        }
    }

    #[test]
    fn gemm_time_is_linear_between_batches_and_flat_beyond() {
        let c = curve(&[(1, 100.0), (8, 170.0), (32, 410.0)]);
        assert_eq!(c.us_at(1), 100.0);
        assert_eq!(c.us_at(4), 130.0);
        assert_eq!(c.us_at(8), 170.0);
        assert_eq!(c.us_at(20), 290.0);
        assert_eq!(c.us_at(64), 410.0);
        assert_eq!(c.range(), (1, 32));
    }
}
