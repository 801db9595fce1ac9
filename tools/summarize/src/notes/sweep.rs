//! Notes on a load sweep from the client's figures: throughput that falls or saturates, shorter
//! outputs slower than longer ones, TTFT tails, failures, chunked tokens, a client that set the
//! pace, lengths that missed their targets.

use crate::input::metrics::{DistName, Metric, Scalar, Stat};
use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::notes::words::{
    KNEE_GAIN, MIN_DROP, MIN_FOR_P99, SCALING_GAIN, SEND_LAG_P99_MS, TAIL_TRUSTED, TPC_ABOVE,
    TTFT_P95_RATIO, TTFT_TAIL_RATIO, load_name, run_of, series, series_name, without_run,
};
use crate::render::human;
use servbench::record::RampRecord;
use servbench::stats::knee::KneeRule;
use std::collections::BTreeMap;

/// `a` is below `b` by more than MIN_DROP and more than the two points' noise combined.
fn clearly_below(m: Metric, a: &Point, b: &Point) -> bool {
    let (Some(va), Some(vb)) = (a.mean(m), b.mean(m)) else {
        return false;
    };
    let noise = (a.noise(m).unwrap_or(0.0).powi(2) + b.noise(m).unwrap_or(0.0).powi(2)).sqrt();
    va < vb * (1.0 - MIN_DROP) && vb - va > noise
}

pub fn throughput_falls(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut out = Vec::new();
    for s in series(points) {
        // The peak, then any later point clearly below it.
        let Some((peak_i, peak)) = s
            .iter()
            .enumerate()
            .filter(|(_, p)| p.mean(Metric::TOK_S).is_some())
            .max_by(|a, b| {
                a.1.mean(Metric::TOK_S)
                    .unwrap_or(0.0)
                    .total_cmp(&b.1.mean(Metric::TOK_S).unwrap_or(0.0))
            })
        else {
            continue;
        };
        let falls: Vec<&&Point> = s[peak_i + 1..]
            .iter()
            .filter(|p| clearly_below(Metric::TOK_S, p, peak))
            .collect();
        if let Some(last) = falls.last() {
            let v = |p: &Point| human(p.mean(Metric::TOK_S).unwrap_or(0.0));
            out.push(format!(
                "throughput falls as load rises{}: {} tok/s at {} but {} tok/s at {}: past saturation the server loses throughput (preemption, KV-cache thrashing or contention); do not run it there",
                series_name(peak, keys),
                v(peak),
                load_name(peak),
                v(last),
                load_name(last)
            ));
        }
    }
    out
}

/// The shared knee definition with the note's thresholds (why they differ from loadgen's
/// `--min-gain`: `servbench::stats::knee`).
pub const KNEE: KneeRule = KneeRule {
    min_gain: KNEE_GAIN,
    scaled_first: Some(SCALING_GAIN),
};

/// The knee rule of a series: the rule of the ramp that measured it (same workload and labels,
/// every load one of its levels, its `min_gain` recorded), else the note's own.
fn knee_rule_of(s: &[&Point], ramps: &[RampRecord]) -> KneeRule {
    let first = s[0];
    ramps
        .iter()
        .filter(|r| {
            r.point.input_len == first.params.input_len
                && r.point.max_tokens == first.params.max_tokens
                && r.labels.iter().all(|(k, v)| first.labels.get(k) == Some(v))
                && s.iter().all(|p| {
                    r.levels
                        .iter()
                        .any(|l| Some(l.concurrency) == p.params.concurrency)
                })
        })
        .find_map(|r| r.min_gain)
        .map_or(KNEE, |min_gain| KneeRule {
            min_gain,
            scaled_first: None,
        })
}

/// The server's gauges from the knee on: requests waiting while fewer than the load ran,
/// (running max, waiting max, the first such point).
fn batch_cap<'a>(past: &[&'a Point]) -> Option<(f64, f64, &'a Point)> {
    past.iter().find_map(|p| {
        let waiting = p.mean(Metric::Scalar(Scalar::WaitingMax))?;
        let running = p.mean(Metric::Scalar(Scalar::RunningMax))?;
        let load = f64::from(p.params.concurrency?);
        (waiting >= 1.0 && running < load).then_some((running, waiting, *p))
    })
}

