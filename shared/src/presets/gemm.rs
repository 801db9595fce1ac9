//! The GEMM part of a decode step as collbench measured it (`gemm_step` records): the step's
//! GEMM time on one GPU of the TP group by batch, read linearly between the measured batches.
//! Beyond them the time scales with the step's work from the nearest measurement: its
//! roofline (FLOPs over peak against bytes over bandwidth, each grown with the tokens as the
//! measured points grow) over the measured batch's, so a 1024-token prefill step is not timed
//! as the largest measured decode batch ([`GemmCurve::us_at`]). A measured curve replaces the
//! roofline's weight-GEMM time (weight bytes over bandwidth against FLOPs over peak);
//! attention over the KV cache stays modelled.

use super::roofline::Rates;
use crate::jsonl::{self, Source};
use crate::record::{GemmDtype, GemmStepRecord, Record};

/// One measured batch: its GEMM time and work (the mean of its repeats).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Measured {
    batch: u32,
    us: f64,
    /// FLOPs and minimum bytes of the step's GEMMs (0 where the record does not say).
    flops: f64,
    bytes: f64,
}

/// `gemm_us_per_step` by batch for one model and TP.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmCurve {
    /// By batch, one point per batch.
    points: Vec<Measured>,
    /// The GEMMs ran in FP8 (their FLOPs then go at the FP8 rate).
    fp8: bool,
}

impl GemmCurve {
    /// The curve of `model` at `tp` from `gemm_step` records; None when none match.
    pub fn from_records(steps: &[GemmStepRecord], model: &str, tp: u32) -> Option<GemmCurve> {
        let mut pts: Vec<&GemmStepRecord> = steps
            .iter()
            .filter(|s| s.model == model && s.tp == tp)
            .collect();
        if pts.is_empty() {
            return None;
        }
        let fp8 = pts.iter().all(|s| s.dtype == GemmDtype::Fp8);
        pts.sort_by_key(|p| p.batch);
        // Several records of one batch: their mean.
        let points = pts
            .chunk_by(|a, b| a.batch == b.batch)
            .map(|same| {
                let n = same.len() as f64;
                let mean =
                    |f: fn(&GemmStepRecord) -> f64| same.iter().map(|s| f(s)).sum::<f64>() / n;
                Measured {
                    batch: same[0].batch,
                    us: mean(|s| s.gemm_us_per_step),
                    flops: mean(|s| s.flops_per_step),
                    bytes: mean(|s| s.bytes_per_step),
                }
            })
            .collect();
        Some(GemmCurve { points, fp8 })
    }

    /// The smallest and largest batch measured.
    pub fn range(&self) -> (u32, u32) {
        (
            self.points[0].batch,
            self.points[self.points.len() - 1].batch,
        )
    }

    /// The work of a step of `tokens` tokens, grown from `at` (a measured point): FLOPs in
    /// proportion to the tokens, bytes along the measured points' slope (the weights once, the
    /// activations per token).
    fn work_at(&self, at: &Measured, tokens: u32) -> (f64, f64) {
        let t = f64::from(tokens);
        let flops = at.flops * t / f64::from(at.batch.max(1));
        let (first, last) = (self.points[0], self.points[self.points.len() - 1]);
        let per_token = if last.batch > first.batch {
            ((last.bytes - first.bytes) / f64::from(last.batch - first.batch)).max(0.0)
        } else {
            0.0
        };
        let bytes = (at.bytes + per_token * (t - f64::from(at.batch))).max(0.0);
        (flops, bytes)
    }

