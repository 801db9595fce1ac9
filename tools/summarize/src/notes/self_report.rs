//! Notes from the engine's own per-request timing (the summaries' `ttft_split`): where a
//! point's TTFT goes, in the engine's queue, its prefill, or outside it; and requests whose
//! server TTFT exceeds the client's (a note, never a negative share).

use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::render::human;
use servbench::record::TtftSplit;

/// Outside the engine above this share of the client TTFT: the note says it dominates.
pub const OUTSIDE_SHARE: f64 = 0.5;
/// The engine's queue above this share of the client TTFT, and at least [`QUEUE_MIN_MS`]:
/// requests waited for a place in the batch.
pub const QUEUE_SHARE: f64 = 0.25;
pub const QUEUE_MIN_MS: f64 = 1.0;

/// The split of each repeat with requests in it.
fn splits(p: &Point) -> impl Iterator<Item = &TtftSplit> {
    p.repeats
        .iter()
        .filter_map(|s| s.ttft_split.as_ref())
        .filter(|t| t.requests > 0)
}

/// Mean over repeats of `f` of the split.
fn mean(p: &Point, f: impl Fn(&TtftSplit) -> Option<f64>) -> Option<f64> {
    let v: Vec<f64> = splits(p).filter_map(f).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

pub fn ttft_mostly_outside(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let client = mean(p, |t| Some(t.client_ttft_ms))?;
            let outside = mean(p, |t| Some(t.outside_ms))?;
            (client > 0.0 && outside > OUTSIDE_SHARE * client).then(|| {
                format!(
                    "{} ({} of {} ms)",
                    point_name(p, &keys.varying),
                    human(outside),
                    human(client)
                )
            })
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "TTFT is mostly outside the engine: the client, the network or the frontend, at {}",
        hits.join(", ")
    )]
}

/// Requests that waited in the engine's queue (its own per-request timing), with the cause the
/// server's view gives: seen waiting behind a full batch, named with what ran and what waited;
/// none where the engine took every request as it came (nothing waiting at any scrape while it
/// ran, and at a closed-loop point the whole load in one batch): they waited for the step in
/// flight when they arrived, as in any engine; said as unknown where the gauges saw too little.
pub fn engine_queue_waits(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    points
        .iter()
        .filter_map(|p| {
            let client = mean(p, |t| Some(t.client_ttft_ms))?;
            let queue = mean(p, |t| t.engine_queue_ms)?;
            if queue < QUEUE_MIN_MS || queue <= QUEUE_SHARE * client {
                return None;
            }
            let waited = format!(
                "requests waited {} ms in the engine's queue at {} (of a {} ms TTFT)",
                human(queue),
                point_name(p, &keys.varying),
                human(client)
            );
            match queue_cause(p) {
                QueueCause::FullBatch { running, waiting } => Some(format!(
                    "{waited}: the batch was full: the server ran at most {running:.0} while up to {waiting:.0} waited"
                )),
                QueueCause::NothingWaited => None,
                QueueCause::Unseen => Some(format!(
                    "{waited}; the server's running and waiting gauges did not show why (a full batch, or a step in flight when they arrived)"
                )),
            }
        })
        .collect()
}

/// Why a point's requests waited, as the server's running and waiting gauges (and its step
/// log's largest decode batch) tell it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum QueueCause {
    /// Requests were seen waiting: the server ran at most `running` while up to `waiting` did.
    FullBatch { running: f64, waiting: f64 },
    /// The engine ran with nothing waiting at any scrape (and, at a closed-loop point, held the
    /// whole load at once): no batch was full.
    NothingWaited,
    /// No gauges, or they saw too little to say.
    Unseen,
}

fn queue_cause(p: &Point) -> QueueCause {
    let most = |f: &dyn Fn(&servbench::record::SummaryRecord) -> Option<f64>| {
        p.repeats.iter().filter_map(f).reduce(f64::max)
    };
    let waiting = most(&|s| Some(s.server.as_ref()?.waiting.as_ref()?.max));
    let running = most(&|s| Some(s.server.as_ref()?.running.as_ref()?.max));
    let batch = most(&|s| Some(f64::from(s.engine_steps.as_ref()?.decode_full_batch?)));
    let held = running.into_iter().chain(batch).reduce(f64::max);
    match (waiting, held) {
        (Some(waiting), _) if waiting >= 1.0 => QueueCause::FullBatch {
            running: running.unwrap_or(0.0),
            waiting,
        },
        (Some(_), Some(held)) if held >= 1.0 => match p.params.concurrency {
            Some(c) if held < f64::from(c) => QueueCause::Unseen,
            _ => QueueCause::NothingWaited,
        },
        _ => QueueCause::Unseen,
    }
}

