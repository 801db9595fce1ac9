//! Prometheus text exposition (format 0.0.4) parsed with the `prom_text_format_parser` crate
//! (it keeps `vllm:`-style names, which the regex-based `prometheus-parse` drops), then read
//! into our figures for one engine ([`Reading`]). Only the families servbench reads are
//! parsed, every value is checked finite, and a series repeated in one scrape is kept once:
//! what is dropped is counted and said ([`Reading::notes`]).

use super::vocab::{self, Engine, Figure, GpuFigure, Read, Source};
use crate::exec::gpu::GpuReading;
use prom_text_format_parser::{Type, ValueType, parse_scrape};
use std::collections::{BTreeMap, HashSet};

/// Which line of a family a sample is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Part {
    Value,
    /// A histogram bucket with its upper bound (`le`).
    Bucket(f64),
    Sum,
    Count,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub part: Part,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Samples of one family left out of a scrape: how many, and the first one's value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Left {
    pub count: u64,
    pub example: f64,
}

impl Left {
    pub fn add(&mut self, v: f64) {
        if self.count == 0 {
            self.example = v;
        }
        self.count += 1;
    }
}

/// One scrape: every family servbench reads, by name.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Vec<Sample>>,
    /// Families the parser could not assemble (kept out, counted).
    pub broken: usize,
    /// Per family: samples whose value is NaN or infinite, and samples repeating a series
    /// (the same labels) already read in this scrape; Prometheus refuses both.
    pub non_finite: BTreeMap<String, Left>,
    pub duplicates: BTreeMap<String, Left>,
}

/// What makes a sample one series of its family: its part (value, bucket, sum, count), a
/// bucket's bound, and its labels.
type SeriesKey = (u8, u64, Vec<(String, String)>);

/// Parses a scrape. A family the parser cannot assemble is left out (and counted); text that
/// is not the exposition format at all (JSON, HTML) is an error, in words.
pub fn parse(text: &str) -> Result<Exposition, String> {
    if let Some(c) = text.trim_start().chars().next()
        && matches!(c, '{' | '[' | '<')
    {
        return Err(format!(
            "not Prometheus text: it begins with `{c}` (JSON or HTML)"
        ));
    }
    let text = known_lines(text);
    if text.is_empty() {
        return Ok(Exposition::default());
    }
    let (metrics, error) = parse_scrape(&text);
    let broken = match error {
        None => 0,
        Some(prom_text_format_parser::ScrapeParseError::Collect(e)) => e.len(),
        Some(prom_text_format_parser::ScrapeParseError::Parse(e)) => {
            let first = e.lines().next().unwrap_or("").to_string();
            return Err(format!("not Prometheus text: {first}"));
        }
    };
    let mut x = Exposition {
        broken,
        ..Exposition::default()
    };
    for m in metrics {
        let mut seen: HashSet<SeriesKey> = HashSet::new();
        let samples = x.families.entry(m.name.clone()).or_default();
        for s in m.samples {
            let Ok(value) = s.value.value.parse::<f64>() else {
                continue;
            };
            let labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|l| (l.key.clone(), unescape(&l.value)))
                .collect();
            let part = match (m.kind, s.value.value_type) {
                (_, ValueType::Sum) => Part::Sum,
                (_, ValueType::Count) => Part::Count,
                (Type::Histogram, ValueType::Sample) => {
                    match labels.iter().find(|(k, _)| k == "le") {
                        Some((_, le)) => match le.parse::<f64>() {
                            Ok(le) if !le.is_nan() => Part::Bucket(le),
                            _ => continue,
                        },
                        None => continue,
                    }
                }
                _ => Part::Value,
            };
            let mut labels: Vec<(String, String)> =
                labels.into_iter().filter(|(k, _)| k != "le").collect();
            labels.sort();
            let key = match part {
                Part::Value => (0, 0, labels.clone()),
                Part::Bucket(le) => (1, le.to_bits(), labels.clone()),
                Part::Sum => (2, 0, labels.clone()),
                Part::Count => (3, 0, labels.clone()),
            };
            // A repeat is left out whatever its value; the first is then checked finite.
            if !seen.insert(key) {
                x.duplicates.entry(m.name.clone()).or_default().add(value);
                continue;
            }
            if !value.is_finite() {
                x.non_finite.entry(m.name.clone()).or_default().add(value);
                continue;
            }
            samples.push(Sample {
                part,
                labels,
                value,
            });
        }
    }
    Ok(x)
}

