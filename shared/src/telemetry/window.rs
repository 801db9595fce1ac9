//! One point's window over the server's scrapes and the GPUs' samples: counters differenced
//! between the point's first and last scrape, gauges averaged over the samples taken while it
//! ran, histogram buckets differenced and read as percentiles.

use super::prom::{Buckets, Reading};
use super::vocab::{Engine, Figure};
use crate::exec::gpu::GpuReading;
use crate::record::{BucketDist, GaugeStats, GpuStats, ServerStats, SpecStats};
use std::collections::BTreeMap;

/// Running sum, largest value and count of a gauge's samples.
#[derive(Debug, Clone, Copy, Default)]
struct Acc {
    sum: f64,
    max: f64,
    n: u64,
}

impl Acc {
    fn add(&mut self, v: f64) {
        if self.n == 0 || v > self.max {
            self.max = v;
        }
        self.sum += v;
        self.n += 1;
    }

    fn stats(&self) -> Option<GaugeStats> {
        (self.n > 0).then(|| GaugeStats {
            mean: self.sum / self.n as f64,
            max: self.max,
        })
    }
}

/// The scrapes of one point, for one engine's names.
#[derive(Debug, Clone)]
pub struct Window {
    engine: Engine,
    start: Reading,
    last: Option<Reading>,
    gauges: BTreeMap<Figure, Acc>,
    gauge_samples: u64,
    scrapes: u64,
}

impl Window {
    /// Opens the window with the point's first scrape.
    pub fn start(engine: Engine, first: Reading) -> Window {
        Window {
            engine,
            start: first,
            last: None,
            gauges: BTreeMap::new(),
            gauge_samples: 0,
            scrapes: 1,
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// A figure's value in the point's first scrape.
    pub fn start_value(&self, f: Figure) -> Option<f64> {
        self.start.get(f)
    }

    /// A scrape taken while the point ran: its gauges count.
    pub fn sample(&mut self, r: Reading) {
        self.scrapes += 1;
        self.gauge_samples += 1;
        for (&f, &v) in &r.scalars {
            // SGLang's speculative gauges read 0 until their first window of steps is done.
            let unset = matches!(f, Figure::SpecAcceptLength | Figure::SpecAcceptRate) && v == 0.0;
            if is_gauge(f) && !unset {
                self.gauges.entry(f).or_default().add(v);
            }
        }
        self.last = Some(r);
    }

    /// Closes the window with the point's last scrape (`None` when it failed: the last sample
    /// taken stands in, and without one there are no counters).
    pub fn finish(mut self, last: Option<Reading>) -> ServerStats {
        let end = match last {
            Some(r) => {
                self.scrapes += 1;
                Some(r)
            }
            None => self.last.take(),
        };
        let mut s = ServerStats {
            engine: self.engine.name().to_string(),
            scrapes: self.scrapes,
            gauge_samples: self.gauge_samples,
            running: self.gauge(Figure::Running),
            waiting: self.gauge(Figure::Waiting),
            kv_usage: self.gauge(Figure::KvUsage),
            ..ServerStats::default()
        };
        let Some(end) = end else { return s };
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
        let count = |v: Option<f64>| v.map(|v| v.round().max(0.0) as u64);
        s.preemptions = count(delta(Figure::Preemptions));
        s.prompt_tokens = count(delta(Figure::PromptTokens));
        s.generation_tokens = count(delta(Figure::GenerationTokens));
        s.requests = count(delta(Figure::Requests));
        s.aborted = count(delta(Figure::Aborted));
        if let (Some(q), Some(h)) = (delta(Figure::PrefixQueries), delta(Figure::PrefixHits)) {
            s.prefix_queried_tokens = count(Some(q));
            s.prefix_hit_rate = (q > 0.0).then(|| (h / q).clamp(0.0, 1.0));
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
        ] {
            if let Some(e) = end.hists.get(&fig) {
                let b = self.start.hists.get(&fig);
                *slot = bucket_dist(e, b, &mut reset);
            }
        }
        s.counter_reset = reset;
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
/// from its windowed gauges (SGLang, TensorRT-LLM's acceptance length).
fn spec(c: SpecCounters, per_pos: &[f64], gauges: &BTreeMap<Figure, Acc>) -> Option<SpecStats> {
    if let (Some(drafts), Some(tokens), Some(accepted)) = (c.drafts, c.draft_tokens, c.accepted) {
        if drafts <= 0.0 || tokens <= 0.0 {
            return None;
        }
        let k = tokens / drafts;
        let mut st = SpecStats {
            draft_acceptance: accepted / tokens,
            mean_accepted_len: 1.0 + accepted / drafts,
            draft_len: k,
            drafts: Some(drafts.round() as u64),
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
            st.acceptance_rate = if tries > 0.0 { acc / tries } else { 0.0 };
        } else {
            st.acceptance_rate = solve_alpha(k, accepted / drafts);
        }
        return Some(st);
    }
    let length = gauges
        .get(&Figure::SpecAcceptLength)
        .and_then(Acc::stats)?
        .mean;
    let rate = match gauges.get(&Figure::SpecAcceptRate).and_then(Acc::stats) {
        Some(r) => r.mean,
        None => {
            let tokens = c.draft_tokens.filter(|&t| t > 0.0)?;
            c.accepted? / tokens
        }
    };
    if length <= 1.0 || rate <= 0.0 {
        return Some(SpecStats {
            mean_accepted_len: length.max(1.0),
            from: "gauges".into(),
            ..SpecStats::default()
        });
    }
    // Draft tokens per step: (length - 1) accepted per step over `rate` of them accepted.
    let k = ((length - 1.0) / rate).round().max(1.0);
    Some(SpecStats {
        acceptance_rate: solve_alpha(k, length - 1.0),
        draft_acceptance: rate,
        mean_accepted_len: length,
        draft_len: k,
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
    Some(BucketDist {
        n: n.round() as u64,
        mean: sum / n * 1000.0,
        p50: q(0.50),
        p90: q(0.90),
        p99: q(0.99),
    })
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

/// The GPUs' samples over one point.
#[derive(Debug, Clone, Default)]
pub struct GpuWindow {
    gpus: BTreeMap<u32, (Option<String>, u64, [Acc; 7])>,
}

impl GpuWindow {
    pub fn add(&mut self, readings: &[GpuReading]) {
        for g in readings {
            let e = self.gpus.entry(g.index).or_default();
            if e.0.is_none() {
                e.0.clone_from(&g.name);
            }
            e.1 += 1;
            let fields = [
                g.util_pct,
                g.mem_used_mib,
                g.power_w,
                g.sm_clock_mhz,
                g.temp_c,
                g.pcie_rx_bytes_s,
                g.pcie_tx_bytes_s,
            ];
            for (acc, v) in e.2.iter_mut().zip(fields) {
                if let Some(v) = v {
                    acc.add(v);
                }
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.gpus.is_empty()
    }

    pub fn finish(self) -> Vec<GpuStats> {
        self.gpus
            .into_iter()
            .map(|(index, (name, samples, a))| GpuStats {
                index,
                name,
                samples,
                util_pct: a[0].stats(),
                mem_used_mib: a[1].stats(),
                power_w: a[2].stats(),
                sm_clock_mhz: a[3].stats(),
                temp_c: a[4].stats(),
                pcie_rx_bytes_s: a[5].stats(),
                pcie_tx_bytes_s: a[6].stats(),
            })
            .collect()
    }
}
