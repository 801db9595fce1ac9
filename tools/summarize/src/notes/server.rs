//! Notes from the server's own view of each point (loadgen's `server` and `gpus` objects):
//! why a point is slow, in the server's words. Each is silent where loadgen recorded no such
//! figure. Thresholds are constants here and in the README.

use crate::input::metrics::{DistName, Metric, Scalar, Stat};
use crate::input::points::{Point, point_name};
use crate::notes::note::Facts;
use crate::notes::words::{KNEE_GAIN, load_name, series, series_name};
use crate::render::human;
use servbench::record::ServerStats;

/// Speculative acceptance lower by this much (absolute) at the highest load than at the lowest.
pub const SPEC_DROP: f64 = 0.05;
/// KV-cache usage above this share is full.
pub const KV_FULL: f64 = 0.95;
/// Below this gain over the previous load, throughput has flattened (as the knee note's).
pub const FLAT_GAIN: f64 = KNEE_GAIN;
/// Mean GPU utilization below this (%) at the single-stream point is low.
pub const GPU_LOW_UTIL_PCT: f64 = 50.0;
/// Server-side mean TTFT below this share of the client's, and ...
pub const SERVER_TTFT_SHARE: f64 = 0.5;
/// ... below it by more than this (ms): time spent before the engine saw the request.
pub const SERVER_TTFT_GAP_MS: f64 = 10.0;
/// Server and client token counts differ by more than this share.
pub const TOKEN_MISMATCH: f64 = 0.01;
/// The server's prefix-cache hit rate above loadgen's expected one by more than this share.
pub const PREFIX_HITS_OVER: f64 = 0.05;

/// The first repeat's server view (repeats of a point watched the same server).
fn server(p: &Point) -> Option<&ServerStats> {
    p.repeats.iter().find_map(|s| s.server.as_ref())
}

pub fn spec_acceptance_falls(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut out = Vec::new();
    for s in series(points) {
        let with: Vec<&Point> = s
            .iter()
            .copied()
            .filter(|p| p.mean(Metric::SPEC_ACCEPT).is_some())
            .collect();
        let (Some(lo), Some(hi)) = (with.first(), with.last()) else {
            continue;
        };
        let (a_lo, a_hi) = (
            lo.mean(Metric::SPEC_ACCEPT).unwrap_or(0.0),
            hi.mean(Metric::SPEC_ACCEPT).unwrap_or(0.0),
        );
        if with.len() < 2 || a_lo - a_hi <= SPEC_DROP {
            continue;
        }
        let len = |p: &Point| {
            server(p)
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.mean_accepted_len)
        };
        let lengths = match (len(lo), len(hi)) {
            (Some(a), Some(b)) => format!(" (accepted length {a:.2} to {b:.2} tokens per step)"),
            _ => String::new(),
        };
        let stream = Metric::Scalar(Scalar::StreamTokS);
        let speed = match (lo.mean(stream), hi.mean(stream)) {
            (Some(a), Some(b)) => format!(
                "; each stream decodes {} tok/s at {} but {} tok/s at {}",
                human(a),
                load_name(lo),
                human(b),
                load_name(hi)
            ),
            _ => String::new(),
        };
        out.push(format!(
            "speculative acceptance falls with load{}: {a_lo:.2} at {} to {a_hi:.2} at {}{lengths}{speed}: \
             speculation gains less as batches grow, and the verify work still costs",
            series_name(lo, keys),
            load_name(lo),
            load_name(hi),
        ));
    }
    out
}

pub fn kv_full_preempting(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    // Where a point has a previous load in its series, say whether throughput flattened.
    let mut flat = std::collections::BTreeMap::new();
    for s in series(points) {
        for w in s.windows(2) {
            if let (Some(a), Some(b)) = (w[0].mean(Metric::TOK_S), w[1].mean(Metric::TOK_S))
                && a > 0.0
            {
                flat.insert(
                    point_name(w[1], &keys.varying),
                    (b / a - 1.0, load_name(w[0])),
                );
            }
        }
    }
    for p in points {
        let (Some(kv), Some(pre)) = (p.mean(Metric::KV_MAX), p.mean(Metric::PREEMPTIONS)) else {
            continue;
        };
        if kv / 100.0 <= KV_FULL || pre <= 0.0 {
            continue;
        }
        let name = point_name(p, &keys.varying);
        if !seen.insert(name.clone()) {
            continue;
        }
        let trend = match flat.get(&name) {
            Some((gain, prev)) if *gain < FLAT_GAIN => format!(
                " where output throughput flattens ({:+.0}% over {prev})",
                gain * 100.0
            ),
            Some((gain, prev)) => format!(" (throughput still {:+.0}% over {prev})", gain * 100.0),
            None => String::new(),
        };
        out.push(format!(
            "KV cache full at {name} (max {:.0}%, {} preemptions){trend}: the scheduler evicts \
             running requests and recomputes them; give it more KV (memory, TP) or run fewer \
             requests at once",
            kv,
            pre.round()
        ));
    }
    out
}

