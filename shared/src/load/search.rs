//! `--find-max`'s rules, as pure functions of the probes measured so far: which load to try
//! next, when a probe's verdict is too close to call and must be repeated, and when the search
//! is done. The run loop measures (each probe a normal point); this decides.
//!
//! The search: start at the first `-r`/`-c` value; double while the load meets the SLO (or
//! halve while it does not) until one load passes and a higher one fails; then bisect between
//! them until the failing load is within `--find-max-precision` above the passing one. A
//! probe passes when the share of its requests that succeeded and met every `--slo` reaches
//! `--slo-attainment`. That share is itself a measurement: when it lies within the 95%
//! binomial margin of the target (`1.96 sqrt(t (1 - t) / n)` for n requests), the probe is run
//! again (up to `--find-max-tries` in all) and judged on all its requests together, so one
//! noisy point near the boundary does not send the bisection the wrong way.

use crate::record::{
    Labels, PointKey, SCHEMA_VERSION, SearchProbe, SearchRecord, SummaryRecord, now_ts,
};
use crate::stats::Slo;

/// What a search varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Var {
    /// Open-loop requests per second.
    Rate,
    /// Closed-loop requests in flight.
    Concurrency,
}

impl Var {
    /// The name the `search` record gives it: its field name, unit included.
    pub fn field(self) -> &'static str {
        match self {
            Var::Rate => "rate_rps",
            Var::Concurrency => "concurrency",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Var::Rate => " req/s",
            Var::Concurrency => " in flight",
        }
    }

    /// A load as people read it (`212.5 req/s`, `48 in flight`).
    pub fn show(self, load: f64) -> String {
        let n = (load * 1000.0).round() / 1000.0;
        format!("{n}{}", self.unit())
    }
}

/// Halving from the start stops after this many steps (a 64th of the start) for a rate.
const RATE_FLOOR_STEPS: i32 = 6;
/// A failure this far below the target (as a share of it) right above a pass measured earlier
/// is a cliff: the passing load is probed again before the search ends on it.
const CLIFF_SHARE: f64 = 0.25;
/// z of the two-sided 95% interval: an attainment this many standard errors from the target
/// could be either side of it.
const Z95: f64 = 1.96;

/// `--find-max-limit`'s default for a rate search, requests per second.
pub const RATE_LIMIT: f64 = 10_000.0;

/// One level's requests (a try of a probe, a repeat of a ramp level): all of them, how many
/// succeeded and met every objective, and the errors; the one definition of a good request
/// both `--ramp` and `--find-max` judge by.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Tally {
    pub requests: u64,
    /// Succeeded and met every objective.
    pub good: u64,
    pub errors: u64,
}

impl Tally {
    /// A point's level: its summary's requests and errors, and `good` of them (succeeded and
    /// met every objective, as `PointStats` counts them).
    pub fn of(summary: &SummaryRecord, good: u64) -> Tally {
        Tally {
            requests: summary.requests,
            good,
            errors: summary.errors,
        }
    }

    pub fn sum(tries: &[Tally]) -> Tally {
        tries.iter().fold(Tally::default(), |a, t| Tally {
            requests: a.requests + t.requests,
            good: a.good + t.good,
            errors: a.errors + t.errors,
        })
    }

    /// The share of requests that met the SLO (0 of none).
    pub fn attainment(&self) -> f64 {
        if self.requests == 0 {
            0.0
        } else {
            self.good as f64 / self.requests as f64
        }
    }
}

/// A probe's verdict after its tries so far.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Decision {
    Pass,
    Fail,
    /// Too close to the target to call: run it again.
    Repeat,
}

/// What to do next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Try this load.
    Probe(f64),
    /// The search is over.
    Done(Outcome),
}

/// How a search ended, as its record says it.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `converged`, `limit` or `none_passed`.
    pub stopped_by: &'static str,
    pub reason: String,
    pub max_passing: Option<f64>,
    pub first_failing: Option<f64>,
}

