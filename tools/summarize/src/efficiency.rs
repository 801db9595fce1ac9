//! Efficiency: measured figures against what the hardware allows, with the shared presets and
//! roofline arithmetic (`servbench::presets`, the same srv-sim uses).
//!
//! - Per point, the decode rate one stream sees (1000 / TPOT p50) beside the roofline limit of
//!   one decode step at that batch (batch = concurrency; context = prompt + half the output).
//! - A note when a single stream decodes far below its limit: no concurrency tuning fixes that.
//! - For `coll` records, busbw as a share of the link's bandwidth.
//! - Decode budget: with `coll` records and a model split over TP ranks, the allreduce time per
//!   decoded token (two per layer, each of batch x hidden x activation bytes, time read off the
//!   measured sizes) beside the measured TPOT.

use crate::metrics::Metric;
use crate::points::{Keys, Point, point_name};
use crate::table::{Cell, Column, Table, human};
use servbench::presets::{self, Deployment, Hardware, Layout};
use servbench::record::CollRecord;

/// A single stream below this share of its roofline limit gets a note.
pub const SINGLE_STREAM_SHARE: f64 = 0.5;

/// The model, hardware and layout to judge against.
#[derive(Debug, Clone)]
pub struct Roofline {
    pub dep: Deployment,
}

impl Roofline {
    /// `MODEL@HARDWARE` (preset names or JSON card files).
    pub fn parse(spec: &str, tp: u32) -> Result<Roofline, String> {
        let (m, h) = spec.split_once('@').ok_or_else(|| {
            format!("'{spec}' is not MODEL@HARDWARE, e.g. llama-3.1-8b@h200 (or a card.json@h200)")
        })?;
        Roofline::of(m, h, tp)
    }

    pub fn of(model: &str, hw: &str, tp: u32) -> Result<Roofline, String> {
        Ok(Roofline {
            dep: Deployment::new(
                presets::load_model(model.trim())?,
                presets::load_hardware(hw.trim())?,
                Layout {
                    tp: tp.max(1),
                    pp: 1,
                },
            ),
        })
    }

    pub fn describe(&self) -> String {
        self.dep.describe()
    }

    /// Mean context of a decode step at this point: the prompt plus half the output.
    fn context(p: &Point) -> u64 {
        u64::from(p.params.input_len.unwrap_or(0)) + u64::from(p.params.max_tokens.unwrap_or(0)) / 2
    }

    /// Per-stream decode limit in tok/s at the point's batch (its concurrency, else 1).
    pub fn stream_limit(&self, p: &Point) -> f64 {
        let batch = p.params.concurrency.unwrap_or(1).max(1);
        1.0 / self.dep.decode_step(batch, Self::context(p)).total_s()
    }
}

/// Adds `tok/s/stream`, `limit` and `% of limit` columns to the points table.
pub fn add_columns(table: &mut Table, points_in_order: &[&Point], roof: &Roofline) {
    table.columns.extend([
        Column {
            name: "stream_tok_s".into(),
            header: "tok/s/stream".into(),
        },
        Column {
            name: "limit_tok_s".into(),
            header: "limit".into(),
        },
        Column {
            name: "limit_pct".into(),
            header: "% of limit".into(),
        },
    ]);
    table.context.push(("roofline".into(), roof.describe()));
    for (row, p) in table.rows.iter_mut().zip(points_in_order) {
        let stream = p.mean(Metric::Scalar(crate::metrics::Scalar::StreamTokS));
        let limit = roof.stream_limit(p);
        row.push(Cell::num(stream));
        row.push(Cell::num(Some(limit)));
        row.push(Cell::num(stream.map(|s| 100.0 * s / limit)));
    }
}

/// A single stream (concurrency 1) decoding far below its limit.
pub fn single_stream_note(points: &[Point], roof: &Roofline) -> Vec<String> {
    let keys = Keys::of(points);
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.params.concurrency == Some(1)) {
        let Some(stream) = p.mean(Metric::Scalar(crate::metrics::Scalar::StreamTokS)) else {
            continue;
        };
        let limit = roof.stream_limit(p);
        let share = stream / limit;
        if share < SINGLE_STREAM_SHARE {
            out.push(format!(
                "single stream at {} decodes {} tok/s against a limit of {} tok/s for {} ({:.0}% of the limit): no concurrency tuning fixes that; look at the engine (CUDA graphs, kernels, host overhead, quantization)",
                point_name(p, &keys.varying),
                human(stream),
                human(limit),
                roof.describe(),
                share * 100.0
            ));
        }
    }
    out
}

/// Adds `% link` to the collectives table: busbw over the bus bandwidth of the topology level
/// the record's ranks span on the hardware card.
pub fn add_link_share(table: &mut Table, coll_in_order: &[&CollRecord], hw: &Hardware) {
    table.columns.push(Column {
        name: "link_pct".into(),
        header: "% link".into(),
    });
    let levels: Vec<String> = hw
        .interconnect
        .levels
        .iter()
        .map(|l| format!("{} {} GB/s", l.name, human(l.busbw_gbps)))
        .collect();
    table.context.push((
        "link".into(),
        format!("{}: {}", hw.interconnect.name, levels.join(", ")),
    ));
    for (row, c) in table.rows.iter_mut().zip(coll_in_order) {
        let level = hw.interconnect.level_for(c.ranks);
        row.push(Cell::num(Some(100.0 * c.busbw_gbps / level.busbw_gbps)));
    }
}

