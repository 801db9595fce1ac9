//! Efficiency: measured figures against what the hardware allows, with the shared presets and
//! roofline (`servbench::presets`, the same srv-sim uses).
//!
//! - Each row is judged in its own layout: the `tp` and `pp` labels its records carry (srv-launch
//!   puts them on the server record, loadgen carries them on), with `--tp`/`--pp` filling in only
//!   what the records do not say; a label that disagrees with the flag is an error.
//! - Two limits per row, for one stream at the row's batch (its concurrency): memory-bound
//!   (weights + KV per token over bandwidth) and the full modelled step (memory or compute,
//!   communication over the card's topology or `--comm-from`'s measured curve, and the fixed
//!   per-step overhead). The decode rate one stream sees (1000 / TPOT p50) is a share of each.
//! - A rate above a limit is not a share: the cell says `over` and a note says the card, the
//!   layout or the data is wrong.
//! - A single stream far below its memory-bound limit gets a note, with what the modelled step
//!   explains of the gap.
//! - For `coll` records, busbw as a share of the bus bandwidth of the level their ranks span.
//! - Decode budget without load points: the allreduce time per decoded token at batch 1 (two per
//!   layer, each of batch x hidden x activation bytes, the mean time at each measured size, as
//!   collbench decode reads it). With points, `steps` judges each point's step.

use crate::metrics::{Metric, Scalar};
use crate::points::{Keys, Point, point_name};
use crate::steps::{SpecTokens, spec_tokens};
use crate::table::{Cell, Column, Table, human};
use servbench::host::topo;
use servbench::presets::{
    self, Comm, DEFAULT_STEP_OVERHEAD_US, Deployment, Hardware, Layout, MeasuredCurve, ModelCard,
    StepCost,
};
use servbench::record::{CollRecord, HostEnv, label};

/// A single stream below this share of its memory-bound limit gets a note.
pub const SINGLE_STREAM_SHARE: f64 = 0.5;
/// Of such a stream, a modelled step at or above this share of the measured time explains it.
pub const STEP_EXPLAINS: f64 = 0.8;
/// A rate up to this far above a limit is the limit within clock and rounding noise (srv-sim,
/// which runs exactly at its modelled step, lands here); beyond it, it is an impossible rate.
pub const OVER_LIMIT_NOISE: f64 = 0.03;

/// The model and hardware to judge against, and what fills in a layout the records do not say.
#[derive(Debug, Clone)]
pub struct Roofline {
    pub model: ModelCard,
    pub hw: Hardware,
    /// `--tp`: the TP degree of rows whose records carry no `tp` label.
    pub tp: Option<u32>,
    /// `--pp`: likewise for `pp`.
    pub pp: Option<u32>,
    /// `--comm-from`: allreduce records measured on the box, and the file they came from.
    pub comm_from: Option<(Vec<CollRecord>, String)>,
    /// `--comm-from` of a file with a host record and no allreduce records: the host, the
    /// GPUs its server was given, and the file.
    pub comm_topology: Option<(HostEnv, Vec<u32>, String)>,
    /// A memory bandwidth measured on the GPU (collbench limits), GB/s, and what says so: it
    /// replaces the card's in every deployment's rates.
    pub measured_bw: Option<(f64, String)>,
}

/// A row's limits, per stream at its batch.
#[derive(Debug, Clone)]
pub struct Limits {
    pub layout: Layout,
    pub memory_tok_s: f64,
    pub step_tok_s: f64,
    pub step: StepCost,
    /// The deployment they were computed for (its communication source included).
    pub dep: Deployment,
    /// A speculative run: the limits are the verify step's cost over the tokens it emits.
    pub spec: Option<SpecTokens>,
}

impl Roofline {
    /// `MODEL@HARDWARE` (preset names or JSON card files).
    pub fn parse(spec: &str) -> Result<Roofline, String> {
        let (m, h) = spec.split_once('@').ok_or_else(|| {
            format!("'{spec}' is not MODEL@HARDWARE, e.g. llama-3.1-8b@h200 (or a card.json@h200)")
        })?;
        Roofline::of(m, h)
    }

