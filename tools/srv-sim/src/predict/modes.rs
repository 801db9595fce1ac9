//! `--predict --ramp` and `--predict --find-max`: loadgen's two searching modes, run on points
//! predicted in virtual time. Which level to try next, when a level is broken and which one is
//! best are shared's rules (`servbench::load::ramp`, `servbench::load::search`), the ones
//! loadgen judges a served run by; this walks them over a point measure given by the caller
//! (a predicted point: its records written as it is predicted). A prediction is never
//! interrupted and has no server to lose, so a ramp ends by a rule and a search by converging,
//! by its limit or with no load passing.

use servbench::cli;
use servbench::load::Arrival;
use servbench::load::Load;
use servbench::load::ramp::{self, Verdict};
use servbench::load::search::{self, Decision, Outcome, Step, Tally, Var};
use servbench::record::{RampLevel, SearchProbe, SummaryRecord};

/// One predicted point: its load and its repeat (or try) index in, its summary and level out.
pub type Measure<'a> = dyn FnMut(Load, u32) -> anyhow::Result<(SummaryRecord, Tally)> + 'a;

/// Doubles the concurrency from `first` until a rule stops it, each level `repeat` points;
/// returns the levels and the rule with its reason. `slo`: whether an `--slo` was given.
pub fn ramp(
    first: u32,
    rules: &ramp::Rules,
    repeat: u32,
    slo: bool,
    measure: &mut Measure,
) -> anyhow::Result<(Vec<RampLevel>, &'static str, String)> {
    let mut levels = Vec::new();
    let mut concurrency = first;
    loop {
        let (mut tok_s, mut req_s, mut tries) = (0.0, 0.0, Vec::new());
        for r in 0..repeat {
            let (s, tally) = measure(Load::Closed { concurrency }, r)?;
            tok_s += s.output_tok_s / f64::from(repeat);
            req_s += s.req_s / f64::from(repeat);
            tries.push(tally);
        }
        levels.push(ramp::level(concurrency, tok_s, req_s, &tries, slo));
        match rules.judge(&levels) {
            Verdict::Next(next) => concurrency = next,
            Verdict::Stop { rule, reason } => {
                cli::info(format!("predicted ramp stopped ({rule}): {reason}"));
                return Ok((levels, rule, reason));
            }
        }
    }
}

/// Runs the probes the search asks for, each tried until the rules decide it; returns the
/// probes and how the search ended. `open`: a rate search's arrivals and cap in flight.
pub fn find_max(
    rules: &search::Rules,
    open: (Arrival, Option<u32>),
    measure: &mut Measure,
) -> anyhow::Result<(Vec<SearchProbe>, Outcome)> {
    let mut probes: Vec<SearchProbe> = Vec::new();
    loop {
        let load = match rules.next(&probes) {
            Step::Probe(load) => load,
            Step::Done(outcome) => {
                cli::info(format!(
                    "predicted find-max stopped ({}): {}",
                    outcome.stopped_by, outcome.reason
                ));
                return Ok((probes, outcome));
            }
        };
        let pace = match rules.var {
            Var::Rate => Load::Open {
                rate_rps: load,
                arrival: open.0,
                max_concurrency: open.1,
            },
            Var::Concurrency => Load::Closed {
                concurrency: load as u32,
            },
        };
        let (mut tries, mut points) = (Vec::new(), Vec::new());
        let passed = loop {
            let (s, tally) = measure(pace, tries.len() as u32)?;
            points.push(s.point.index);
            tries.push(tally);
            match rules.decide(&tries) {
                Decision::Repeat => continue,
                Decision::Pass => break true,
                Decision::Fail => break false,
            }
        };
        probes.push(search::probe(load, points, &tries, passed));
    }
}