/// The knee of each load series; the knee of a ramp's levels judged by the ramp's own rule (its
/// `min_gain`), so the note names the ramp's best C.
pub fn saturation_knee(facts: &Facts) -> Vec<String> {
    let (points, keys, ramps) = (facts.points, &facts.keys, &facts.inputs.ramps);
    let mut out = Vec::new();
    for s in series(points) {
        let tok: Vec<Option<f64>> = s.iter().map(|p| p.mean(Metric::TOK_S)).collect();
        let Some(knee) = knee_rule_of(&s, ramps).find(&tok) else {
            continue;
        };
        let (i, gain) = (knee.at, knee.gain);
        let ttft = |p: &Point| p.mean(Metric::TTFT_P50);
        let latency = match (ttft(s[i]), ttft(s[i + 1])) {
            (Some(x), Some(y)) if x > 0.0 => {
                format!(" while TTFT p50 goes {:.1}x", y / x)
            }
            _ => String::new(),
        };
        let step = if gain >= 0.0 {
            format!("adds only {:.0}% throughput", gain * 100.0)
        } else {
            format!("gives {:.0}% less throughput", -gain * 100.0)
        };
        let cause = match batch_cap(&s[i..]) {
            Some((running, waiting, at)) => format!(
                "; at {} the server ran at most {running:.0} while {waiting:.0} waited: a batch limit (max running requests, PP micro-batch), not the hardware",
                load_name(at)
            ),
            None => String::new(),
        };
        out.push(format!(
            "saturation knee{} at {}: {} tok/s; {} {step}{latency}: more load buys latency, not throughput{cause}",
            series_name(s[i], keys),
            load_name(s[i]),
            human(tok[i].unwrap_or(0.0)),
            load_name(s[i + 1]),
        ));
    }
    out
}

/// What a shorter output's throughput should be, from the longer one's: a closed-loop slot
/// makes `out` tokens per TTFT + (out - 1) x TPOT, so with the same TTFT and TPOT shorter
/// outputs are slower by prefill's share alone. Only a shortfall beyond that is an anomaly.
fn expected_short_tok_s(short: &Point, long: &Point) -> Option<f64> {
    let tok = long.mean(Metric::TOK_S)?;
    let (ttft, tpot) = (long.mean(Metric::TTFT_P50)?, long.mean(Metric::TPOT_P50)?);
    let per_slot = |out: u32| f64::from(out) / (ttft + f64::from(out.max(1) - 1) * tpot);
    let (s, l) = (short.params.max_tokens?, long.params.max_tokens?);
    Some(tok * per_slot(s) / per_slot(l))
}

/// Across runs labelled apart (`run=round1`, `run=round2`) too: the same point measured in two
/// runs is one point. A point cut short still counts (its rate covers what ran), one whose
/// server went down does not.
pub fn shorter_output_slower(facts: &Facts) -> Vec<String> {
    let points = facts.points;
    let mut out = Vec::new();
    let mut by: BTreeMap<_, Vec<&Point>> = BTreeMap::new();
    for p in points.iter().filter(|p| {
        p.params.max_tokens.is_some()
            && p.server_down.is_none()
            && p.repeats.iter().any(|s| s.ok > 0)
    }) {
        by.entry((
            without_run(&p.labels),
            p.params.input_len,
            p.params.concurrency,
            p.params.rate_rps().map(f64::to_bits),
        ))
        .or_default()
        .push(p);
    }
    for mut group in by.into_values() {
        group.sort_by_key(|p| p.params.max_tokens);
        for (i, short) in group.iter().enumerate() {
            for long in &group[i + 1..] {
                let Some(expected) = expected_short_tok_s(short, long) else {
                    continue;
                };
                let short_tok = short.mean(Metric::TOK_S).unwrap_or(0.0);
                let noise = (short.noise(Metric::TOK_S).unwrap_or(0.0).powi(2)
                    + long.noise(Metric::TOK_S).unwrap_or(0.0).powi(2))
                .sqrt();
                if short.params.max_tokens != long.params.max_tokens
                    && short_tok < expected * (1.0 - MIN_DROP)
                    && expected - short_tok > noise
                {
                    let tag = |p: &Point| {
                        format!("{}{}", run_of(p), if p.partial { " (partial)" } else { "" })
                    };
                    out.push(format!(
                        "at {}, out={}{} gives {} tok/s but the longer out={}{} gives {} tok/s (its TTFT and TPOT predict {} at out={}): shorter outputs should not be slower; look at per-request overhead (TTFT p50 {} vs {} ms) and the server's batch limits",
                        load_name(short),
                        short.params.max_tokens.unwrap_or(0),
                        tag(short),
                        human(short_tok),
                        long.params.max_tokens.unwrap_or(0),
                        tag(long),
                        human(long.mean(Metric::TOK_S).unwrap_or(0.0)),
                        human(expected),
                        short.params.max_tokens.unwrap_or(0),
                        short.mean(Metric::TTFT_P50).map_or("-".into(), human),
                        long.mean(Metric::TTFT_P50).map_or("-".into(), human),
                    ));
                }
            }
        }
    }
    out
}

pub fn ttft_tail(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter(|p| p.repeats.iter().map(|s| s.ok).sum::<u64>() >= MIN_FOR_P99)
        .filter_map(|p| {
            let (p50, p99) = (p.mean(Metric::TTFT_P50)?, p.mean(Metric::TTFT_P99)?);
            // Under 500 successes a p99 is a handful of requests: one stall of the machine
            // is not a queue, so the p95 must show the tail too.
            let ok: u64 = p.repeats.iter().map(|s| s.ok).sum();
            let p95 = p.mean(Metric::Dist(DistName::Ttft, Stat::P95))?;
            let tail_seen = ok >= TAIL_TRUSTED || p95 > TTFT_P95_RATIO * p50;
            (p50 > 0.0 && p99 > TTFT_TAIL_RATIO * p50 && tail_seen).then(|| {
                format!(
                    "{} ({} vs {} ms, {:.1}x)",
                    point_name(p, &keys.varying),
                    human(p99),
                    human(p50),
                    p99 / p50
                )
            })
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "TTFT p99 far above p50 at {}: some requests wait far longer for their first token, usually queueing before prefill (the server at its batch or KV limit), else stalls on the server or client host; look at goodput, not mean latency",
        hits.join(", ")
    )]
}

