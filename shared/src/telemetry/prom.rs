//! Prometheus text exposition (format 0.0.4) parsed with the `prom_text_format_parser` crate
//! (it keeps `vllm:`-style names, which the regex-based `prometheus-parse` drops), then read
//! into our figures for one engine ([`Reading`]).

use super::vocab::{self, Engine, Figure, GpuFigure, Read, Source};
use crate::exec::gpu::GpuReading;
use prom_text_format_parser::{Type, ValueType, parse_scrape};
use std::collections::BTreeMap;

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

/// One scrape: every family by name.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    pub families: BTreeMap<String, Vec<Sample>>,
    /// Families the parser could not assemble (kept out, counted).
    pub broken: usize,
}

/// Parses a scrape. A family the parser cannot assemble is left out (and counted); text that
/// is not the exposition format at all is an error, in words.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let (metrics, error) = parse_scrape(text);
    let broken = match error {
        None => 0,
        Some(prom_text_format_parser::ScrapeParseError::Collect(e)) => e.len(),
        Some(prom_text_format_parser::ScrapeParseError::Parse(e)) => {
            let first = e.lines().next().unwrap_or("").to_string();
            return Err(format!("not Prometheus text: {first}"));
        }
    };
    let mut families: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    for m in metrics {
        let samples = families.entry(m.name).or_default();
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
                            Ok(le) => Part::Bucket(le),
                            Err(_) => continue,
                        },
                        None => continue,
                    }
                }
                _ => Part::Value,
            };
            let labels = labels.into_iter().filter(|(k, _)| k != "le").collect();
            samples.push(Sample {
                part,
                labels,
                value,
            });
        }
    }
    Ok(Exposition { families, broken })
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
        Engine::ALL
            .into_iter()
            .map(|e| {
                let n = vocab::rows(e)
                    .filter(|r| self.families.contains_key(r.name))
                    .count();
                (n, e)
            })
            .filter(|&(n, _)| n > 0)
            .max_by_key(|&(n, e)| (n, std::cmp::Reverse(e)))
            .map(|(_, e)| e)
    }

    /// The figures `engine` exports in this scrape.
    pub fn read(&self, engine: Engine) -> Reading {
        let mut r = Reading::default();
        for row in vocab::rows(engine) {
            if r.has(row.figure) {
                continue; // an earlier row (a newer name) already gave it
            }
            let Some(samples) = self.families.get(row.name) else {
                continue;
            };
            let kept = samples.iter().filter(|s| keep(row, s));
            match row.read {
                Read::Gauge => {
                    let values: Vec<f64> = kept
                        .filter(|s| s.part == Part::Value)
                        .map(|s| s.value)
                        .collect();
                    if let Some(v) = combine_gauge(row.figure, &values) {
                        r.scalars.insert(row.figure, v);
                    }
                }
                Read::Counter => {
                    let v = kept
                        .filter(|s| s.part == Part::Value)
                        .map(|s| s.value)
                        .sum();
                    r.scalars.insert(row.figure, v);
                }
                Read::HistogramSum => {
                    let v = kept.filter(|s| s.part == Part::Sum).map(|s| s.value).sum();
                    r.scalars.insert(row.figure, v);
                }
                Read::CounterBy(label) => {
                    let mut by: BTreeMap<u32, f64> = BTreeMap::new();
                    for s in kept.filter(|s| s.part == Part::Value) {
                        if let Some(i) = s.label(label).and_then(|v| v.parse().ok()) {
                            *by.entry(i).or_default() += s.value;
                        }
                    }
                    r.by_label.insert(row.figure, by);
                }
                Read::Histogram => {
                    r.hists.insert(row.figure, Buckets::from_samples(kept));
                }
            }
        }
        r
    }

    /// A DCGM exporter's GPUs (label `gpu`), each with the figures it exports.
    pub fn dcgm_gpus(&self) -> Vec<GpuReading> {
        let mut gpus: BTreeMap<u32, GpuReading> = BTreeMap::new();
        for (figure, name) in vocab::GPU_TABLE {
            for s in self.families.get(*name).into_iter().flatten() {
                let Some(index) = s.label("gpu").and_then(|g| g.parse().ok()) else {
                    continue;
                };
                if vocab::dcgm_blank(s.value) {
                    continue;
                }
                let g = gpus.entry(index).or_insert_with(|| GpuReading {
                    index,
                    name: s.label("modelName").map(str::to_string),
                    ..GpuReading::default()
                });
                let slot = match figure {
                    GpuFigure::UtilPct => &mut g.util_pct,
                    GpuFigure::MemUsedMib => &mut g.mem_used_mib,
                    GpuFigure::PowerW => &mut g.power_w,
                    GpuFigure::SmClockMhz => &mut g.sm_clock_mhz,
                    GpuFigure::TempC => &mut g.temp_c,
                    GpuFigure::PcieRxBytesS => &mut g.pcie_rx_bytes_s,
                    GpuFigure::PcieTxBytesS => &mut g.pcie_tx_bytes_s,
                };
                *slot = Some(s.value);
            }
        }
        gpus.into_values().collect()
    }
}

fn keep(row: &Source, s: &Sample) -> bool {
    match row.only {
        Some((k, v)) => s.label(k) == Some(v),
        None => true,
    }
}

/// Several samples of one gauge (data-parallel engines, ranks): counts add up, fractions and
/// averages are averaged.
fn combine_gauge(figure: Figure, values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    Some(match figure {
        Figure::Running | Figure::Waiting => sum,
        _ => sum / values.len() as f64,
    })
}

/// A histogram's cumulative buckets (upper bound, count), its sum and count, every label set
/// added up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    pub cumulative: Vec<(f64, f64)>,
    pub sum: f64,
    pub count: f64,
}

impl Buckets {
    fn from_samples<'a>(samples: impl Iterator<Item = &'a Sample>) -> Buckets {
        let mut by_le: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let mut b = Buckets::default();
        for s in samples {
            match s.part {
                // Keyed by the bits of a non-negative bound, which order as the bounds do.
                Part::Bucket(le) => {
                    by_le.entry(le.max(0.0).to_bits()).or_insert((le, 0.0)).1 += s.value
                }
                Part::Sum => b.sum += s.value,
                Part::Count => b.count += s.value,
                Part::Value => {}
            }
        }
        b.cumulative = by_le.into_values().collect();
        b
    }
}

/// The figures of one scrape.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    pub scalars: BTreeMap<Figure, f64>,
    pub by_label: BTreeMap<Figure, BTreeMap<u32, f64>>,
    pub hists: BTreeMap<Figure, Buckets>,
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
}