pub fn server_ttft_over_client(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    points
        .iter()
        .filter_map(|p| {
            let over: u64 = splits_all(p).map(|t| t.server_over_client).sum();
            let by = splits_all(p)
                .filter_map(|t| t.server_over_client_max_ms)
                .fold(0.0, f64::max);
            (over > 0).then(|| {
                format!(
                    "{over} requests at {} had a server time above the client's (TTFT above the client's TTFT, or generation above the client's whole request; by up to {} ms): the clocks or the definitions differ; left out of the TTFT split",
                    point_name(p, &keys.varying),
                    human(by)
                )
            })
        })
        .collect()
}

/// Every repeat's split, those with no request in the split too.
fn splits_all(p: &Point) -> impl Iterator<Item = &TtftSplit> {
    p.repeats.iter().filter_map(|s| s.ttft_split.as_ref())
}

/// One line when a server was launched with `--self-report` and what it should have reported
/// did not come: what was not available (the tables are as without it).
pub fn unavailable(facts: &Facts) -> Vec<String> {
    let (servers, points) = (&facts.inputs.servers, facts.points);
    if points.is_empty() || !servers.iter().any(|s| s.self_report) {
        return Vec::new();
    }
    let mut missing = Vec::new();
    if !points.iter().any(|p| splits_all(p).next().is_some()) {
        missing.push("per-request server timing (vLLM `metrics`, llama-server `timings`)");
    }
    let asked_steps = servers.iter().any(|s| {
        s.self_report_flags
            .iter()
            .any(|f| f == servbench::engines::STEP_LOG_FLAG)
    });
    if asked_steps
        && !points
            .iter()
            .any(|p| p.repeats.iter().any(|s| s.engine_steps.is_some()))
    {
        missing.push("the engine's step log (its decode budget is the client's TPOT)");
    }
    if missing.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "engine self-report asked for (srv-launch --self-report) but not available: {}; the figures above are the client's alone",
        missing.join(", ")
    )]
}

/// The engine's FLOPs and bytes per GPU per second over a point (mean over repeats), from its
/// own counters (`server.est_*_per_gpu`).
pub fn achieved(p: &Point) -> Option<(f64, f64)> {
    let per: Vec<(f64, f64)> = p
        .repeats
        .iter()
        .filter(|s| s.duration_s > 0.0)
        .filter_map(|s| {
            let srv = s.server.as_ref()?;
            let flops = srv.est_flops_per_gpu?;
            let bytes = srv.est_read_bytes_per_gpu? + srv.est_write_bytes_per_gpu.unwrap_or(0.0);
            Some((flops / s.duration_s, bytes / s.duration_s))
        })
        .collect();
    let n = per.len() as f64;
    (!per.is_empty()).then(|| {
        (
            per.iter().map(|x| x.0).sum::<f64>() / n,
            per.iter().map(|x| x.1).sum::<f64>() / n,
        )
    })
}

/// With `--roofline`: each point's MFU and MBU from the engine's counters, against the
/// measured bandwidth (collbench limits) when given, else the card's datasheet, labelled.
pub fn utilization(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let Some(roof) = &facts.roofline else {
        return Vec::new();
    };
    let rates = servbench::presets::Rates::datasheet(&roof.hw);
    let peak_flops = rates.flops(roof.model.weight_format);
    let (bw_gbps, bw_from) = match &roof.measured_bw {
        Some((gbps, _)) => (
            *gbps,
            format!("{} GB/s measured (collbench limits)", human(*gbps)),
        ),
        None => (
            roof.hw.mem_bw_gbps,
            format!(
                "{}'s datasheet {} GB/s",
                roof.hw.name,
                human(roof.hw.mem_bw_gbps)
            ),
        ),
    };
    points
        .iter()
        .filter_map(|p| {
            let (flops_s, bytes_s) = achieved(p)?;
            let mfu = flops_s / peak_flops * 100.0;
            let mbu = bytes_s / (bw_gbps * 1e9) * 100.0;
            let bound = if mbu >= mfu { ("memory", mbu, "bandwidth") } else { ("compute", mfu, "compute") };
            let distance = if bound.1 < 50.0 {
                format!(", and far from the {} limit", bound.2)
            } else if bound.1 >= 80.0 {
                format!(", near the {} limit", bound.2)
            } else {
                String::new()
            };
            Some(format!(
                "MBU {}%, MFU {}% at {} (the engine's own FLOP and byte counters, per GPU; of {} and {}'s datasheet {} TFLOP/s {}): {}-bound{distance}",
                human(mbu),
                human(mfu),
                point_name(p, &keys.varying),
                bw_from,
                roof.hw.name,
                human(peak_flops / 1e12),
                roof.model.weight_format.name(),
                bound.0,
            ))
        })
        .collect()
}