/// The limits a search is held to (from the flags).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    pub var: Var,
    /// `--slo-attainment`.
    pub target: f64,
    /// `--find-max-precision`: the bracket's relative width at the end.
    pub precision: f64,
    /// `--find-max-tries`: tries of one probe at most (1: never repeat).
    pub max_tries: u32,
    /// The first load (`-r`/`-c`'s first value).
    pub start: f64,
    /// `--find-max-limit`: the highest load tried.
    pub limit: f64,
}

impl Rules {
    /// The verdict on a probe's tries: pooled, repeated while within the noise of the target.
    pub fn decide(&self, tries: &[Tally]) -> Decision {
        let all = Tally::sum(tries);
        let a = all.attainment();
        let n = all.requests.max(1) as f64;
        let margin = Z95 * (self.target * (1.0 - self.target) / n).sqrt();
        if (tries.len() as u32) < self.max_tries && (a - self.target).abs() < margin {
            return Decision::Repeat;
        }
        if all.requests > 0 && a >= self.target {
            Decision::Pass
        } else {
            Decision::Fail
        }
    }

    /// The lowest load a search goes down to.
    fn floor(&self) -> f64 {
        match self.var {
            Var::Rate => self.start * 2f64.powi(-RATE_FLOOR_STEPS),
            Var::Concurrency => 1.0,
        }
    }

    fn snap(&self, load: f64) -> f64 {
        match self.var {
            Var::Rate => load,
            Var::Concurrency => load.floor().max(1.0),
        }
    }

    /// Whether the bracket (`lo` passed, `hi` failed) is narrow enough.
    fn converged(&self, lo: f64, hi: f64) -> bool {
        hi <= lo * (1.0 + self.precision) || (self.var == Var::Concurrency && hi - lo <= 1.0)
    }

    /// The next step after the probes decided so far, in the order they ran.
    pub fn next(&self, decided: &[SearchProbe]) -> Step {
        let v = self.var;
        let (lo, hi) = bracket(decided);
        let done = |stopped_by, reason| {
            Step::Done(Outcome {
                stopped_by,
                reason,
                max_passing: lo,
                first_failing: hi,
            })
        };
        match (lo, hi) {
            (None, None) => Step::Probe(self.snap(self.start.min(self.limit))),
            (None, Some(hi)) => {
                let next = self.snap(hi / 2.0);
                if hi <= self.floor() || next >= hi || next < self.floor() {
                    return done(
                        "none_passed",
                        format!(
                            "no load met the SLO: {} was the lowest tried and failed",
                            v.show(hi)
                        ),
                    );
                }
                Step::Probe(next)
            }
            (Some(lo), None) => {
                if lo >= self.limit {
                    return done(
                        "limit",
                        format!(
                            "{} (--find-max-limit) still met the SLO: the maximum is higher",
                            v.show(lo)
                        ),
                    );
                }
                Step::Probe(self.snap((lo * 2.0).min(self.limit)))
            }
            (Some(lo), Some(hi)) => {
                let mid = self.snap((lo + hi) / 2.0);
                if self.converged(lo, hi) || mid <= lo || mid >= hi {
                    if self.cliff_unchecked(decided, lo, hi) {
                        return Step::Probe(lo);
                    }
                    return done(
                        "converged",
                        format!(
                            "{} met the SLO, {} did not (within {:.0}%){}",
                            v.show(lo),
                            v.show(hi),
                            (hi / lo - 1.0) * 100.0,
                            changed_note(v, decided)
                        ),
                    );
                }
                Step::Probe(mid)
            }
        }
    }
}

impl Rules {
    /// Whether the bracket's pass met the SLO before its failure, which failed nearly every
    /// request: a capacity that fell mid-search (a server degrading, another tenant) looks
    /// exactly so, and the bracket would be a measurement of two servers. The pass is probed
    /// again once; where it then fails the search goes on below it.
    fn cliff_unchecked(&self, decided: &[SearchProbe], lo: f64, hi: f64) -> bool {
        let last_at = |load: f64| decided.iter().rposition(|p| p.load == load);
        let (Some(at_lo), Some(at_hi)) = (last_at(lo), last_at(hi)) else {
            return false;
        };
        at_lo < at_hi && decided[at_hi].slo_attainment < self.target * CLIFF_SHARE
    }
}

