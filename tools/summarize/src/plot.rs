//! Plots: an SVG or PNG (plotters) with one panel per question: output throughput against
//! concurrency (one line per group), TTFT against throughput (the latency price of load),
//! ITL and TTFT percentiles against load, and busbw against message size for collectives;
//! units on the axes, a legend per panel. `--plot -` draws compact bar charts as text instead.

use crate::input::metrics::Metric;
use crate::input::points::{Keys, Point, point_name};
use crate::render::human;
use crate::tables::points::{group_keys, ordered};
use plotters::coord::Shift;
use plotters::prelude::*;
use servbench::cli;
use servbench::record::CollRecord;
use std::path::Path;
use std::sync::Once;

/// One line of a panel: a legend name and its (x, y) points.
struct Series {
    name: String,
    points: Vec<(f64, f64)>,
    dashed: bool,
}

struct Panel {
    title: String,
    x_label: String,
    y_label: String,
    log_x: bool,
    /// The x axis is a size in bytes: label it 1K, 4M, ...
    x_bytes: bool,
    series: Vec<Series>,
}

/// `4096` -> `4K`: binary sizes as collbench and nccl-tests name them.
fn size_label(bytes: f64) -> String {
    scaled(bytes, [(1u64 << 30) as f64, (1u64 << 20) as f64, 1024.0])
}

/// Axis ticks of a log scale fall on powers of ten: `1e6` -> `1M`.
fn decimal_label(bytes: f64) -> String {
    scaled(bytes, [1e9, 1e6, 1e3])
}

fn scaled(bytes: f64, units: [f64; 3]) -> String {
    for (u, name) in units.into_iter().zip(["G", "M", "K"]) {
        if bytes >= u {
            return format!("{}{name}", tidy(bytes / u));
        }
    }
    tidy(bytes)
}

/// An axis or bar label: whole numbers without decimals.
fn tidy(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        human(v)
    }
}

fn load_of(p: &Point) -> Option<f64> {
    p.params
        .concurrency
        .map(f64::from)
        .or_else(|| p.params.rate_rps())
}

/// Groups of points (lines), each in load order, named by their group keys.
fn groups<'a>(points: &'a [Point], by: &[String]) -> Vec<(String, Vec<&'a Point>)> {
    let keys = Keys::of(points);
    let gk = group_keys(&keys, by);
    let mut out: Vec<(String, Vec<&Point>)> = Vec::new();
    let mut last_group = usize::MAX;
    for (g, p) in ordered(points, &gk) {
        if g != last_group {
            let name = if gk.is_empty() {
                "all points".to_string()
            } else {
                point_name(p, &gk)
            };
            out.push((name, Vec::new()));
            last_group = g;
        }
        if let Some(last) = out.last_mut() {
            last.1.push(p);
        }
    }
    out
}

fn load_axis(points: &[Point]) -> &'static str {
    if points.iter().any(|p| p.params.concurrency.is_some()) {
        "concurrency (requests in flight)"
    } else {
        "request rate (req/s)"
    }
}