    pub fn of(model: &str, hw: &str) -> Result<Roofline, String> {
        Ok(Roofline {
            model: presets::load_model(model.trim())?,
            hw: presets::load_hardware(hw.trim())?,
            tp: None,
            pp: None,
            comm_from: None,
            comm_topology: None,
            measured_bw: None,
        })
    }

    /// `--tp`/`--pp`: what fills in a layout the records do not say.
    pub fn with_layout(mut self, tp: Option<u32>, pp: Option<u32>) -> Roofline {
        self.tp = tp;
        self.pp = pp;
        self
    }

    /// `qwen3-32b on rtx-pro-6000`.
    pub fn describe(&self) -> String {
        format!("{} on {}", self.model.name, self.hw.name)
    }

    /// The layout of a point: its `tp`/`pp` labels, else `--tp`/`--pp`, else 1. A label that
    /// disagrees with its flag, or is not a number, is an error naming the point.
    pub fn layout_of(&self, p: &Point, keys: &Keys) -> Result<Layout, String> {
        let degree = |label: &str, flag: Option<u32>| -> Result<u32, String> {
            let name = || point_name(p, &keys.varying);
            match (Layout::degree(&p.labels, label), flag) {
                (None, flag) => Ok(flag.unwrap_or(1)),
                (Some(v), flag) => {
                    let n: u32 = v.map_err(|v| {
                        format!(
                            "point {} is labelled {label}={v}, not a degree: fix the label (loadgen --label {label}=N)",
                            name()
                        )
                    })?;
                    match flag {
                        Some(f) if f != n => Err(format!(
                            "--{label} {f} disagrees with the {label}={n} label of point {}: each row's layout comes from its records; drop --{label} (it only fills in records without the label) or fix the label",
                            name()
                        )),
                        _ => Ok(n),
                    }
                }
            }
        };
        Ok(Layout {
            tp: degree(label::TP, self.tp)?,
            pp: degree(label::PP, self.pp)?,
        })
    }

    /// Every point's layout, or the first conflict.
    pub fn check(&self, points: &[Point]) -> Result<(), String> {
        let keys = Keys::of(points);
        points
            .iter()
            .try_for_each(|p| self.layout_of(p, &keys).map(|_| ()))
    }

    /// The deployment of one layout: `--comm-from`'s curve when it has this TP degree.
    pub fn deployment(&self, layout: Layout) -> Deployment {
        let mut dep = Deployment::new(self.model.clone(), self.hw.clone(), layout);
        if let Some((gbps, source)) = &self.measured_bw {
            dep.rates.mem_bw_gbps = *gbps;
            dep.rates.source = source.clone();
        }
        if let Some((coll, from)) = &self.comm_from
            && let Some(curve) = MeasuredCurve::from_records(coll, layout.tp, true)
        {
            dep.comm = Comm::Measured {
                curve,
                from: from.clone(),
            };
        } else if let Some((host, gpus, from)) = &self.comm_topology
            && layout.tp > 1
        {
            // The server's own GPUs when they are this TP group's size, else the best group.
            let given: &[u32] = if gpus.len() == layout.tp as usize {
                gpus
            } else {
                &[]
            };
            if let Ok(group) = topo::tp_group(host, given, layout.tp) {
                let (ic, across) = topo::interconnect_for(&dep.hw.interconnect, host, &group);
                let list: Vec<String> = group.iter().map(u32::to_string).collect();
                let place = if across {
                    "across sockets"
                } else {
                    "one socket"
                };
                dep.hw.interconnect = ic;
                dep.comm = Comm::Topology {
                    from: format!("{from} (GPUs {}, {place})", list.join(",")),
                };
            }
        }
        dep
    }