impl Rules {
    /// The `search` record of `probes` for one workload (`point`, its load cleared: the search
    /// varies it), ended as `outcome` says.
    pub fn record(
        &self,
        labels: Labels,
        mut point: PointKey,
        slo: Option<&Slo>,
        probes: Vec<SearchProbe>,
        outcome: Outcome,
    ) -> SearchRecord {
        point.concurrency = None;
        point.rate_rps = None;
        SearchRecord {
            v: SCHEMA_VERSION,
            ts: now_ts(),
            labels,
            point,
            var: self.var.field().into(),
            slo: slo.map(|s| s.to_text()).unwrap_or_default(),
            slo_attainment: self.target,
            precision: self.precision,
            probes,
            max_passing: outcome.max_passing,
            first_failing: outcome.first_failing,
            stopped_by: outcome.stopped_by.into(),
            reason: outcome.reason,
            extra: Default::default(),
        }
    }
}

/// Where a load met the SLO and later did not: the server changed during the search.
fn changed_note(v: Var, decided: &[SearchProbe]) -> String {
    decided
        .iter()
        .enumerate()
        .find(|(i, p)| p.passed && decided[i + 1..].iter().any(|q| q.load == p.load && !q.passed))
        .map_or(String::new(), |(_, p)| {
            format!(
                "; {} met the SLO, then failed when probed again: the server's capacity changed during the search",
                v.show(p.load)
            )
        })
}

/// The bracket the probes decided so far give: the highest load that passed, and the lowest
/// failure above it (a noisy failure below the highest pass is outvoted by it). A load probed
/// again counts by its latest verdict.
pub fn bracket(decided: &[SearchProbe]) -> (Option<f64>, Option<f64>) {
    let latest: Vec<&SearchProbe> = decided
        .iter()
        .enumerate()
        .filter(|(i, p)| !decided[i + 1..].iter().any(|q| q.load == p.load))
        .map(|(_, p)| p)
        .collect();
    let lo = latest
        .iter()
        .filter(|p| p.passed)
        .map(|p| p.load)
        .reduce(f64::max);
    let hi = latest
        .iter()
        .filter(|p| !p.passed && lo.is_none_or(|lo| p.load > lo))
        .map(|p| p.load)
        .reduce(f64::min);
    (lo, hi)
}