pub fn gpu_idle_single_stream(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    points
        .iter()
        .filter(|p| p.params.concurrency == Some(1))
        .filter_map(|p| {
            let util = p.mean(Metric::GPU_UTIL)?;
            (util < GPU_LOW_UTIL_PCT).then(|| {
                let gpus = p.repeats.first().map_or(0, |s| s.gpus.len());
                format!(
                    "GPU utilization is low at the single stream, {}: mean {util:.0}% over {gpus} GPU(s); \
                     one stream leaves the GPUs waiting (per-step overhead, launch gaps, the client), \
                     so C=1 figures measure that overhead more than the hardware",
                    point_name(p, &keys.varying)
                )
            })
        })
        .collect()
}

pub fn server_ttft_below_client(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let hits: Vec<String> = points
        .iter()
        .filter_map(|p| {
            let client = p.mean(Metric::Dist(DistName::Ttft, Stat::Mean))?;
            let srv = server(p)?.ttft_ms?.mean;
            (srv < client * SERVER_TTFT_SHARE && client - srv > SERVER_TTFT_GAP_MS).then(|| {
                format!(
                    "{} (mean {} ms at the engine, {} ms at the client)",
                    point_name(p, &keys.varying),
                    human(srv),
                    human(client)
                )
            })
        })
        .collect();
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "server-side TTFT is far below the client's at {}: the time goes before the engine sees \
         the request (queueing in the API server or a proxy, the network) or in the client",
        hits.join(", ")
    )]
}

pub fn token_counts_disagree(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut hits = Vec::new();
    // Failed and abandoned requests' tokens are counted by the server and not by the client
    // (it cannot know how long the server decoded a stream it left): only clean points compare.
    for p in points
        .iter()
        .filter(|p| !p.partial && p.errors() == 0 && p.cancelled() == 0)
    {
        for s in &p.repeats {
            let Some(srv) = &s.server else { continue };
            let pairs = [
                ("output", srv.generation_tokens, s.output_tokens),
                ("prompt", srv.prompt_tokens, s.prompt_tokens),
            ];
            for (what, server_count, client) in pairs {
                let Some(server_count) = server_count else {
                    continue;
                };
                let off = server_count.abs_diff(client) as f64 / client.max(1) as f64;
                if off > TOKEN_MISMATCH {
                    hits.push(format!(
                        "{} ({what}: server {server_count}, client {client})",
                        point_name(p, &keys.varying)
                    ));
                }
            }
        }
    }
    if hits.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "the server's token counts disagree with the client's by more than {:.0}% at {}: another \
         client loading the same server, prompt-cache reuse the server does not count, or a \
         tokenizer difference; per-token figures there are suspect",
        TOKEN_MISMATCH * 100.0,
        hits.join(", ")
    )]
}

/// Prompts loadgen expected the prefix cache not to hold (unique prompts: expected 0) that the
/// server served from it: a rerun of the same `--seed` against a warm server, whose TTFT the
/// cache flatters.
pub fn prefix_hits_unexpected(facts: &Facts) -> Vec<String> {
    let (points, keys) = (facts.points, &facts.keys);
    let mut hits = Vec::new();
    let mut seeds = std::collections::BTreeSet::new();
    for p in points {
        for s in &p.repeats {
            let (Some(expected), Some(got)) = (
                s.workload.prefix_hit_rate_expected,
                s.server.as_ref().and_then(|srv| srv.prefix_hit_rate),
            ) else {
                continue;
            };
            if got > expected + PREFIX_HITS_OVER {
                hits.push(format!(
                    "{} ({:.1}% of prompt tokens cached, {:.1}% expected)",
                    point_name(p, &keys.varying),
                    got * 100.0,
                    expected * 100.0
                ));
                seeds.extend(s.workload.seed);
            }
        }
    }
    if hits.is_empty() {
        return Vec::new();
    }
    let seeds = match seeds.len() {
        0 => String::new(),
        _ => format!(
            " (seed {})",
            seeds
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    vec![format!(
        "the server's prefix cache held prompts loadgen did not expect it to at {}: they were sent \
         before (a rerun of the same --seed{seeds} against a warm server, or another client's), so \
         TTFT is flattered; rerun without --seed (a fresh seed each run) or with --flush-cache",
        hits.join(", ")
    )]
}
