//! One point's window over the server's scrapes and the GPUs' samples: counters differenced
//! between the point's first and last scrape, gauges averaged over the samples taken while it
//! ran, histogram buckets differenced and read as percentiles.

use super::prom::{Buckets, Left, Reading};
use super::vocab::{Engine, Figure};
use crate::exec::gpu::{CounterRow, GpuReading};
use crate::record::{BucketDist, GaugeStats, GpuStats, ServerStats, SpecStats};
use std::collections::BTreeMap;

/// Running mean, largest value and count of a gauge's samples. The mean is updated in place
/// (never a sum that finite samples can overflow), and only finite samples count.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    mean: f64,
    max: f64,
    n: u64,
}

impl Acc {
    fn add(&mut self, v: f64) {
        if !v.is_finite() {
            return;
        }
        if self.n == 0 || v > self.max {
            self.max = v;
        }
        self.n += 1;
        self.mean += (v - self.mean) / self.n as f64;
    }

    fn stats(&self) -> Option<GaugeStats> {
        (self.n > 0 && self.mean.is_finite()).then_some(GaugeStats {
            mean: self.mean,
            max: self.max,
        })
    }
}

/// Notes gathered over a point's readings: `what: why` with samples and a first value.
fn merge_notes(into: &mut BTreeMap<String, Left>, from: &BTreeMap<String, Left>) {
    for (k, l) in from {
        let e = into.entry(k.clone()).or_default();
        if e.count == 0 {
            e.example = l.example;
        }
        e.count += l.count;
    }
}

fn note_lines(notes: BTreeMap<String, Left>) -> Vec<String> {
    notes
        .into_iter()
        .map(|(k, l)| {
            let samples = if l.count == 1 { "sample" } else { "samples" };
            let v = l.example;
            let first = if v.is_nan() {
                String::new()
            } else if v.is_finite() && v != 0.0 && !(1e-3..1e6).contains(&v.abs()) {
                format!(", first {v:e}")
            } else {
                format!(", first {v}")
            };
            format!("{k} ({} {samples}{first}): left out", l.count)
        })
        .collect()
}

/// Counters past this are not counts of anything a point did (2^53: every integer below it
/// is exact in an f64).
const MAX_COUNT: f64 = 9_007_199_254_740_992.0;

/// The scrapes of one point, for one engine's names.
#[derive(Debug, Clone)]
pub struct Window {
    engine: Engine,
    start: Reading,
    last: Option<Reading>,
    gauges: BTreeMap<Figure, Acc>,
    gauge_samples: u64,
    scrapes: u64,
    notes: BTreeMap<String, Left>,
    incomplete: bool,
}

impl Window {
    /// Opens the window with the point's first scrape (its gauges are the first sample).
    pub fn start(engine: Engine, first: Reading) -> Window {
        let mut w = Window {
            engine,
            start: Reading::default(),
            last: None,
            gauges: BTreeMap::new(),
            gauge_samples: 0,
            scrapes: 1,
            notes: BTreeMap::new(),
            incomplete: false,
        };
        w.take_gauges(&first);
        w.start = first;
        w
    }

    /// The server stopped answering during the point: what the window holds covers the point
    /// up to its last answered scrape.
    pub fn cut_short(&mut self) {
        self.incomplete = true;
    }

    pub fn engine(&self) -> Engine {
        self.engine.clone()
    }

    /// A figure's value in the point's first scrape.
    pub fn start_value(&self, f: Figure) -> Option<f64> {
        self.start.get(f)
    }

    /// A scrape taken while the point ran: its gauges count.
    pub fn sample(&mut self, r: Reading) {
        self.scrapes += 1;
        self.take_gauges(&r);
        self.last = Some(r);
    }

    fn take_gauges(&mut self, r: &Reading) {
        self.gauge_samples += 1;
        merge_notes(&mut self.notes, &r.notes);
        for (&f, &v) in &r.scalars {
            // SGLang's speculative gauges read 0 until their first window of steps is done.
            let unset = matches!(f, Figure::SpecAcceptLength | Figure::SpecAcceptRate) && v == 0.0;
            if is_gauge(f) && !unset {
                self.gauges.entry(f).or_default().add(v);
            }
        }
    }

