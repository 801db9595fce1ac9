//! From accumulated records to sweep points: merges the measurements of one point taken on
//! several hosts (labels that name the host are dropped, histograms merged exactly), keeps
//! repeats apart (their figures become a mean and a 95% interval), and names each point by
//! what varies across the run.

use crate::input::Inputs;
use crate::input::metrics::Metric;
use crate::input::param::{Param, Params, fmt_rate};
use servbench::presets::Layout;
use servbench::record::{GpuStats, Labels, ServerStats, SummaryRecord, label};
use servbench::stats::{MeanCi, PointStats, Slo};
use std::collections::{BTreeMap, BTreeSet};

/// One sweep point: the same labels (less the merged ones) and parameters.
#[derive(Debug, Clone)]
pub struct Point {
    pub labels: Labels,
    pub params: Params,
    /// One summary per repeat, in repeat order, each computed by the shared statistics.
    pub repeats: Vec<SummaryRecord>,
    /// Cut short (a summary said so).
    pub partial: bool,
    /// The server went down during it (a summary said so): why.
    pub server_down: Option<String>,
    /// Measurements merged into each repeat (hosts), at most.
    pub merged_sources: usize,
    /// Built from `request` records (else from `summary` records).
    pub from_requests: bool,
    /// The model loadgen's summaries name (requests do not carry it).
    pub model: Option<String>,
}

impl Point {
    /// The metric over repeats: mean and 95% interval (a single value without repeats).
    pub fn figure(&self, m: Metric) -> Option<MeanCi> {
        let values: Vec<f64> = self.repeats.iter().filter_map(|s| m.value(s)).collect();
        if m.is_count() {
            // Counts add up over repeats; an interval of a count says nothing.
            let total: f64 = values.iter().sum();
            return (!values.is_empty()).then_some(MeanCi {
                n: 1,
                mean: total,
                stddev: 0.0,
                half_width: None,
            });
        }
        MeanCi::of(&values)
    }

    pub fn mean(&self, m: Metric) -> Option<f64> {
        self.figure(m).map(|f| f.mean)
    }

    /// Output tokens/s per GPU: over the GPUs loadgen sampled, else over the tp x pp of the
    /// point's labels (1 without them: srv-sim and hosts without nvidia-smi).
    pub fn tok_s_per_gpu(&self) -> Option<f64> {
        self.mean(Metric::TOK_S_PER_GPU).or_else(|| {
            let gpus = Layout::from_labels(&self.labels).gpus();
            Some(self.mean(Metric::TOK_S)? / f64::from(gpus))
        })
    }

    /// Dollars per million output tokens at `usd_per_gpu_hour` for each GPU the point's
    /// output was counted over ([`Point::tok_s_per_gpu`]).
    pub fn usd_per_mtok(&self, usd_per_gpu_hour: f64) -> Option<f64> {
        let per_gpu = self.tok_s_per_gpu().filter(|t| *t > 0.0)?;
        Some(usd_per_gpu_hour / 3600.0 / per_gpu * 1e6)
    }

    /// Half-width of the 95% interval of the metric: from repeats when there are several,
    /// else from the run's own spread (see [`Metric::single_run_noise`]).
    pub fn noise(&self, m: Metric) -> Option<f64> {
        match self.figure(m)? {
            MeanCi {
                half_width: Some(hw),
                ..
            } => Some(hw),
            _ => self.repeats.first().and_then(|s| m.single_run_noise(s)),
        }
    }

    /// How many independent samples this point's noise rests on, and what they are: its
    /// repeats when there are several, else its run's time blocks (batch means), else its
    /// waves (a point too short for blocks: the requests of one wave are one sample).
    pub fn samples(&self) -> (usize, SampleKind) {
        match self.repeats.as_slice() {
            [one] => match &one.noise {
                Some(n) => (n.blocks as usize, SampleKind::Blocks),
                None => (
                    crate::input::noise::independent_requests(one) as usize,
                    SampleKind::Waves,
                ),
            },
            many => (many.len(), SampleKind::Repeats),
        }
    }

    /// The param or label value under a key name (`conc`, `rate`, `in`, `out`, or a label).
    pub fn key_value(&self, key: &str) -> Option<String> {
        match Param::parse(key) {
            Some(param) => param.value(&self.params),
            None => self.labels.get(key).cloned(),
        }
    }

    pub fn errors(&self) -> u64 {
        self.repeats.iter().map(|s| s.errors).sum()
    }

    pub fn requests(&self) -> u64 {
        self.repeats.iter().map(|s| s.requests).sum()
    }

    /// Requests the client cancelled on purpose (`loadgen --cancel-rate`).
    pub fn cancelled(&self) -> u64 {
        self.repeats.iter().map(|s| s.cancelled).sum()
    }
}

/// What a point's independent samples are (see [`Point::samples`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SampleKind {
    Repeats,
    Blocks,
    Waves,
}