fn panels(points: &[Point], coll: &[CollRecord], by: &[String]) -> Vec<Panel> {
    let mut out = Vec::new();
    let with_load: Vec<Point> = points
        .iter()
        .filter(|p| load_of(p).is_some())
        .cloned()
        .collect();
    if !with_load.is_empty() {
        let gs = groups(&with_load, by);
        let line =
            |name: String, ps: &[&Point], x: &dyn Fn(&Point) -> Option<f64>, m: Metric, dashed| {
                Series {
                    name,
                    points: ps
                        .iter()
                        .filter_map(|p| Some((x(p)?, p.mean(m)?)))
                        .collect(),
                    dashed,
                }
            };
        out.push(Panel {
            title: "Output throughput against load".into(),
            x_label: load_axis(&with_load).into(),
            y_label: "output tokens/s".into(),
            log_x: true,
            x_bytes: false,
            series: gs
                .iter()
                .map(|(n, ps)| line(n.clone(), ps, &load_of, Metric::TOK_S, false))
                .collect(),
        });
        let tok = |p: &Point| p.mean(Metric::TOK_S);
        let mut lat = Vec::new();
        for (n, ps) in &gs {
            lat.push(line(format!("{n} p50"), ps, &tok, Metric::TTFT_P50, false));
            lat.push(line(format!("{n} p99"), ps, &tok, Metric::TTFT_P99, true));
        }
        out.push(Panel {
            title: "TTFT against throughput".into(),
            x_label: "output tokens/s".into(),
            y_label: "TTFT (ms)".into(),
            log_x: false,
            x_bytes: false,
            series: lat,
        });
        let mut pct = Vec::new();
        for (n, ps) in &gs {
            pct.push(line(
                format!("{n} ITL p50"),
                ps,
                &load_of,
                Metric::ITL_P50,
                false,
            ));
            pct.push(line(
                format!("{n} ITL p99"),
                ps,
                &load_of,
                Metric::ITL_P99,
                true,
            ));
            pct.push(line(
                format!("{n} TPOT p50"),
                ps,
                &load_of,
                Metric::TPOT_P50,
                false,
            ));
        }
        out.push(Panel {
            title: "Inter-token latency percentiles against load".into(),
            x_label: load_axis(&with_load).into(),
            y_label: "ITL / TPOT (ms)".into(),
            log_x: true,
            x_bytes: false,
            series: pct,
        });
    }
    if !coll.is_empty() {
        let mut by_op: std::collections::BTreeMap<String, Vec<(f64, f64)>> = Default::default();
        for c in coll {
            by_op
                .entry(format!("{} {} x{} {}", c.op, c.backend, c.ranks, c.mode))
                .or_default()
                .push((c.bytes as f64, c.busbw_gbps));
        }
        out.push(Panel {
            title: "Bus bandwidth against message size".into(),
            x_label: "message size (bytes)".into(),
            y_label: "busbw (GB/s)".into(),
            log_x: true,
            x_bytes: true,
            series: by_op
                .into_iter()
                .map(|(name, mut points)| {
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series {
                        name,
                        points,
                        dashed: false,
                    }
                })
                .collect(),
        });
    }
    out
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // Bitmap text needs a real font; SVG sizing uses the same metrics.
        if plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
            .is_err()
        {
            cli::warn("the DejaVu font did not load: plot text may be missing");
        }
    });
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), String> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let all: Vec<(f64, f64)> = panel
        .series
        .iter()
        .flat_map(|s| s.points.iter().copied())
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (!panel.log_x || *x > 0.0))
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.1;
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    if x1 <= x0 {
        if panel.log_x {
            x0 /= 2.0;
            x1 *= 2.0;
        } else {
            x0 -= 1.0;
            x1 += 1.0;
        }
    } else if !panel.log_x {
        x0 = 0.0;
        x1 *= 1.05;
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65);
    let colors = |i: usize| Palette99::pick(i).to_rgba();
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(panel.x_label.as_str())
                .y_desc(panel.y_label.as_str())
                .x_label_formatter(&|v| {
                    if panel.x_bytes {
                        decimal_label(*v)
                    } else {
                        tidy(*v)
                    }
                })
                .y_label_formatter(&|v| tidy(*v))
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for (i, s) in panel.series.iter().enumerate() {
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite() && (!panel.log_x || *x > 0.0))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                // Dashed series share the colour of the solid series before them.
                let color = colors(if s.dashed { i.saturating_sub(1) } else { i });
                let style = ShapeStyle::from(color).stroke_width(if s.dashed { 1 } else { 2 });
                chart
                    .draw_series(LineSeries::new(pts.clone(), style))
                    .map_err(err)?
                    .label(s.name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
                chart
                    .draw_series(
                        pts.iter()
                            .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                    )
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font(("sans-serif", 12))
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(err)?;
        }};
    }
    if panel.log_x {
        body!(
            builder
                .build_cartesian_2d((x0..x1).log_scale(), 0f64..y1)
                .map_err(err)?
        );
    } else {
        body!(builder.build_cartesian_2d(x0..x1, 0f64..y1).map_err(err)?);
    }
    Ok(())
}

fn draw_all<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    panels: &[Panel],
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let cols = if panels.len() > 1 { 2 } else { 1 };
    let rows = panels.len().div_ceil(cols);
    let areas = root.split_evenly((rows, cols));
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel)?;
    }
    root.present().map_err(|e| e.to_string())
}

/// Writes the plot to `path` (`.svg` or `.png`).
pub fn write_file(
    path: &Path,
    points: &[Point],
    coll: &[CollRecord],
    by: &[String],
) -> anyhow::Result<()> {
    let panels = panels(points, coll, by);
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
    for panel in panels(points, coll, by) {
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
