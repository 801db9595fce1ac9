//! The saturation knee of a load sweep: the load past which more load stops buying throughput
//! (it buys latency instead). One definition, used by `loadgen --ramp` to decide when to stop
//! doubling the concurrency and by `summarize`'s note on any sweep it reads.
//!
//! The two apply it with different thresholds, on purpose. loadgen judges its own ramp live:
//! every step doubles the concurrency from a low start, so the curve is scaling by
//! construction, and it stops at the first doubling that adds less than `--min-gain` (5% by
//! default; the user's flag). summarize reads sweeps it did not plan (steps of any size, often
//! one run with no repeats to show the noise) and its note must never fire on noise: it wants
//! a clear gain first (25%), then a clear flattening (under 10%).

/// Relative throughput gain of one step, `now / prev - 1` (0.05 = 5%; negative: it fell).
/// None when `prev` is not positive: from nothing, any throughput is a gain, never a knee.
pub fn gain(prev: f64, now: f64) -> Option<f64> {
    (prev > 0.0).then(|| now / prev - 1.0)
}

/// How a throughput curve is judged for its knee.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KneeRule {
    /// A step (one load to the next) that gains less than this share has saturated.
    pub min_gain: f64,
    /// When set, a step must first have gained at least this share (the curve was scaling)
    /// before a small gain counts: a sweep that starts past saturation shows no knee, only a
    /// plateau. None: the first step already counts.
    pub scaled_first: Option<f64>,
}

/// Where a curve saturates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Knee {
    /// Index of the knee point: the last load that still paid; the step that did not runs
    /// from here to `at + 1`.
    pub at: usize,
    /// That step's gain (below the rule's `min_gain`; negative when throughput fell).
    pub gain: f64,
}

impl KneeRule {
    /// The first knee of `tok_s`, throughput in order of increasing load. A point without a
    /// figure (None) ends no step: the steps on either side of it are not judged.
    pub fn find(&self, tok_s: &[Option<f64>]) -> Option<Knee> {
        let mut scaled = self.scaled_first.is_none();
        for (at, step) in tok_s.windows(2).enumerate() {
            let (Some(prev), Some(now)) = (step[0], step[1]) else {
                continue;
            };
            let Some(gain) = gain(prev, now) else {
                continue;
            };
            if scaled && gain < self.min_gain {
                return Some(Knee { at, gain });
            }
            if self.scaled_first.is_none_or(|s| gain >= s) {
                scaled = true;
            }
        }
        None
    }
}

impl KneeRule {
    /// The best load of a curve under this rule: the knee (the last load that still paid for
    /// itself) when there is one, else the highest throughput. loadgen's ramp records it as its
    /// best level and summarize's knee note names the same point: one rule, one knee.
    pub fn best(&self, tok_s: &[Option<f64>]) -> Option<usize> {
        if let Some(knee) = self.find(tok_s) {
            return Some(knee.at);
        }
        tok_s
            .iter()
            .enumerate()
            .filter_map(|(i, t)| Some((i, (*t)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)))
            .map(|(i, _)| i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RAMP: KneeRule = KneeRule {
        min_gain: 0.05,
        scaled_first: None,
    };
    const NOTE: KneeRule = KneeRule {
        min_gain: 0.10,
        scaled_first: Some(0.25),
    };

    fn at(rule: KneeRule, tok_s: &[f64]) -> Option<usize> {
        let curve: Vec<Option<f64>> = tok_s.iter().copied().map(Some).collect();
        rule.find(&curve).map(|k| k.at)
    }

    #[test]
    fn table() {
        // (curve, knee under the ramp's rule, knee under the note's rule)
        let cases: &[(&[f64], Option<usize>, Option<usize>)] = &[
            // Scaling throughout: no knee.
            (&[100.0, 190.0, 380.0], None, None),
            // Flat past the third point.
            (&[100.0, 200.0, 400.0, 404.0, 405.0], Some(2), Some(2)),
            // Throughput falls: the peak is the knee.
            (&[400.0, 300.0], Some(0), None),
            (&[100.0, 400.0, 300.0], Some(1), Some(1)),
            // 8% more: enough for the ramp to go on, too little for the note.
            (&[100.0, 200.0, 216.0, 217.0], Some(2), Some(1)),
            // Past saturation from the start: the note sees a plateau, not a knee.
            (&[1000.0, 1010.0, 1005.0], Some(0), None),
            // Exactly the ramp's minimum gain is a gain; for the note it is a knee.
            (&[100.0, 200.0, 300.0, 315.0], None, Some(2)),
            // A zero baseline cannot saturate the next point.
            (&[0.0, 10.0, 20.0], None, None),
        ];
        for (curve, ramp, note) in cases {
            assert_eq!(at(RAMP, curve), *ramp, "ramp {curve:?}");
            assert_eq!(at(NOTE, curve), *note, "note {curve:?}");
        }
    }

    #[test]
    fn the_best_load_is_the_knee_else_the_peak() {
        let best = |rule: KneeRule, c: &[f64]| {
            let curve: Vec<Option<f64>> = c.iter().copied().map(Some).collect();
            rule.best(&curve)
        };
        // Flat past C index 2: the knee, not the 0.2% more after it.
        assert_eq!(best(RAMP, &[1471.0, 2644.0, 2649.0]), Some(1));
        assert_eq!(best(NOTE, &[100.0, 200.0, 400.0, 404.0]), Some(2));
        // Still scaling: the highest.
        assert_eq!(best(RAMP, &[100.0, 190.0, 380.0]), Some(2));
        // Falls: the peak.
        assert_eq!(best(RAMP, &[400.0, 300.0]), Some(0));
        assert_eq!(best(RAMP, &[]), None);
    }

    #[test]
    fn points_without_figures_end_no_step() {
        let curve = [Some(100.0), None, Some(100.0), Some(200.0), Some(201.0)];
        let knee = RAMP.find(&curve).unwrap();
        assert_eq!(knee.at, 3);
        assert!((knee.gain - 0.005).abs() < 1e-12, "{knee:?}");
    }
}
