//! How a point is judged against the hardware, with the shared presets and roofline
//! (`servbench::presets`, the same srv-sim uses).
//!
//! - Each row is judged in its own layout: the `tp` and `pp` labels its records carry (srv-launch
//!   puts them on the server record, loadgen carries them on), with `--tp`/`--pp` filling in only
//!   what the records do not say; a label that disagrees with the flag is an error.
//! - Two limits per row, for one stream at the row's batch (its concurrency): memory-bound
//!   (weights + KV per token over bandwidth) and the full modelled step (memory or compute,
//!   communication over the card's topology or `--comm-from`'s measured curve, and the fixed
//!   per-step overhead). The decode rate one stream sees (1000 / TPOT p50) is a share of each.
//! - A rate above a limit beyond 3% and its own 95% interval is not a share: the cell says
//!   `over` and a note says the card, the layout or the data is wrong.
//! - Each point's decode step, judged once against its parts: [`step`]; a speculative run's
//!   tokens per verify step: [`spec`]; a bandwidth measured on the GPU in place of the card's:
//!   [`measured`].
//!
//! The tables' roofline columns are in `tables`, the notes it prompts in `notes::roofline`.

pub mod measured;
pub mod spec;
pub mod step;

use crate::input::metrics::{Metric, Scalar};
use crate::input::points::{Keys, Point, point_name, records_model};
use crate::roofline::spec::{SpecTokens, spec_tokens};
use servbench::host::topo;
use servbench::presets::{
    self, Comm, DEFAULT_STEP_OVERHEAD_US, Deployment, Hardware, Layout, MeasuredCurve, ModelCard,
    StepCost,
};
use servbench::record::{CollRecord, HostEnv, label};

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
            if let Some(m) = records_model(p)
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

/// A row's rate as a share of a limit ([`share`]), its own noise counted: a rate whose 95%
/// interval reaches the limit is at it (100%), not over it. One stream's TPOT p50 over a few
/// requests moves by a whole verify step with its drafts' luck (EAGLE-3 at C=1 of 8 requests:
/// 4.88 or 5.69 ms), and a point of one or two waves knows its p50 only within them.
pub fn row_share(p: &Point, rate: f64, limit: f64) -> Option<f64> {
    let low = rate - p.noise(Metric::Scalar(Scalar::StreamTokS)).unwrap_or(0.0);
    share(rate, limit).or_else(|| share(low.max(0.0), limit).map(|_| 1.0))
}

/// The decode rate one stream sees: 1000 / TPOT p50.
pub fn stream(p: &Point) -> Option<f64> {
    p.mean(Metric::Scalar(Scalar::StreamTokS))
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