pub fn errors_or_partial(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut failed = Vec::new();
    let mut partial = Vec::new();
    let mut down = Vec::new();
    for p in points {
        let errors = p.errors();
        if errors > 0 {
            let mut classes: BTreeMap<&str, u64> = BTreeMap::new();
            for s in &p.repeats {
                for (k, v) in &s.errors_by_class {
                    *classes.entry(k).or_default() += v;
                }
            }
            let list: Vec<String> = classes.iter().map(|(k, v)| format!("{v} {k}")).collect();
            failed.push(format!(
                "{} ({} of {}: {})",
                point_name(p, &keys.varying),
                errors,
                p.requests(),
                list.join(", ")
            ));
        }
        if let Some(why) = &p.server_down {
            down.push(format!("{}: {why}", point_name(p, &keys.varying)));
        } else if p.partial {
            partial.push(point_name(p, &keys.varying));
        }
    }
    let mut out = Vec::new();
    if !failed.is_empty() {
        out.push(format!(
            "requests failed at {}: throughput and latency there cover only the successes",
            failed.join(", ")
        ));
    }
    if !partial.is_empty() {
        out.push(format!(
            "cut short (partial): {}: their figures cover less than the planned run",
            partial.join(", ")
        ));
    }
    if !down.is_empty() {
        out.push(format!(
            "the server went down during {}. Such a point stopped there: its figures cover the requests before and say nothing about the server's capacity",
            down.join("; ")
        ));
    }
    out
}

/// Requests cancelled on purpose (`loadgen --cancel-rate`): in no figure of their point.
pub fn cancelled(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter(|p| p.cancelled() > 0)
        .map(|p| {
            let after = p
                .repeats
                .iter()
                .find_map(|s| s.workload.cancel_after.clone());
            format!(
                "{} ({} of {}{})",
                point_name(p, &keys.varying),
                p.cancelled(),
                p.requests(),
                after.map_or(String::new(), |a| format!(", abandoned after {a}"))
            )
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "requests cancelled on purpose (--cancel-rate) at {}: they are in no figure, the latencies are the other requests'; set the TTFT beside a run without --cancel-rate (summarize --compare) to see what the abandoned streams cost the others (a server that keeps decoding them delays their first tokens)",
        hits.join(", ")
    )]
}

pub fn tokens_per_chunk(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let tpc = p.mean(Metric::TPC)?;
            (tpc > TPC_ABOVE).then(|| format!("{} ({tpc:.2})", point_name(p, &keys.varying)))
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "more than one token per chunk at {}: speculative decoding or server-side batching of tokens; ITL is then a gap between chunks, not tokens: read TPOT for the per-token time",
        hits.join(", ")
    )]
}

pub fn client_limited(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let lag = p.mean(Metric::LAG_P99)?;
            (lag > SEND_LAG_P99_MS).then(|| {
                format!(
                    "{} (send lag p99 {} ms)",
                    point_name(p, &keys.varying),
                    human(lag)
                )
            })
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "client-limited: requests left late at {}: the load generator, not the server, set the pace; give loadgen more cores or hosts and rerun those points",
        hits.join(", ")
    )]
}

pub fn lengths_missed(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut prompts = Vec::new();
    let mut outputs = Vec::new();
    // A point the server died in says nothing about its tokenizer or EOS.
    for p in points.iter().filter(|p| p.server_down.is_none()) {
        let (exact, targeted, mismatch, ok) = p.repeats.iter().fold((0, 0, 0, 0), |acc, s| {
            (
                acc.0 + s.prompt_len_exact,
                acc.1 + s.prompt_len_targeted,
                acc.2 + s.output_len_mismatch,
                acc.3 + s.ok,
            )
        });
        let missed = targeted - exact.min(targeted);
        if missed > 0 {
            prompts.push(format!(
                "{} ({missed} of {targeted})",
                point_name(p, &keys.varying)
            ));
        }
        if mismatch > 0 {
            outputs.push(format!(
                "{} ({mismatch} of {ok})",
                point_name(p, &keys.varying)
            ));
        }
    }
    let mut out = Vec::new();
    if !prompts.is_empty() {
        out.push(format!(
            "prompts missed their target length at {}: the server's tokenizer split them differently; input lengths there are approximate",
            prompts.join(", ")
        ));
    }
    if !outputs.is_empty() {
        out.push(format!(
            "outputs were not the requested length at {}: EOS before max_tokens? set ignore_eos, or per-token figures compare unequal work",
            outputs.join(", ")
        ));
    }
    out
}