    /// Layouts with fewer TP ranks (the same PP) whose weights fit the card's GPUs, largest
    /// first: the only ones advice may name (srv-sim refuses the others).
    pub fn fewer_tp_that_fit(&self, layout: Layout) -> Vec<Layout> {
        std::iter::successors(Some(layout.tp / 2), |tp| Some(tp / 2))
            .take_while(|tp| *tp >= 1)
            .map(|tp| Layout { tp, pp: layout.pp })
            .filter(|l| self.deployment(*l).weights_fit())
            .collect()
    }

    /// "fewer TP ranks (TP=4 fits) or a faster interconnect", or only the interconnect when no
    /// layout with fewer ranks holds the weights.
    pub fn fewer_ranks_advice(&self, layout: Layout) -> String {
        let fit = self.fewer_tp_that_fit(layout);
        match fit.first() {
            Some(l) => format!("fewer TP ranks (TP={} fits) or a faster interconnect", l.tp),
            None if layout.tp > 1 => {
                let half = Layout {
                    tp: layout.tp / 2,
                    pp: layout.pp,
                };
                format!(
                    "a faster interconnect (fewer TP ranks do not fit: {:.0} GB of weights per GPU at TP={}, {:.0} GB usable)",
                    self.deployment(half).weight_bytes_per_gpu() / 1e9,
                    half.tp,
                    self.deployment(half).usable_bytes_per_gpu() / 1e9
                )
            }
            None => "a faster interconnect".to_string(),
        }
    }

    /// Warnings on what the roofline is asked to judge: a layout whose weights do not fit (srv-sim
    /// refuses to start it, so no server runs it) and a model other than the records name.
    pub fn warnings(&self, points: &[Point]) -> Vec<String> {
        let keys = Keys::of(points);
        let mut layouts: Vec<Layout> = points
            .iter()
            .filter_map(|p| self.layout_of(p, &keys).ok())
            .collect();
        if points.is_empty() {
            layouts.push(Layout {
                tp: self.tp.unwrap_or(1),
                pp: self.pp.unwrap_or(1),
            });
        }
        layouts.sort_by_key(|l| (l.tp, l.pp));
        layouts.dedup();
        let mut out = Vec::new();
        for l in layouts {
            let dep = self.deployment(l);
            if !dep.weights_fit() {
                let why = dep.fit_problem(0).unwrap_or_default();
                out.push(format!(
                    "--roofline {}: TP={} PP={} does not fit, so srv-sim refuses it and no server runs it: {why}; its limits describe nothing real",
                    self.describe(),
                    l.tp,
                    l.pp
                ));
            }
        }
        let mut named: Vec<(&str, String)> = Vec::new();
        for p in points {
            if let Some(m) = crate::steps::records_model(p)
                && !same_model(m, &self.model.name)
                && !named.iter().any(|(n, _)| *n == m)
            {
                named.push((m, point_name(p, &keys.varying)));
            }
        }
        for (m, at) in named {
            out.push(format!(
                "--roofline model {} differs from the records' model label {m} (at {at}): the limits are another model's; give --roofline {m}@{} if there is such a card",
                self.model.name, self.hw.name
            ));
        }
        out
    }

    /// Mean context of a decode step at this point: the prompt plus half the output.
    fn context(p: &Point) -> u64 {
        u64::from(p.params.input_len.unwrap_or(0)) + u64::from(p.params.max_tokens.unwrap_or(0)) / 2
    }