    /// Closes the window with the point's last scrape (`None` when it failed: the last sample
    /// taken stands in, and without one there are no counters).
    pub fn finish(mut self, last: Option<Reading>) -> ServerStats {
        let end = match last {
            Some(r) => {
                self.scrapes += 1;
                self.take_gauges(&r);
                Some(r)
            }
            None => {
                self.incomplete = true;
                self.last.take()
            }
        };
        let mut s = ServerStats {
            engine: self.engine.clone(),
            scrapes: self.scrapes,
            gauge_samples: self.gauge_samples,
            running: self.gauge(Figure::Running),
            waiting: self.gauge(Figure::Waiting),
            kv_usage: self.gauge(Figure::KvUsage),
            incomplete: self.incomplete,
            ..ServerStats::default()
        };
        let mut notes = std::mem::take(&mut self.notes);
        let Some(end) = end else {
            s.notes = note_lines(notes);
            return s;
        };
        let mut reset = false;
        let mut delta = |f: Figure| -> Option<f64> {
            let e = end.get(f)?;
            let b = self.start.get(f).unwrap_or(0.0);
            if e < b {
                reset = true;
                return Some(e);
            }
            Some(e - b)
        };
        let mut implausible = Left::default();
        let mut count = |v: Option<f64>| {
            let v = v?;
            if v > MAX_COUNT {
                implausible.add(v);
                return None;
            }
            Some(v.round().max(0.0) as u64)
        };
        s.preemptions = count(delta(Figure::Preemptions));
        s.prompt_tokens = count(delta(Figure::PromptTokens));
        s.generation_tokens = count(delta(Figure::GenerationTokens));
        s.requests = count(delta(Figure::Requests));
        s.aborted = count(delta(Figure::Aborted));
        s.est_flops_per_gpu = delta(Figure::EstFlops);
        s.est_read_bytes_per_gpu = delta(Figure::EstReadBytes);
        s.est_write_bytes_per_gpu = delta(Figure::EstWriteBytes);
        if let (Some(q), Some(h)) = (delta(Figure::PrefixQueries), delta(Figure::PrefixHits)) {
            s.prefix_queried_tokens = count(Some(q));
            if h > q + 0.5 {
                let e = notes
                    .entry(format!(
                        "prefix-cache hits above the tokens looked up ({h} of {q} over the point)"
                    ))
                    .or_default();
                e.add(h);
            } else if q > 0.0 {
                s.prefix_hit_rate = Some((h / q).min(1.0));
            }
        }
        if implausible.count > 0 {
            let e = notes
                .entry("a counter's delta above 2^53, not a count".into())
                .or_default();
            e.count += implausible.count;
            e.example = implausible.example;
        }
        let counters = SpecCounters {
            drafts: delta(Figure::SpecDrafts),
            draft_tokens: delta(Figure::SpecDraftTokens),
            accepted: delta(Figure::SpecAccepted),
        };
        let per_pos = per_position_delta(&self.start, &end, &mut reset);
        s.spec = spec(counters, &per_pos, &self.gauges);
        for (fig, slot) in [
            (Figure::TtftSeconds, &mut s.ttft_ms),
            (Figure::ItlSeconds, &mut s.itl_ms),
            (Figure::E2eSeconds, &mut s.e2e_ms),
            (Figure::TpotSeconds, &mut s.tpot_ms),
        ] {
            if let Some(e) = end.hists.get(&fig) {
                let b = self.start.hists.get(&fig);
                *slot = bucket_dist(e, b, &mut reset);
            }
        }
        s.counter_reset = reset;
        s.notes = note_lines(notes);
        s
    }

    fn gauge(&self, f: Figure) -> Option<GaugeStats> {
        self.gauges.get(&f).and_then(Acc::stats)
    }
}

