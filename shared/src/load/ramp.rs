//! `--ramp`'s rules, as pure functions of the levels measured so far: when to stop doubling
//! the concurrency, and which level was best. The run loop measures; this decides.

use super::search::Tally;
use crate::record::{Labels, PointKey, RampLevel, RampRecord, SCHEMA_VERSION, now_ts};
use crate::stats::knee::KneeRule;

/// The limits a ramp is held to (from the flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// `--max-error-rate`: failed requests / requests above this breaks the level.
    pub max_error_rate: f64,
    /// `--slo-attainment`: the share of requests that must meet every `--slo`.
    pub slo_attainment: f64,
    /// `--min-gain`: a doubling that adds less output throughput than this is saturated.
    pub min_gain: f64,
    /// `--ramp-max`: the highest concurrency to try.
    pub max_concurrency: u32,
}

/// What to do after the last level.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Try this concurrency next.
    Next(u32),
    /// Stop: the rule (as the record's `stopped_by` names it) and why, with the figures.
    Stop { rule: &'static str, reason: String },
}

impl Rules {
    /// The shared knee definition with `--min-gain`: every doubling counts from the first
    /// (the ramp starts low, where throughput scales).
    pub fn knee_rule(&self) -> KneeRule {
        KneeRule {
            min_gain: self.min_gain,
            scaled_first: None,
        }
    }

    /// Whether a level broke neither the error-rate nor the SLO rule.
    pub fn passes(&self, level: &RampLevel) -> bool {
        level.error_rate <= self.max_error_rate
            && level
                .slo_attainment
                .is_none_or(|a| a >= self.slo_attainment)
    }

    /// Judges the last of `levels` (each one double the one before).
    pub fn judge(&self, levels: &[RampLevel]) -> Verdict {
        let Some(last) = levels.last() else {
            return Verdict::Next(1);
        };
        let c = last.concurrency;
        if last.error_rate > self.max_error_rate {
            return Verdict::Stop {
                rule: "error_rate",
                reason: format!(
                    "error rate {:.2}% at concurrency {c} passed {:.2}%",
                    last.error_rate * 100.0,
                    self.max_error_rate * 100.0
                ),
            };
        }
        if let Some(a) = last.slo_attainment
            && a < self.slo_attainment
        {
            return Verdict::Stop {
                rule: "slo",
                reason: format!(
                    "{:.1}% of requests met the SLO at concurrency {c} (< {:.1}%)",
                    a * 100.0,
                    self.slo_attainment * 100.0
                ),
            };
        }
        // Levels before the last passed this test when they were judged, so a knee found now
        // is the last doubling's.
        let curve: Vec<Option<f64>> = levels.iter().map(|l| Some(l.output_tok_s)).collect();
        if let Some(knee) = self.knee_rule().find(&curve) {
            let (p, now) = (
                levels[knee.at].output_tok_s,
                levels[knee.at + 1].output_tok_s,
            );
            let c = levels[knee.at + 1].concurrency;
            // A change that rounds to zero is shown as 0.0%, not -0.0%.
            let shown = (knee.gain * 100.0 * 10.0).round() / 10.0 + 0.0;
            return Verdict::Stop {
                rule: "saturated",
                reason: format!(
                    "output {now:.0} tok/s at concurrency {c} gained {shown:.1}% over {p:.0} (< {:.0}%)",
                    self.min_gain * 100.0
                ),
            };
        }
        if c.saturating_mul(2) > self.max_concurrency {
            return Verdict::Stop {
                rule: "max_concurrency",
                reason: format!(
                    "reached --ramp-max {} at concurrency {c}",
                    self.max_concurrency
                ),
            };
        }
        Verdict::Next(c * 2)
    }

    /// The best level: among those that broke no rule, the knee of their throughput under the
    /// shared rule with `--min-gain` (the last doubling that still paid), else the highest.
    /// Past it, more concurrency buys latency, not throughput; summarize's knee note reads the
    /// same rule off the record's `min_gain`.
    pub fn best<'a>(&self, levels: &'a [RampLevel]) -> Option<&'a RampLevel> {
        let passing: Vec<&RampLevel> = levels.iter().filter(|l| self.passes(l)).collect();
        let curve: Vec<Option<f64>> = passing.iter().map(|l| Some(l.output_tok_s)).collect();
        self.knee_rule().best(&curve).map(|i| passing[i])
    }
}

/// A level as the rules judge it: its mean throughput over its repeats, and its errors and SLO
/// attainment over all their requests (`slo`: whether an `--slo` was given).
pub fn level(
    concurrency: u32,
    output_tok_s: f64,
    req_s: f64,
    tries: &[Tally],
    slo: bool,
) -> RampLevel {
    let all = Tally::sum(tries);
    RampLevel {
        concurrency,
        output_tok_s,
        req_s,
        error_rate: if all.requests > 0 {
            all.errors as f64 / all.requests as f64
        } else {
            0.0
        },
        slo_attainment: slo.then(|| all.attainment().min(1.0)),
    }
}

impl Rules {
    /// The `ramp` record of `levels`, stopped by `stopped_by` (a rule of [`Verdict::Stop`], or
    /// how the run ended it) for `reason`, with the best level by [`Rules::best`].
    pub fn record(
        &self,
        labels: Labels,
        point: PointKey,
        levels: Vec<RampLevel>,
        stopped_by: &str,
        reason: String,
    ) -> RampRecord {
        let best = self.best(&levels);
        RampRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels,
            point,
            best_concurrency: best.map(|l| l.concurrency),
            best_output_tok_s: best.map(|l| l.output_tok_s),
            min_gain: Some(self.min_gain),
            levels,
            stopped_by: stopped_by.into(),
            reason,
            extra: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        max_error_rate: 0.01,
        slo_attainment: 0.9,
        min_gain: 0.05,
        max_concurrency: 64,
    };