/// The lines of the families servbench reads (samples, `# HELP` and `# TYPE`): a page full
/// of other families costs neither the parser's memory nor its time.
fn known_lines(text: &str) -> String {
    let family = |name: &str| {
        vocab::known(name)
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| name.strip_suffix(s).is_some_and(vocab::known))
    };
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        let name = match t.strip_prefix('#') {
            Some(c) => {
                let mut w = c.split_whitespace();
                match (w.next(), w.next()) {
                    (Some("HELP" | "TYPE"), Some(name)) => name,
                    _ => continue,
                }
            }
            None => t
                .split(|c: char| c == '{' || c.is_whitespace())
                .next()
                .unwrap_or(""),
        };
        if !name.is_empty() && family(name) {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A label value as written, with the exposition format's escapes (`\\`, `\"`, `\n`) undone.
fn unescape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

impl Exposition {
    /// The engine whose names the scrape uses most; `None` when it is none of ours.
    pub fn engine(&self) -> Option<Engine> {
        // A tie goes to the engine listed first in `Engine::ALL`.
        Engine::ALL
            .into_iter()
            .enumerate()
            .map(|(i, e)| {
                let n = vocab::rows(&e)
                    .filter(|r| self.families.contains_key(r.name))
                    .count();
                (n, i, e)
            })
            .filter(|(n, _, _)| *n > 0)
            .max_by_key(|(n, i, _)| (*n, std::cmp::Reverse(*i)))
            .map(|(_, _, e)| e)
    }

    /// The figures `engine` exports in this scrape.
    pub fn read(&self, engine: Engine) -> Reading {
        let mut r = Reading::default();
        for row in vocab::rows(&engine) {
            if r.has(row.figure) {
                continue; // an earlier row (a newer name) already gave it
            }
            let Some(samples) = self.families.get(row.name) else {
                continue;
            };
            for (left, why) in [
                (self.non_finite.get(row.name), "not a finite number"),
                (
                    self.duplicates.get(row.name),
                    "a series repeated in one scrape",
                ),
            ] {
                if let Some(l) = left {
                    r.note(row.name, why, l.count, l.example);
                }
            }
            let kept: Vec<&Sample> = samples.iter().filter(|s| keep(row, s)).collect();
            match row.read {
                Read::Gauge | Read::Counter => {
                    let values: Vec<&Sample> = kept
                        .into_iter()
                        .filter(|s| s.part == Part::Value)
                        .filter(|s| r.in_range(row, s.value))
                        .collect();
                    if let Some(v) = combine(row, &values) {
                        r.scalars.insert(row.figure, v);
                    }
                }
                Read::HistogramSum => {
                    let sums: Vec<&Sample> =
                        kept.into_iter().filter(|s| s.part == Part::Sum).collect();
                    if let Some(v) = combine(row, &sums) {
                        r.scalars.insert(row.figure, v);
                    }
                }
                Read::CounterBy(label) => {
                    let mut by: BTreeMap<u32, f64> = BTreeMap::new();
                    for s in kept.into_iter().filter(|s| s.part == Part::Value) {
                        if let Some(i) = s.label(label).and_then(|v| v.parse().ok())
                            && r.in_range(row, s.value)
                        {
                            *by.entry(i).or_default() += s.value;
                        }
                    }
                    if !by.is_empty() {
                        r.by_label.insert(row.figure, by);
                    }
                }
                Read::Histogram | Read::HistogramMs => {
                    let scale = if row.read == Read::HistogramMs {
                        1e-3
                    } else {
                        1.0
                    };
                    let b = Buckets::from_samples(kept.into_iter(), scale);
                    if !b.cumulative.is_empty() || b.count > 0.0 {
                        r.hists.insert(row.figure, b);
                    }
                }
            }
        }
        // llama.cpp counts computed and cached prompt tokens apart: together they are the
        // prompt, and the cached share is its prefix hit rate.
        if let Some(computed) = r.get(Figure::PromptComputed) {
            let cached = r.get(Figure::PrefixHits);
            r.scalars
                .insert(Figure::PromptTokens, computed + cached.unwrap_or(0.0));
            if let Some(c) = cached {
                r.scalars.insert(Figure::PrefixQueries, computed + c);
            }
        }
        r
    }

    /// A DCGM exporter's GPUs (label `gpu`), each with the figures it exports; on MIG each
    /// instance (label `GPU_I_ID`) apart, its utilization from the graphics engine's activity.
    pub fn dcgm_gpus(&self) -> Vec<GpuReading> {
        let mut gpus: BTreeMap<(u32, Option<u32>), GpuReading> = BTreeMap::new();
        let key = |s: &Sample| -> Option<(u32, Option<u32>)> {
            let index = s.label("gpu")?.parse().ok()?;
            let instance = match s.label(vocab::DCGM_MIG_INSTANCE) {
                Some(i) => Some(i.parse().ok()?),
                None => None,
            };
            Some((index, instance))
        };
        let fields = GPU_TABLE_WITH_FALLBACK.iter();
        for (figure, name) in fields {
            for s in self.families.get(*name).into_iter().flatten() {
                let Some(k) = key(s) else { continue };
                if vocab::dcgm_blank(s.value) {
                    continue;
                }
                let g = gpus.entry(k).or_insert_with(|| GpuReading {
                    index: k.0,
                    mig_instance: k.1,
                    name: s.label("modelName").map(str::to_string),
                    ..GpuReading::default()
                });
                match figure {
                    // The fallback never overrides the device's own utilization.
                    None => {
                        if g.util_pct.is_none() {
                            g.util_pct = Some(s.value * 100.0);
                        }
                    }
                    Some(f) => {
                        let slot = match f {
                            GpuFigure::UtilPct => &mut g.util_pct,
                            GpuFigure::MemUsedMib => &mut g.mem_used_mib,
                            GpuFigure::PowerW => &mut g.power_w,
                            GpuFigure::SmClockMhz => &mut g.sm_clock_mhz,
                            GpuFigure::TempC => &mut g.temp_c,
                            GpuFigure::PcieRxBytesS => &mut g.pcie_rx_bytes_s,
                            GpuFigure::PcieTxBytesS => &mut g.pcie_tx_bytes_s,
                            GpuFigure::EnergyMj => &mut g.energy_mj,
                        };
                        *slot = Some(s.value);
                    }
                }
            }
        }
        gpus.into_values().collect()
    }
}

/// The DCGM fields in reading order: the table's, then the MIG utilization fallback (`None`).
static GPU_TABLE_WITH_FALLBACK: std::sync::LazyLock<Vec<(Option<GpuFigure>, &'static str)>> =
    std::sync::LazyLock::new(|| {
        vocab::GPU_TABLE
            .iter()
            .map(|(f, n)| (Some(*f), *n))
            .chain([(None, vocab::DCGM_GR_ENGINE_ACTIVE)])
            .collect()
    });

fn keep(row: &Source, s: &Sample) -> bool {
    match row.only {
        Some((k, v)) => s.label(k) == Some(v),
        None => true,
    }
}

/// The labels that tell apart copies of one state: SGLang's
/// `--enable-metrics-for-all-schedulers` has every TP rank's scheduler export the same batch.
const COPY_LABELS: &[&str] = &["tp_rank"];

/// Several samples of one figure (data-parallel engines, ranks, label sets) made one value:
/// samples differing only in a copy label are one state (their mean); the states' counts add
/// up, fractions and averages are averaged, and so are figures per GPU (each series is one
/// GPU's work: summing them would multiply it). `None` without samples.
fn combine(row: &Source, samples: &[&Sample]) -> Option<f64> {
    let mut states: BTreeMap<Vec<&(String, String)>, (f64, f64)> = BTreeMap::new();
    for s in samples {
        let key: Vec<&(String, String)> = s
            .labels
            .iter()
            .filter(|(k, _)| !COPY_LABELS.contains(&k.as_str()))
            .collect();
        let e = states.entry(key).or_default();
        e.0 += s.value;
        e.1 += 1.0;
    }
    if states.is_empty() {
        return None;
    }
    let values = states.values().map(|(sum, n)| sum / n);
    let n = states.len() as f64;
    let per_gpu = matches!(
        row.figure,
        Figure::EstFlops | Figure::EstReadBytes | Figure::EstWriteBytes
    );
    let fraction = per_gpu
        || row.read == Read::Gauge && !matches!(row.figure, Figure::Running | Figure::Waiting);
    let total: f64 = values.sum();
    Some(if fraction { total / n } else { total })
}

/// A histogram's cumulative buckets (upper bound, count), its sum and count, every label set
/// added up; bounds and sum in seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    pub cumulative: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Buckets {
    fn from_samples<'a>(samples: impl Iterator<Item = &'a Sample>, scale: f64) -> Buckets {
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let mut b = Buckets::default();
        for s in samples {
            match s.part {
                // Keyed by the bits of a non-negative bound, which order as the bounds do.
                Part::Bucket(le) => {
                    let le = le * scale;
                    by_le.entry(le.max(0.0).to_bits()).or_insert((le, 0.0)).1 += s.value
                }
                Part::Sum => b.sum += s.value * scale,
                Part::Count => b.count += s.value,
                Part::Value => {}
            }
        }
        b.cumulative = by_le.into_values().collect();
        b
    }
}