fn is_gauge(f: Figure) -> bool {
    matches!(
        f,
        Figure::Running
            | Figure::Waiting
            | Figure::KvUsage
            | Figure::SpecAcceptLength
            | Figure::SpecAcceptRate
    )
}

fn per_position_delta(start: &Reading, end: &Reading, reset: &mut bool) -> Vec<f64> {
    let Some(e) = end.by_label.get(&Figure::SpecAcceptedPerPos) else {
        return Vec::new();
    };
    let s = start.by_label.get(&Figure::SpecAcceptedPerPos);
    let k = e.keys().next_back().map_or(0, |&k| k as usize + 1);
    let mut out = vec![0.0; k];
    for (&pos, &v) in e {
        let b = s.and_then(|s| s.get(&pos)).copied().unwrap_or(0.0);
        out[pos as usize] = if v < b {
            *reset = true;
            v
        } else {
            v - b
        };
    }
    out
}

#[derive(Debug, Clone, Copy)]
struct SpecCounters {
    drafts: Option<f64>,
    draft_tokens: Option<f64>,
    accepted: Option<f64>,
}

/// Speculative decoding over the point, from counters where the engine has them (vLLM), else
/// from its windowed gauges (SGLang, TensorRT-LLM's acceptance length), else from counters of
/// draft and accepted tokens alone (llama.cpp, TensorRT-LLM without its gauge): the engines'
/// acceptance then, and no length. A figure that is not finite is left out.
fn spec(c: SpecCounters, per_pos: &[f64], gauges: &BTreeMap<Figure, Acc>) -> Option<SpecStats> {
    let finite = |v: f64| Some(v).filter(|v| v.is_finite());
    if let (Some(drafts), Some(tokens), Some(accepted)) = (c.drafts, c.draft_tokens, c.accepted) {
        if drafts <= 0.0 || tokens <= 0.0 {
            return None;
        }
        let k = tokens / drafts;
        let mut st = SpecStats {
            draft_acceptance: finite(accepted / tokens),
            mean_accepted_len: finite(1.0 + accepted / drafts),
            draft_len: finite(k),
            drafts: (drafts <= MAX_COUNT).then(|| drafts.round() as u64),
            from: "counters".into(),
            ..SpecStats::default()
        };
        if !per_pos.is_empty() {
            // Position i is tried when every position before it was accepted.
            let mut tried = drafts;
            let (mut acc, mut tries) = (0.0, 0.0);
            for &a in per_pos {
                st.per_position
                    .push(if tried > 0.0 { a / tried } else { 0.0 });
                acc += a;
                tries += tried;
                tried = a;
            }
            st.chain_alpha = finite(if tries > 0.0 { acc / tries } else { 0.0 });
            if st.per_position.iter().any(|p| !p.is_finite()) {
                st.per_position.clear();
            }
        } else if k.is_finite() && k <= 64.0 {
            st.chain_alpha = Some(solve_alpha(k, accepted / drafts));
        }
        return Some(st);
    }
    let counted_rate = || {
        let tokens = c.draft_tokens.filter(|&t| t > 0.0)?;
        finite(c.accepted? / tokens)
    };
    let Some(length) = gauges
        .get(&Figure::SpecAcceptLength)
        .and_then(Acc::stats)
        .map(|g| g.mean)
    else {
        return counted_rate().map(|rate| SpecStats {
            draft_acceptance: Some(rate),
            from: "counters".into(),
            ..SpecStats::default()
        });
    };
    let rate = match gauges.get(&Figure::SpecAcceptRate).and_then(Acc::stats) {
        Some(r) => Some(r.mean),
        None => counted_rate(),
    };
    let Some(rate) = rate.filter(|&r| r > 0.0 && length > 1.0) else {
        return Some(SpecStats {
            mean_accepted_len: Some(length.max(1.0)),
            draft_acceptance: rate,
            from: "gauges".into(),
            ..SpecStats::default()
        });
    };
    // Draft tokens per step: (length - 1) accepted per step over `rate` of them accepted.
    let k = ((length - 1.0) / rate).round().clamp(1.0, 64.0);
    Some(SpecStats {
        chain_alpha: Some(solve_alpha(k, length - 1.0)),
        draft_acceptance: Some(rate),
        mean_accepted_len: Some(length),
        draft_len: Some(k),
        from: "gauges".into(),
        ..SpecStats::default()
    })
}