/// The figures of a probe from its tries, for the record.
pub fn probe(load: f64, points: Vec<u32>, tries: &[Tally], passed: bool) -> SearchProbe {
    let all = Tally::sum(tries);
    SearchProbe {
        load,
        points,
        requests: all.requests,
        slo_attainment: all.attainment(),
        error_rate: if all.requests == 0 {
            0.0
        } else {
            all.errors as f64 / all.requests as f64
        },
        passed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: Rules = Rules {
        var: Var::Rate,
        target: 0.9,
        precision: 0.05,
        max_tries: 3,
        start: 10.0,
        limit: 10_000.0,
    };

    fn tally(requests: u64, good: u64) -> Tally {
        Tally {
            requests,
            good,
            errors: 0,
        }
    }

    #[test]
    fn decisions_pool_the_tries_and_repeat_only_near_the_target() {
        // (tries as (requests, good), rules' max tries, decision)
        type Case = (&'static [(u64, u64)], u32, Decision);
        let cases: &[Case] = &[
            // Far above and far below the target: decided at once.
            (&[(200, 200)], 3, Decision::Pass),
            (&[(200, 20)], 3, Decision::Fail),
            // 0.9 +- 1.96 sqrt(0.09/200) = 0.9 +- 0.0416: 0.88 and 0.92 are too close to call.
            (&[(200, 176)], 3, Decision::Repeat),
            (&[(200, 184)], 3, Decision::Repeat),
            // Just outside the margin.
            (&[(200, 190)], 3, Decision::Pass),
            (&[(200, 170)], 3, Decision::Fail),
            // Pooled: 0.88 then 0.96 is 0.92 over 400 (margin 0.029): still close.
            (&[(200, 176), (200, 192)], 3, Decision::Repeat),
            // Out of tries: judged on the pooled share.
            (&[(200, 176), (200, 192), (200, 186)], 3, Decision::Pass),
            (&[(200, 176), (200, 170), (200, 180)], 3, Decision::Fail),
            // One try allowed: never repeated; exactly the target passes.
            (&[(200, 180)], 1, Decision::Pass),
            (&[(200, 179)], 1, Decision::Fail),
            // No requests at all is a failure, never a pass.
            (&[(0, 0)], 1, Decision::Fail),
        ];
        for (tries, max_tries, want) in cases {
            let rules = Rules {
                max_tries: *max_tries,
                ..RATE
            };
            let tries: Vec<Tally> = tries.iter().map(|&(n, g)| tally(n, g)).collect();
            assert_eq!(rules.decide(&tries), *want, "{tries:?}");
        }
    }

    fn decided(rules: &Rules, probes: &[(f64, bool)]) -> Step {
        let probes: Vec<SearchProbe> = probes
            .iter()
            .map(|&(load, passed)| probe(load, vec![0], &[tally(10, 10)], passed))
            .collect();
        rules.next(&probes)
    }

    #[test]
    fn the_next_load_brackets_then_bisects() {
        let conc = Rules {
            var: Var::Concurrency,
            start: 8.0,
            limit: 1024.0,
            ..RATE
        };
        let done = |s: &str| s.to_string();
        // (rules, probes as (load, passed), next load or how it stopped)
        type Case = (Rules, &'static [(f64, bool)], Result<f64, String>);
        let cases: Vec<Case> = vec![
            (RATE, &[], Ok(10.0)),
            // Doubling while it passes.
            (RATE, &[(10.0, true)], Ok(20.0)),
            (RATE, &[(10.0, true), (20.0, true)], Ok(40.0)),
            // A failure brackets: bisect.
            (RATE, &[(10.0, true), (20.0, true), (40.0, false)], Ok(30.0)),
            (
                RATE,
                &[(10.0, true), (20.0, true), (40.0, false), (30.0, true)],
                Ok(35.0),
            ),
            // 20 passed, 21 failed: within 5%.
            (RATE, &[(20.0, true), (21.0, false)], Err(done("converged"))),
            // Halving while it fails, down to a 64th of the start.
            (RATE, &[(10.0, false)], Ok(5.0)),
            (RATE, &[(10.0, false), (5.0, false)], Ok(2.5)),
            (RATE, &[(0.15625, false)], Err(done("none_passed"))),
            // The limit.
            (
                Rules {
                    limit: 40.0,
                    ..RATE
                },
                &[(10.0, true), (20.0, true)],
                Ok(40.0),
            ),
            (
                Rules {
                    limit: 40.0,
                    ..RATE
                },
                &[(20.0, true), (40.0, true)],
                Err(done("limit")),
            ),
            // A noisy failure below the highest pass does not bracket.
            (RATE, &[(10.0, true), (20.0, true), (15.0, false)], Ok(40.0)),
            // Concurrency: integers, adjacent ends it.
            (conc, &[(8.0, true), (16.0, false)], Ok(12.0)),
            (conc, &[(12.0, true), (13.0, false)], Err(done("converged"))),
            (conc, &[(1.0, false)], Err(done("none_passed"))),
            (conc, &[(3.0, false)], Ok(1.0)),
            (conc, &[(512.0, true), (1024.0, true)], Err(done("limit"))),
        ];
        for (rules, probes, want) in cases {
            let got = decided(&rules, probes);
            match (&got, &want) {
                (Step::Probe(x), Ok(w)) => assert_eq!(*x, *w, "{probes:?}"),
                (Step::Done(o), Err(w)) => assert_eq!(o.stopped_by, w, "{probes:?}"),
                _ => panic!("{probes:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Against a server whose capacity is exactly known (every load up to it passes, every
    /// load above fails), the search ends with the capacity inside its final bracket, and the
    /// bracket is no wider than the stated precision, wherever it starts.
    #[test]
    fn a_search_brackets_a_known_capacity_within_its_precision() {
        for var in [Var::Rate, Var::Concurrency] {
            for capacity in [0.7, 3.0, 17.0, 100.0, 333.3, 2500.0] {
                for start in [1.0, 10.0, 64.0, 5000.0] {
                    let rules = Rules { var, start, ..RATE };
                    let mut probes: Vec<SearchProbe> = Vec::new();
                    let outcome = loop {
                        assert!(probes.len() < 60, "{var:?} {capacity} {start}: no end");
                        match rules.next(&probes) {
                            Step::Probe(load) => {
                                probes.push(probe(load, vec![], &[tally(10, 10)], load <= capacity))
                            }
                            Step::Done(o) => break o,
                        }
                    };
                    let what = format!("{var:?} capacity {capacity} from {start}: {outcome:?}");
                    match outcome.stopped_by {
                        "converged" => {
                            let (lo, hi) =
                                (outcome.max_passing.unwrap(), outcome.first_failing.unwrap());
                            assert!(lo <= capacity && capacity < hi, "{what}");
                            assert!(
                                hi <= lo * 1.05 || (var == Var::Concurrency && hi - lo <= 1.0),
                                "{what}"
                            );
                        }
                        "none_passed" => assert!(capacity < rules.floor(), "{what}"),
                        other => panic!("{what}: {other}"),
                    }
                }
            }
        }
    }

    /// Capacity 64 until the fifth probe, then 1 (the server lost its capacity mid-search):
    /// the pass at 32 measured before the drop is probed again, fails, and the search goes
    /// on below it and says the server changed.
    #[test]
    fn a_capacity_that_drops_mid_search_is_rechecked_not_reported_as_converged() {
        let conc = Rules {
            var: Var::Concurrency,
            start: 8.0,
            limit: 1024.0,
            ..RATE
        };
        let mut probes: Vec<SearchProbe> = Vec::new();
        let outcome = loop {
            assert!(probes.len() < 40, "no end: {probes:?}");
            match conc.next(&probes) {
                Step::Probe(load) => {
                    let capacity = if probes.len() < 4 { 64.0 } else { 1.0 };
                    let good = if load <= capacity { 98 } else { 2 };
                    probes.push(probe(load, vec![], &[tally(100, good)], load <= capacity));
                }
                Step::Done(o) => break o,
            }
        };
        let loads: Vec<f64> = probes.iter().map(|p| p.load).collect();
        assert_eq!(&loads[..3], &[8.0, 16.0, 32.0], "{loads:?}");
        assert!(
            loads.iter().filter(|&&l| l == 32.0).count() == 2,
            "{loads:?}"
        );
        assert_eq!(outcome.stopped_by, "converged");
        assert_eq!(outcome.max_passing, Some(1.0), "{outcome:?}");
        assert!(outcome.reason.contains("capacity changed"), "{outcome:?}");
        // A real cliff (the pass holds when probed again) ends where it was.
        let cliff = |load: f64| {
            let good = if load <= 32.0 { 98 } else { 2 };
            probe(load, vec![], &[tally(100, good)], load <= 32.0)
        };
        let mut probes = vec![cliff(32.0), cliff(33.0)];
        assert_eq!(
            conc.next(&probes),
            Step::Probe(32.0),
            "the pass is probed again"
        );
        probes.push(cliff(32.0));
        match conc.next(&probes) {
            Step::Done(o) => {
                assert_eq!((o.max_passing, o.first_failing), (Some(32.0), Some(33.0)));
                assert!(!o.reason.contains("changed"), "{o:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn loads_read_with_their_unit() {
        assert_eq!(Var::Rate.show(212.5), "212.5 req/s");
        assert_eq!(Var::Concurrency.show(48.0), "48 in flight");
        assert_eq!(Var::Rate.show(1.0 / 3.0), "0.333 req/s");
    }
}