    /// The point's limits per stream at its batch (its concurrency, else 1), in its layout
    /// (TP=1 PP=1 when its layout is in error: [`Roofline::check`] reports that first). With
    /// PP, the batch fills the stages as srv-sim's engine fills them (`Deployment::round_cost`).
    ///
    /// A speculative run (the server's acceptance figures, else more than 1.05 tokens per
    /// chunk) emits several tokens per verify step: its limits are the verify step's cost (its
    /// draft tokens pushed through the model beside each stream's own) over the tokens per step.
    pub fn limits(&self, p: &Point, keys: &Keys) -> Limits {
        let layout = self.layout_of(p, keys).unwrap_or_default();
        let dep = self.deployment(layout);
        let batch = p.params.concurrency.unwrap_or(1).max(1);
        let context = Self::context(p);
        let spec = spec_tokens(p);
        let (step, tokens) = match &spec {
            None => (dep.decode_round(batch, context), 1.0),
            Some(s) => {
                // Drafts the server said; else at least the accepted ones were verified.
                let drafts = s.draft_len.unwrap_or(s.per_step - 1.0).ceil().max(1.0) as u32;
                (dep.verify_round(batch, context, drafts), s.per_step)
            }
        };
        Limits {
            layout,
            memory_tok_s: tokens / step.memory_s,
            step_tok_s: tokens / (step.total_s() + DEFAULT_STEP_OVERHEAD_US * 1e-6),
            step,
            dep,
            spec,
        }
    }
}

impl Limits {
    /// `, speculative: 2.50 tokens per verify step (the server's mean accepted length)`, or
    /// nothing for a run of one token per step.
    pub fn spec_words(&self) -> String {
        self.spec.as_ref().map_or(String::new(), |s| {
            format!(
                ", speculative: {:.2} tokens per verify step ({})",
                s.per_step, s.from
            )
        })
    }
}

/// Whether a records' model label names the card: case aside, without the organisation
/// (`Qwen/Qwen3-32B`) and an `-instruct`/`-chat`/`-it` suffix.
pub fn same_model(label: &str, card: &str) -> bool {
    let norm = |s: &str| {
        let s = s.trim().to_ascii_lowercase();
        let s = s.rsplit('/').next().unwrap_or("").to_string();
        ["-instruct", "-chat", "-it"]
            .iter()
            .find_map(|suffix| s.strip_suffix(suffix).map(str::to_string))
            .unwrap_or(s)
    };
    norm(label) == norm(card)
}

/// A measured rate as a share of a limit: the share, clamped to 1 within the noise; None when
/// it is over the limit beyond the noise (impossible: not a share).
pub fn share(rate: f64, limit: f64) -> Option<f64> {
    let s = rate / limit;
    if s <= 1.0 {
        Some(s)
    } else if s <= 1.0 + OVER_LIMIT_NOISE {
        Some(1.0)
    } else {
        None
    }
}

fn share_cell(rate: Option<f64>, limit: f64) -> Cell {
    match rate {
        None => Cell::Empty,
        Some(r) => match share(r, limit) {
            Some(s) => Cell::pct(Some(100.0 * s)),
            None => Cell::Text("over".into()),
        },
    }
}

fn stream(p: &Point) -> Option<f64> {
    p.mean(Metric::Scalar(Scalar::StreamTokS))
}