/// Builds points from inputs, dropping the `merge_labels` (e.g. `host`) so the same point
/// measured on several hosts becomes one. `slo` (or the SLO a summary recorded) gives goodput.
pub fn build(inputs: &Inputs, merge_labels: &[String], slo: Option<&Slo>) -> Vec<Point> {
    struct Slot {
        stats: PointStats,
        partial: bool,
        server_down: Option<String>,
        sources: usize,
        from_requests: bool,
        slo: Option<Slo>,
        model: Option<String>,
        /// The server's and GPUs' view loadgen recorded (the first host's, when several
        /// loaded the same server: they watched the same one).
        server: Option<ServerStats>,
        gpus: Vec<GpuStats>,
        /// The engine's steps loadgen read from its log (the first host's, likewise).
        engine_steps: Option<servbench::record::EngineSteps>,
        /// The load the first summary recorded (what the workload expected of the prefix
        /// cache, the seed of its prompts, the share it cancelled on purpose, ...).
        workload: servbench::record::Workload,
    }
    let mut grouped: BTreeMap<(Labels, Params), BTreeMap<u32, Slot>> = BTreeMap::new();
    for (key, acc) in &inputs.points {
        let Some(stats) = acc.stats() else { continue };
        let mut labels = key.labels.clone();
        for l in merge_labels {
            labels.remove(l);
        }
        let recorded_slo = acc
            .first_summary
            .as_ref()
            .and_then(|s| s.slo.as_deref())
            .and_then(|t| Slo::parse(t).ok());
        let slot_slo = slo.cloned().or(recorded_slo);
        let repeats = grouped.entry((labels, key.params)).or_default();
        match repeats.get_mut(&key.repeat) {
            Some(slot) => {
                slot.stats.merge(stats);
                slot.partial |= acc.partial;
                if slot.server_down.is_none() {
                    slot.server_down = acc.server_down.clone();
                }
                slot.sources += 1;
                slot.from_requests &= acc.from_requests.is_some();
            }
            None => {
                repeats.insert(
                    key.repeat,
                    Slot {
                        stats: stats.clone(),
                        partial: acc.partial,
                        server_down: acc.server_down.clone(),
                        sources: 1,
                        from_requests: acc.from_requests.is_some(),
                        slo: slot_slo,
                        model: acc.first_summary.as_ref().and_then(|s| s.model.clone()),
                        server: acc.first_summary.as_ref().and_then(|s| s.server.clone()),
                        gpus: acc
                            .first_summary
                            .as_ref()
                            .map(|s| s.gpus.clone())
                            .unwrap_or_default(),
                        engine_steps: acc
                            .first_summary
                            .as_ref()
                            .and_then(|s| s.engine_steps.clone()),
                        workload: acc
                            .first_summary
                            .as_ref()
                            .map(|s| s.workload.clone())
                            .unwrap_or_default(),
                    },
                );
            }
        }
    }
    let mut points: Vec<Point> = grouped
        .into_iter()
        .map(|((labels, params), repeats)| Point {
            partial: repeats.values().any(|s| s.partial),
            server_down: repeats.values().find_map(|s| s.server_down.clone()),
            merged_sources: repeats.values().map(|s| s.sources).max().unwrap_or(0),
            from_requests: repeats.values().all(|s| s.from_requests),
            model: repeats.values().find_map(|s| s.model.clone()),
            repeats: repeats
                .iter()
                .map(|(&rep, s)| {
                    let mut summary = s.stats.to_summary(
                        params.to_point(rep),
                        labels.clone(),
                        s.partial,
                        s.slo.as_ref(),
                    );
                    summary.server.clone_from(&s.server);
                    summary.gpus.clone_from(&s.gpus);
                    summary.engine_steps.clone_from(&s.engine_steps);
                    summary.workload.clone_from(&s.workload);
                    summary
                })
                .collect(),
            labels,
            params,
        })
        .collect();
    points.sort_by(|a, b| (&a.labels, a.params.sort_key()).cmp(&(&b.labels, b.params.sort_key())));
    points
}

/// The keys (labels and params) across a set of points: which vary and which are constant.
#[derive(Debug, Clone, Default)]
pub struct Keys {
    /// Keys with more than one value (or present on some points only), labels first.
    pub varying: Vec<String>,
    /// Keys with one value on every point, and that value.
    pub constant: Vec<(String, String)>,
}

impl Keys {
    pub fn of(points: &[Point]) -> Keys {
        let mut label_names = BTreeSet::new();
        for p in points {
            label_names.extend(p.labels.keys().cloned());
        }
        let mut keys = Keys::default();
        let names = label_names
            .into_iter()
            .chain(Param::ALL.iter().map(|p| p.key().to_string()));
        for name in names {
            let values: BTreeSet<Option<String>> =
                points.iter().map(|p| p.key_value(&name)).collect();
            if values.len() > 1 {
                keys.varying.push(name);
            } else if let Some(Some(v)) = values.into_iter().next() {
                keys.constant.push((name, v));
            }
        }
        keys
    }

    pub fn is_varying(&self, key: &str) -> bool {
        self.varying.iter().any(|k| k == key)
    }
}

/// A short name for a point in notes: its varying keys, `engine=vllm C=32 out=2048`.
pub fn point_name(p: &Point, varying: &[String]) -> String {
    let mut parts = Vec::new();
    for k in varying {
        if let Some(v) = p.key_value(k) {
            parts.push(match Param::parse(k) {
                Some(param) => param.name_part(&v),
                None => format!("{k}={v}"),
            });
        }
    }
    if parts.is_empty() {
        // Nothing varies: name it by its load.
        if let Some(c) = p.params.concurrency {
            parts.push(format!("C={c}"));
        } else if let Some(r) = p.params.rate_rps() {
            parts.push(format!("rate={}/s", fmt_rate(r)));
        } else {
            parts.push("the point".to_string());
        }
    }
    parts.join(" ")
}

/// The model a point's records name: its `model` label, else the one loadgen's summary names.
pub fn records_model(p: &Point) -> Option<&str> {
    p.labels
        .get(label::MODEL)
        .map(String::as_str)
        .or(p.model.as_deref())
}