    /// µs of GEMMs for a step of `tokens` tokens: linear between the measured batches; beyond
    /// them the nearest measurement's time, scaled by the step's roofline at `rates` (FLOPs over
    /// peak against bytes over bandwidth) over that measurement's. A record without its FLOPs
    /// and bytes scales in proportion to the tokens.
    pub fn us_at(&self, tokens: u32, rates: &Rates) -> f64 {
        let (lo, hi) = self.range();
        let nearest = if tokens <= lo {
            self.points[0]
        } else if tokens >= hi {
            self.points[self.points.len() - 1]
        } else {
            let k = self.points.partition_point(|p| p.batch <= tokens);
            let (a, b) = (self.points[k - 1], self.points[k]);
            if a.batch == tokens {
                return a.us;
            }
            return a.us
                + (b.us - a.us) * f64::from(tokens - a.batch) / f64::from(b.batch - a.batch);
        };
        if tokens == nearest.batch {
            return nearest.us;
        }
        if !(nearest.flops > 0.0 && nearest.bytes > 0.0) {
            return nearest.us * f64::from(tokens) / f64::from(nearest.batch.max(1));
        }
        let peak = rates.flops(if self.fp8 {
            super::WeightFormat::Fp8
        } else {
            super::WeightFormat::Bf16
        });
        let bw = rates.mem_bw_gbps * 1e9;
        let roofline = |(flops, bytes): (f64, f64)| (flops / peak).max(bytes / bw);
        let at = roofline((nearest.flops, nearest.bytes));
        nearest.us * roofline(self.work_at(&nearest, tokens)) / at
    }

    /// What a step of `tokens` tokens is read as, where it lies outside the measured batches:
    /// `scaled by its FLOPs from batch 64 (x16.0)`; None inside them.
    pub fn extrapolation(&self, tokens: u32, rates: &Rates) -> Option<String> {
        let (lo, hi) = self.range();
        if (lo..=hi).contains(&tokens) {
            return None;
        }
        let nearest = if tokens < lo { lo } else { hi };
        let at = self.us_at(nearest, rates);
        let scaled = self.us_at(tokens, rates);
        Some(format!(
            "a {tokens}-token step is {:.0} us: batch {nearest}'s {:.0} us scaled by its work (x{:.2})",
            scaled,
            at,
            scaled / at
        ))
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
            points: points
                .iter()
                .map(|&(batch, us)| Measured {
                    batch,
                    us,
                    flops: 0.0,
                    bytes: 0.0,
                })
                .collect(),
            fp8: false,
        }
    }

    fn h200() -> Rates {
        Rates::datasheet(&crate::presets::load_hardware("h200").unwrap())
    }

    #[test]
    fn gemm_time_is_linear_between_batches() {
        let c = curve(&[(1, 100.0), (8, 170.0), (32, 410.0)]);
        let r = h200();
        assert_eq!(c.us_at(1, &r), 100.0);
        assert_eq!(c.us_at(4, &r), 130.0);
        assert_eq!(c.us_at(8, &r), 170.0);
        assert_eq!(c.us_at(20, &r), 290.0);
        assert_eq!(c.range(), (1, 32));
        // Records without their work: in proportion to the tokens beyond, never flat.
        assert_eq!(c.us_at(64, &r), 820.0);
        assert!(c.extrapolation(20, &r).is_none());
    }

    /// The H200's measured GEMMs of llama-3.1-8b (batches 1, 8, 64: memory-bound): a 1024-token
    /// step is compute-bound, so it costs its FLOPs over peak, scaled by batch 64's efficiency,
    /// not batch 64's time held flat.
    #[test]
    fn beyond_the_largest_measured_batch_a_step_scales_with_its_flops_not_flat() {
        let text = include_str!("../../tests/fixtures/gemm_step_h200.jsonl");
        let steps: Vec<GemmStepRecord> = text
            .lines()
            .map(|l| match Record::parse(l).unwrap() {
                Record::GemmStep(g) => g,
                other => panic!("{other:?}"),
            })
            .collect();
        let c = GemmCurve::from_records(&steps, "llama-3.1-8b", 1).unwrap();
        let r = h200();
        let b64 = c.us_at(64, &r);
        let b1024 = c.us_at(1024, &r);
        // 1024 tokens: 16 x batch 64's FLOPs, now above the bytes' time.
        let flops = 893_353_197_568.0 * 16.0;
        let efficiency = 2967.47008 / b64;
        let expected = flops / r.flops(crate::presets::WeightFormat::Bf16) * 1e6 / efficiency;
        assert!(
            (b1024 / expected - 1.0).abs() < 0.01,
            "{b1024} vs {expected}"
        );
        assert!(b1024 > 3.0 * b64, "{b1024} vs {b64}");
        let said = c.extrapolation(1024, &r).unwrap();
        assert!(
            said.contains("batch 64's") && said.contains("scaled by its work"),
            "{said}"
        );
        // Below the smallest batch nothing changes the memory-bound time much.
        assert!((c.us_at(1, &r) - 4041.728).abs() < 0.01);
    }
}