/// Measured allreduce time (µs) at `bytes`, interpolated log-log between the measured sizes
/// (clamped to the ends), from records of the given rank count when there are any.
pub fn allreduce_us(coll: &[CollRecord], ranks: u32, bytes: f64) -> Option<(f64, u32)> {
    let all: Vec<&CollRecord> = coll.iter().filter(|c| c.op == "allreduce").collect();
    let same: Vec<&CollRecord> = all.iter().copied().filter(|c| c.ranks == ranks).collect();
    let mut pts: Vec<&CollRecord> = if same.is_empty() { all } else { same };
    if pts.is_empty() {
        return None;
    }
    // Prefer the latency mode (a decode step waits for each allreduce) when both are present.
    if pts.iter().any(|c| c.mode == "latency") {
        pts.retain(|c| c.mode == "latency");
    }
    pts.sort_by_key(|c| c.bytes);
    let measured_ranks = pts[0].ranks;
    let t = |c: &CollRecord| {
        if c.time_us.p50 > 0.0 {
            c.time_us.p50
        } else {
            c.time_us.mean
        }
    };
    if bytes <= pts[0].bytes as f64 {
        return Some((t(pts[0]), measured_ranks));
    }
    for w in pts.windows(2) {
        let (a, b) = (w[0], w[1]);
        if bytes <= b.bytes as f64 {
            let (xa, xb) = ((a.bytes as f64).ln(), (b.bytes as f64).ln());
            let (ya, yb) = (t(a).max(1e-9).ln(), t(b).max(1e-9).ln());
            let f = if xb > xa {
                (bytes.ln() - xa) / (xb - xa)
            } else {
                0.0
            };
            return Some(((ya + f * (yb - ya)).exp(), measured_ranks));
        }
    }
    let last = pts[pts.len() - 1];
    // Beyond the largest size: scale linearly with bytes (bandwidth-bound).
    Some((t(last) * bytes / last.bytes as f64, measured_ranks))
}

/// The decode budget sentences: allreduce time per decoded token beside TPOT, per point (or
/// at batch 1 when there are no points).
pub fn decode_budget(points: &[Point], coll: &[CollRecord], roof: &Roofline) -> Vec<String> {
    if coll.is_empty() || roof.dep.layout.tp <= 1 {
        return Vec::new();
    }
    let keys = Keys::of(points);
    let per_token = |batch: u32| -> Option<(f64, f64, u32)> {
        let bytes = roof.dep.model.allreduce_bytes(batch);
        let (us, ranks) = allreduce_us(coll, roof.dep.layout.tp, bytes)?;
        Some((
            f64::from(roof.dep.model.allreduces_per_step()) * us / 1000.0,
            bytes,
            ranks,
        ))
    };
    let ranks_caveat = |ranks: u32| {
        if ranks == roof.dep.layout.tp {
            String::new()
        } else {
            format!(
                " (allreduce measured over {ranks} ranks, the model runs TP={})",
                roof.dep.layout.tp
            )
        }
    };
    let mut out = Vec::new();
    if points.is_empty() {
        if let Some((ms, bytes, ranks)) = per_token(1) {
            out.push(format!(
                "decode budget for {}: 2 x {} layers x allreduce of {} = {} ms per decoded token at batch 1{}",
                roof.describe(),
                roof.dep.model.layers,
                size(bytes),
                human(ms),
                ranks_caveat(ranks)
            ));
        }
        return out;
    }
    for p in points {
        let batch = p.params.concurrency.unwrap_or(1).max(1);
        let (Some((ms, bytes, ranks)), Some(tpot)) = (per_token(batch), p.mean(Metric::TPOT_P50))
        else {
            continue;
        };
        let share = ms / tpot;
        let verdict = comm_verdict(share);
        out.push(format!(
            "{}: allreduce is {} ms of a {} ms step (2 x {} layers x {} at batch {batch}, {:.0}%): {verdict}{}",
            point_name(p, &keys.varying),
            human(ms),
            human(tpot),
            roof.dep.model.layers,
            size(bytes),
            share * 100.0,
            ranks_caveat(ranks)
        ));
    }
    out
}

/// What a share of the decode step spent in allreduces means for tuning.
pub fn comm_verdict(share: f64) -> &'static str {
    if share < 0.25 {
        "not the bottleneck"
    } else if share < 0.5 {
        "a large share of the step"
    } else {
        "the bottleneck: communication latency caps this TP degree"
    }
}

fn size(bytes: f64) -> String {
    if bytes >= 1048576.0 {
        format!("{} MiB", human(bytes / 1048576.0))
    } else if bytes >= 1024.0 {
        format!("{} KiB", human(bytes / 1024.0))
    } else {
        format!("{} B", human(bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_parses_presets_and_rejects_nonsense() {
        let r = Roofline::parse("llama-3.1-8b@h200", 1).unwrap();
        assert_eq!(r.describe(), "llama-3.1-8b on h200 (TP=1)");
        assert!(
            Roofline::parse("llama-3.1-8b", 1)
                .unwrap_err()
                .contains("MODEL@HARDWARE")
        );
        assert!(Roofline::parse("nope@h200", 1).is_err());
    }
}