    fn level(concurrency: u32, tok_s: f64, error_rate: f64, slo: Option<f64>) -> RampLevel {
        RampLevel {
            concurrency,
            output_tok_s: tok_s,
            req_s: tok_s / 100.0,
            error_rate,
            slo_attainment: slo,
        }
    }

    /// (levels as (C, tok/s, error rate, SLO attainment), the verdict's rule or next C, best C)
    type Case = (
        &'static [(u32, f64, f64, Option<f64>)],
        &'static str,
        Option<u32>,
    );

    #[test]
    fn table() {
        let cases: &[Case] = &[
            // Growing well: double.
            (&[(1, 100.0, 0.0, None)], "next 2", Some(1)),
            (
                &[(1, 100.0, 0.0, None), (2, 190.0, 0.0, None)],
                "next 4",
                Some(2),
            ),
            // +0.2%: saturated; the knee (C=16) is best, not C=32's extra 0.2%.
            (
                &[
                    (8, 1471.0, 0.0, None),
                    (16, 2644.0, 0.0, None),
                    (32, 2649.0, 0.0, None),
                ],
                "saturated",
                Some(16),
            ),
            // Throughput falls: saturated; best is the peak.
            (
                &[(4, 400.0, 0.0, None), (8, 300.0, 0.0, None)],
                "saturated",
                Some(4),
            ),
            // Exactly 5% is enough to go on, so it is the best so far (the knee rule: it paid).
            (
                &[(1, 100.0, 0.0, None), (2, 105.0, 0.0, None)],
                "next 4",
                Some(2),
            ),
            // Errors past 1%: the broken level is never best.
            (
                &[(8, 800.0, 0.0, None), (16, 1500.0, 0.02, None)],
                "error_rate",
                Some(8),
            ),
            // SLO attainment under 90%.
            (
                &[(8, 800.0, 0.0, Some(0.99)), (16, 1500.0, 0.0, Some(0.5))],
                "slo",
                Some(8),
            ),
            // Errors are judged before saturation.
            (
                &[(8, 800.0, 0.0, None), (16, 700.0, 0.5, None)],
                "error_rate",
                Some(8),
            ),
            // The cap: 64 doubled passes --ramp-max 64.
            (
                &[(32, 100.0, 0.0, None), (64, 200.0, 0.0, None)],
                "max_concurrency",
                Some(64),
            ),
            // Nothing passed: no best.
            (&[(1, 100.0, 0.5, None)], "error_rate", None),
            // A zero-throughput first level cannot saturate the next.
            (
                &[(1, 0.0, 0.0, None), (2, 10.0, 0.0, None)],
                "next 4",
                Some(2),
            ),
        ];
        for (levels, want, best) in cases {
            let levels: Vec<RampLevel> = levels
                .iter()
                .map(|&(c, t, e, s)| level(c, t, e, s))
                .collect();
            let got = match RULES.judge(&levels) {
                Verdict::Next(c) => format!("next {c}"),
                Verdict::Stop { rule, .. } => rule.to_string(),
            };
            assert_eq!(&got, want, "{levels:?}");
            assert_eq!(
                RULES.best(&levels).map(|l| l.concurrency),
                *best,
                "{levels:?}"
            );
        }
    }

    /// A level's errors and SLO attainment pool its repeats' requests (not a mean of shares),
    /// and its record names the best level by the same rules (a broken level never).
    #[test]
    fn a_level_pools_its_repeats_and_the_record_names_the_best() {
        let tries = [
            Tally {
                requests: 10,
                good: 9,
                errors: 1,
            },
            Tally {
                requests: 30,
                good: 30,
                errors: 0,
            },
        ];
        let l = super::level(8, 800.0, 8.0, &tries, true);
        assert_eq!((l.error_rate, l.slo_attainment), (0.025, Some(0.975)));
        assert_eq!(
            super::level(8, 800.0, 8.0, &tries, false).slo_attainment,
            None
        );
        assert_eq!(super::level(8, 0.0, 0.0, &[], true).error_rate, 0.0);
        // 2.5% errors break --max-error-rate 1%: the level below is best.
        let clean = super::level(4, 400.0, 4.0, &tries[1..], true);
        let levels = vec![clean, l];
        let r = RULES.record(
            Labels::new(),
            PointKey::default(),
            levels,
            "saturated",
            "why".into(),
        );
        assert_eq!((r.best_concurrency, r.min_gain), (Some(4), Some(0.05)));
        assert_eq!(r.stopped_by, "saturated");
    }

    #[test]
    fn reasons_carry_the_figures() {
        let levels = [level(16, 2644.0, 0.0, None), level(32, 2649.0, 0.0, None)];
        let Verdict::Stop { reason, .. } = RULES.judge(&levels) else {
            panic!("should stop");
        };
        assert_eq!(
            reason,
            "output 2649 tok/s at concurrency 32 gained 0.2% over 2644 (< 5%)"
        );
        let flat = [level(16, 1631.0, 0.0, None), level(32, 1630.8, 0.0, None)];
        let Verdict::Stop { reason, .. } = RULES.judge(&flat) else {
            panic!("should stop");
        };
        assert!(reason.contains("gained 0.0% over 1631"), "{reason}");
    }
}