/// Adds `tok/s/stream`, the memory-bound and modelled-step limits and the shares of each.
pub fn add_columns(table: &mut Table, points_in_order: &[&Point], keys: &Keys, roof: &Roofline) {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    table.columns.extend([
        col("stream_tok_s", "tok/s/stream"),
        col("mem_limit_tok_s", "mem limit"),
        col("mem_pct", "% of mem"),
        col("step_limit_tok_s", "step limit"),
        col("step_pct", "% of step"),
    ]);
    let mut layouts: Vec<Layout> = Vec::new();
    let mut comms: Vec<String> = Vec::new();
    let mut speculative: Vec<(String, &'static str)> = Vec::new();
    for (row, p) in table.rows.iter_mut().zip(points_in_order) {
        let rate = stream(p);
        let lim = roof.limits(p, keys);
        row.push(Cell::num(rate));
        row.push(Cell::num(Some(lim.memory_tok_s)));
        row.push(share_cell(rate, lim.memory_tok_s));
        row.push(Cell::num(Some(lim.step_tok_s)));
        row.push(share_cell(rate, lim.step_tok_s));
        if !layouts.contains(&lim.layout) {
            layouts.push(lim.layout);
        }
        let comm = lim.dep.comm.describe();
        if !comms.contains(&comm) {
            comms.push(comm);
        }
        if let Some(spec) = &lim.spec {
            speculative.push((point_name(p, &keys.varying), spec.from));
        }
    }
    let layouts: Vec<String> = layouts
        .iter()
        .map(|l| format!("TP={} PP={}", l.tp, l.pp))
        .collect();
    table.context.push((
        "roofline".into(),
        format!(
            "{} in {} (each row's tp/pp labels{}); step = max(memory, compute) + communication ({}) + {} ms overhead",
            roof.describe(),
            layouts.join(", "),
            match (roof.tp, roof.pp) {
                (None, None) => ", else 1".to_string(),
                (tp, pp) => format!(
                    ", else --tp {} --pp {}",
                    tp.unwrap_or(1),
                    pp.unwrap_or(1)
                ),
            },
            comms.join("; "),
            human(DEFAULT_STEP_OVERHEAD_US / 1000.0)
        ),
    ));
    if !speculative.is_empty() {
        let mut froms: Vec<&str> = speculative.iter().map(|(_, f)| *f).collect();
        froms.dedup();
        let rows: Vec<&str> = speculative.iter().map(|(n, _)| n.as_str()).collect();
        table.context.push((
            "speculative".into(),
            format!(
                "{}: limits are the verify step over the tokens it emits ({})",
                rows.join(", "),
                froms.join(", ")
            ),
        ));
    }
}

/// The notes on rows against their limits: rates above a limit (impossible), single streams
/// far below the memory-bound limit, expert parallelism the limits do not model.
pub fn notes(points: &[Point], roof: &Roofline) -> Vec<String> {
    let mut out = over_limit_note(points, roof);
    out.extend(single_stream_note(points, roof));
    let keys = Keys::of(points);
    let ep: Vec<String> = points
        .iter()
        .filter(|p| p.labels.get(label::EP).is_some_and(|e| e.trim() != "1"))
        .map(|p| point_name(p, &keys.varying))
        .collect();
    if !ep.is_empty() {
        out.push(format!(
            "expert parallelism at {}: the limits treat the experts as split like TP and do not model its all-to-all",
            ep.join(", ")
        ));
    }
    out
}

/// Rows whose measured rate is above a limit beyond the noise: not a share, a sign that
/// something fed to the comparison is wrong.
pub fn over_limit_note(points: &[Point], roof: &Roofline) -> Vec<String> {
    let keys = Keys::of(points);
    let mut out = Vec::new();
    for p in points {
        let Some(rate) = stream(p) else { continue };
        let lim = roof.limits(p, &keys);
        let (which, limit) = if share(rate, lim.memory_tok_s).is_none() {
            (
                "memory-bound limit (weights + KV over bandwidth)",
                lim.memory_tok_s,
            )
        } else if share(rate, lim.step_tok_s).is_none() {
            ("modelled step's limit", lim.step_tok_s)
        } else {
            continue;
        };
        out.push(format!(
            "{} decodes {} tok/s per stream, {:.2}x the {which} of {} tok/s for {}{}: impossible, so the card (bandwidth, interconnect), the layout (tp/pp labels, --tp/--pp) or the data is wrong",
            point_name(p, &keys.varying),
            human(rate),
            rate / limit,
            human(limit),
            lim.dep.describe(),
            lim.spec_words()
        ));
    }
    out
}

/// A single stream (concurrency 1) decoding far below its memory-bound limit, and how much of
/// the gap the modelled step (communication, overhead) explains.
pub fn single_stream_note(points: &[Point], roof: &Roofline) -> Vec<String> {
    let keys = Keys::of(points);
    let mut out = Vec::new();
    for p in points.iter().filter(|p| p.params.concurrency == Some(1)) {
        let Some(rate) = stream(p) else { continue };
        let lim = roof.limits(p, &keys);
        let mem_share = rate / lim.memory_tok_s;
        if mem_share >= SINGLE_STREAM_SHARE {
            continue;
        }
        let step_ms = 1000.0 / lim.step_tok_s;
        let measured_ms = 1000.0 / rate;
        let why = if step_ms >= STEP_EXPLAINS * measured_ms {
            format!(
                "the modelled step explains it ({} ms, of which communication {} ms): {}, not engine tuning",
                human(step_ms),
                human(lim.step.comm_s * 1e3),
                roof.fewer_ranks_advice(lim.layout)
            )
        } else {
            format!(
                "the modelled step ({} ms, communication {} ms) explains only {:.0}% of the {} ms measured: no concurrency tuning fixes that; look at the engine (CUDA graphs, kernels, host overhead, quantization)",
                human(step_ms),
                human(lim.step.comm_s * 1e3),
                100.0 * step_ms / measured_ms,
                human(measured_ms)
            )
        };
        out.push(format!(
            "single stream at {} decodes {} tok/s: {:.0}% of the memory-bound limit of {} tok/s (weights + KV over bandwidth) for {}{}; {why}",
            point_name(p, &keys.varying),
            human(rate),
            mem_share * 100.0,
            human(lim.memory_tok_s),
            lim.dep.describe(),
            lim.spec_words(),
        ));
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
        row.push(Cell::pct(Some(100.0 * c.busbw_gbps / level.busbw_gbps)));
    }
}

/// Without load points: the per-token allreduce time at batch 1 in the `--tp` layout, from the
/// `coll` records (or `--comm-from`'s). With points, each point's step is judged in `steps`.
pub fn decode_budget_without_points(coll: &[CollRecord], roof: &Roofline) -> Vec<String> {
    let coll = match &roof.comm_from {
        Some((from, _)) if coll.is_empty() => from.as_slice(),
        _ => coll,
    };
    let tp = roof.tp.unwrap_or(1);
    let model = &roof.model;
    let Some(curve) = MeasuredCurve::from_records(coll, tp, false).filter(|_| tp > 1) else {
        return Vec::new();
    };
    let bytes = model.allreduce_bytes(1);
    let ms = f64::from(model.allreduces_per_step()) * curve.us_at(bytes) / 1000.0;
    let mut caveats = format!("; allreduce as measured: {}", curve.describe());
    if curve.ranks != tp {
        caveats.push_str(&format!(
            " (measured over {} ranks, the model runs TP={tp})",
            curve.ranks
        ));
    }
    if let Some(tcp) = curve.tcp_caveat() {
        caveats.push_str(&format!("; {tcp}"));
    }
    vec![format!(
        "decode budget for {} at TP={tp}: 2 x {} layers x allreduce of {} = {} ms per decoded token at batch 1{caveats}",
        roof.describe(),
        model.layers,
        crate::steps::size(bytes),
        human(ms),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roofline_parses_presets_and_rejects_nonsense() {
        let r = Roofline::parse("llama-3.1-8b@h200").unwrap();
        assert_eq!(r.describe(), "llama-3.1-8b on h200");
        assert!(
            Roofline::parse("llama-3.1-8b")
                .unwrap_err()
                .contains("MODEL@HARDWARE")
        );
        assert!(Roofline::parse("nope@h200").is_err());
    }

    #[test]
    fn a_model_label_names_its_card_without_org_or_instruct_suffix() {
        assert!(same_model("Qwen/Qwen3-32B", "qwen3-32b"));
        assert!(same_model(
            "meta-llama/Llama-3.1-8B-Instruct",
            "llama-3.1-8b"
        ));
        assert!(!same_model("kimi-k2-nvfp4", "kimi-k2"));
        assert!(!same_model("llama-3.1-70b", "llama-3.1-8b"));
    }

    #[test]
    fn a_share_over_the_limit_is_not_a_share() {
        assert_eq!(share(50.0, 100.0), Some(0.5));
        assert_eq!(share(102.0, 100.0), Some(1.0));
        assert_eq!(share(110.0, 100.0), None);
    }
}
