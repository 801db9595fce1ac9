//! Plots: an SVG or PNG (plotters) with one panel per question: output throughput against
//! concurrency (one line per group), TTFT against throughput (the latency price of load),
//! ITL and TTFT percentiles against load, output tokens/s per GPU against tokens/s per user
//! with the points' Pareto front (the field's throughput-interactivity chart), and busbw
//! against message size for collectives; units on the axes, a legend per panel, a grid at the
//! labelled ticks only. `--plot -` draws compact bar charts as text instead.

pub mod draw;
pub mod panel;
pub mod timeline;

use crate::input::points::Point;
use crate::plot::draw::{draw_all, register_font};
use crate::plot::panel::{panels, size_label, tidy};
use crate::render::human;
use plotters::prelude::*;
use servbench::cli;
use servbench::record::CollRecord;
use std::path::Path;

/// Which picture `--plot` draws (`--plot-kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum PlotKind {
    /// The sweep's panels: throughput, TTFT, ITL against load; per GPU against per user
    #[default]
    Sweep,
    /// One point's requests as lanes on wall time, in flight and engine steps/s below
    Timeline,
}

/// Writes the plot to `path` (`.svg` or `.png`).
pub fn write_file(
    path: &Path,
    points: &[Point],
    coll: &[CollRecord],
    by: &[String],
    usd_per_gpu_hour: Option<f64>,
) -> anyhow::Result<()> {
    let panels = panels(points, coll, by, usd_per_gpu_hour);
    if panels.is_empty() {
        return Err(cli::usage(
            "--plot: nothing to plot: it needs load points (loadgen records) or coll records",
        ));
    }
    register_font();
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols) as u32;
    let size = (640 * cols as u32, 440 * rows);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let result = match ext.as_deref() {
        Some("svg") => draw_all(SVGBackend::new(path, size).into_drawing_area(), &panels),
        Some("png") => draw_all(BitMapBackend::new(path, size).into_drawing_area(), &panels),
        _ => {
            return Err(cli::usage(format!(
                "--plot {}: name a .svg or .png file, or - for a chart in the terminal",
                path.display()
            )));
        }
    };
    result.map_err(|e| cli::usage(format!("--plot {}: {e}", path.display())))
}

/// Compact bar charts as text: throughput per load for each group, busbw per size.
pub fn terminal(points: &[Point], coll: &[CollRecord], by: &[String]) -> String {
    const WIDTH: f64 = 40.0;
    let mut out = String::new();
    let bar = |v: f64, max: f64| -> String {
        let cells = if max > 0.0 { v / max * WIDTH } else { 0.0 };
        let full = cells.floor() as usize;
        let mut s = "█".repeat(full);
        if cells - (full as f64) >= 0.5 {
            s.push('▌');
        }
        s
    };
    for panel in panels(points, coll, by, None) {
        // Throughput and busbw are the panels that read well as bars.
        if !panel.title.starts_with("Output throughput")
            && !panel.title.starts_with("Bus bandwidth")
        {
            continue;
        }
        let max = panel
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .fold(0.0f64, f64::max);
        out.push_str(&format!("# {} ({})\n", panel.title, panel.y_label));
        for s in &panel.series {
            out.push_str(&format!("{}\n", s.name));
            let labels: Vec<String> = s
                .points
                .iter()
                .map(|p| {
                    if panel.x_bytes {
                        size_label(p.0)
                    } else {
                        tidy(p.0)
                    }
                })
                .collect();
            let w = labels.iter().map(|l| l.len()).max().unwrap_or(0);
            for (l, p) in labels.iter().zip(&s.points) {
                let b = bar(p.1, max);
                out.push_str(&format!("  {l:>w$} |{b:<40} {}\n", human(p.1)));
            }
        }
        out.push('\n');
    }
    out
}