/// The figures of one scrape, and what was read but not believed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub scalars: BTreeMap<Figure, f64>,
    pub by_label: BTreeMap<Figure, BTreeMap<u32, f64>>,
    pub hists: BTreeMap<Figure, Buckets>,
    /// `family: why` with how many samples and the first one's value.
    pub notes: BTreeMap<String, Left>,
}

impl Reading {
    pub fn has(&self, f: Figure) -> bool {
        self.scalars.contains_key(&f)
            || self.by_label.contains_key(&f)
            || self.hists.contains_key(&f)
    }

    pub fn get(&self, f: Figure) -> Option<f64> {
        self.scalars.get(&f).copied()
    }

    fn note(&mut self, name: &str, why: &str, count: u64, example: f64) {
        let e = self.notes.entry(format!("{name}: {why}")).or_default();
        if e.count == 0 {
            e.example = example;
        }
        e.count += count;
    }

    /// Whether a sample of `row` can be what it says (a count not negative, a fraction not
    /// above 1); one that cannot is noted and left out.
    fn in_range(&mut self, row: &Source, v: f64) -> bool {
        let why = match row.figure {
            _ if v < 0.0 => "negative",
            Figure::KvUsage | Figure::SpecAcceptRate if v > 1.0 => "a fraction above 1",
            // SGLang's accepted length reads 0 until its first window of steps is done.
            Figure::SpecAcceptLength if v != 0.0 && v < 1.0 => "an accepted length below 1",
            _ => return true,
        };
        self.note(row.name, why, 1, v);
        false
    }
}