/// The α with α + α² + … + α^k = `accepted` (accepted draft tokens per step, k draft tokens):
/// the per-token acceptance when each token is accepted with the same chance until the first
/// rejection. Bisection: the sum grows with α.
pub fn solve_alpha(k: f64, accepted: f64) -> f64 {
    let k = k.round().max(1.0) as i32;
    if accepted <= 0.0 {
        return 0.0;
    }
    if accepted >= f64::from(k) {
        return 1.0;
    }
    let sum = |a: f64| (1..=k).map(|i| a.powi(i)).sum::<f64>();
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if sum(mid) < accepted {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo + hi) / 2.0
}

/// A histogram's bucket deltas over the point as a distribution in milliseconds.
fn bucket_dist(end: &Buckets, start: Option<&Buckets>, reset: &mut bool) -> Option<BucketDist> {
    let before = |le: f64| {
        start
            .and_then(|s| s.cumulative.iter().find(|(b, _)| *b == le))
            .map_or(0.0, |(_, c)| *c)
    };
    let mut went_down = false;
    let mut cum: Vec<(f64, f64)> = end
        .cumulative
        .iter()
        .map(|&(le, c)| {
            let d = c - before(le);
            if d < 0.0 {
                went_down = true;
            }
            (le, d)
        })
        .collect();
    let (mut count, mut sum) = (
        end.count - start.map_or(0.0, |s| s.count),
        end.sum - start.map_or(0.0, |s| s.sum),
    );
    if went_down || count < 0.0 {
        *reset = true;
        cum = end.cumulative.clone();
        count = end.count;
        sum = end.sum;
    }
    let n = cum.last().map_or(count, |&(_, c)| c).max(count);
    if n <= 0.0 {
        return None;
    }
    let q = |p: f64| quantile(&cum, p * n) * 1000.0;
    let d = BucketDist {
        n: n.round() as u64,
        mean: sum / n * 1000.0,
        p50: q(0.50),
        p90: q(0.90),
        p99: q(0.99),
    };
    let finite = [d.mean, d.p50, d.p90, d.p99].iter().all(|v| v.is_finite());
    (finite && n <= MAX_COUNT).then_some(d)
}

/// The value below which `rank` observations fall, interpolated linearly inside its bucket (the
/// first bucket starts at 0); in the `+Inf` bucket, the largest finite bound.
fn quantile(cum: &[(f64, f64)], rank: f64) -> f64 {
    let mut prev = (0.0, 0.0);
    for &(le, c) in cum {
        if c >= rank {
            if le.is_infinite() {
                return prev.0;
            }
            let width = c - prev.1;
            let frac = if width > 0.0 {
                (rank - prev.1) / width
            } else {
                1.0
            };
            return prev.0 + (le - prev.0) * frac.clamp(0.0, 1.0);
        }
        prev = (le, c);
    }
    prev.0
}

/// The most each GPU field can be (util in %, memory in MiB, W, MHz, °C, bytes/s): a reading
/// past it, or below 0, is no reading.
const GPU_FIELD_MAX: [(&str, f64); 7] = [
    ("util_pct", 100.0),
    ("mem_used_mib", 1_073_741_824.0),
    ("power_w", 100_000.0),
    ("sm_clock_mhz", 100_000.0),
    ("temp_c", 1_000.0),
    ("pcie_rx_bytes_s", 1e13),
    ("pcie_tx_bytes_s", 1e13),
];

/// One GPU (or MIG instance) over a point.
#[derive(Debug, Clone, Default)]
struct GpuAcc {
    name: Option<String>,
    samples: u64,
    fields: [Acc; 7],
    /// Each clocks-event reason's samples active.
    reasons: BTreeMap<String, u64>,
    energy: super::energy::CounterTrack,
    notes: BTreeMap<String, Left>,
}

/// The GPUs' samples over one point, each GPU (or MIG instance) apart.
#[derive(Debug, Clone, Default)]
pub struct GpuWindow {
    gpus: BTreeMap<(u32, Option<u32>), GpuAcc>,
}

impl GpuWindow {
    /// One sample of the GPUs. A GPU listed twice in one sample counts once (the first), and
    /// a field outside its range is left out; both are noted on that GPU.
    pub fn add(&mut self, readings: &[GpuReading]) {
        let mut seen = std::collections::BTreeSet::new();
        for g in readings {
            let key = (g.index, g.mig_instance);
            let e = self.gpus.entry(key).or_default();
            if !seen.insert(key) {
                e.notes
                    .entry("listed twice in one sample, the later line".into())
                    .or_default()
                    .add(f64::NAN);
                continue;
            }
            if e.name.is_none() {
                e.name.clone_from(&g.name);
            }
            e.samples += 1;
            let fields = [
                g.util_pct,
                g.mem_used_mib,
                g.power_w,
                g.sm_clock_mhz,
                g.temp_c,
                g.pcie_rx_bytes_s,
                g.pcie_tx_bytes_s,
            ];
            // A DCGM exporter gives the counter with every scrape; NVML's comes apart
            // ([`GpuWindow::add_counters`]).
            if g.energy_mj.is_some() {
                e.energy.add(g.energy_mj, std::time::Instant::now());
            }
            for reason in g
                .clocks_event_reasons
                .map(crate::host::smi::reason_names)
                .unwrap_or_default()
            {
                *e.reasons.entry(reason).or_default() += 1;
            }
            for ((acc, v), (name, max)) in e.fields.iter_mut().zip(fields).zip(GPU_FIELD_MAX) {
                let Some(v) = v else { continue };
                if v.is_finite() && (0.0..=max).contains(&v) {
                    acc.add(v);
                } else {
                    e.notes
                        .entry(format!("{name} outside 0 to {max}"))
                        .or_default()
                        .add(v);
                }
            }
        }
    }

    /// One read of the GPUs' energy counters (NVML's, at the point's start and end), taken
    /// at `at`.
    pub fn add_counters(&mut self, rows: &[CounterRow], at: std::time::Instant) {
        let mut seen = std::collections::BTreeSet::new();
        for (index, mj) in rows {
            if seen.insert(*index) {
                self.gpus
                    .entry((*index, None))
                    .or_default()
                    .energy
                    .add(*mj, at);
            }
        }
    }

    /// Why a GPU whose counter was read has no energy from it, one line per GPU ("GPU 0: its
    /// energy counter went backwards ..."): its energy is the sampled power's instead.
    pub fn energy_fallbacks(&self) -> Vec<String> {
        self.gpus
            .iter()
            .filter_map(|((index, mig), g)| {
                let power = g.fields[2].stats().map(|p| p.mean);
                let why = g.energy.energy_j(power).err()??;
                Some(match mig {
                    Some(m) => format!("GPU {index} (MIG {m}): {why}"),
                    None => format!("GPU {index}: {why}"),
                })
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    pub fn finish(self) -> Vec<GpuStats> {
        self.gpus
            .into_iter()
            .map(|((index, mig_instance), g)| {
                let power_w = g.fields[2].stats();
                let (energy_j, energy_source) = g.energy.verdict(power_w.map(|p| p.mean));
                GpuStats {
                    index,
                    mig_instance,
                    name: g.name,
                    samples: g.samples,
                    util_pct: g.fields[0].stats(),
                    mem_used_mib: g.fields[1].stats(),
                    power_w,
                    sm_clock_mhz: g.fields[3].stats(),
                    temp_c: g.fields[4].stats(),
                    pcie_rx_bytes_s: g.fields[5].stats(),
                    pcie_tx_bytes_s: g.fields[6].stats(),
                    clocks_event_reasons: g.reasons,
                    energy_j,
                    energy_source,
                    notes: note_lines(g.notes),
                }
            })
            .collect()
    }
}
