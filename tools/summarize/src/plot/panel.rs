//! What the plot shows: its panels, each a question with its series, built from the points and
//! the collectives; how they are drawn is `draw`.

use crate::input::metrics::{Metric, Scalar};
use crate::input::points::{Keys, Point, point_name};
use crate::render::human;
use crate::tables::points::{group_keys, ordered};
use plotters::prelude::SeriesLabelPosition;
use servbench::record::CollRecord;

/// One series of a panel: a legend name, its (x, y) points and how they are drawn.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub look: Look,
    /// Its group (the colour it is drawn in, the same in every panel).
    pub group: usize,
}

pub enum Look {
    /// A line through the points, with a marker on each.
    Line,
    /// A thin line (a p99 beside its p50).
    Thin,
    /// A dashed line (TPOT beside ITL).
    Dashed,
    /// Markers only, each labelled (a point's load and run).
    Scatter(Vec<String>),
    /// The Pareto front of the scatters before it: a dashed dark line, no markers.
    Front,
}

pub struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_axis: XAxis,
    /// Where the legend sits: where the panel's points seldom are.
    pub legend: SeriesLabelPosition,
    /// The x axis is a size in bytes: label it 1K, 4M, ...
    pub x_bytes: bool,
    pub series: Vec<Series>,
}

/// How a panel's x axis spans its points.
#[derive(Clone, Copy, PartialEq)]
pub enum XAxis {
    /// Log scale, ticks at powers of two (loads and message sizes double).
    Log,
    /// From zero to past the largest point.
    FromZero,
    /// Around the points only (a rate that barely moves still spreads them out).
    AroundPoints,
}

/// `4096` -> `4K`: binary sizes as collbench and nccl-tests name them.
pub fn size_label(bytes: f64) -> String {
    scaled(bytes, [(1u64 << 30) as f64, (1u64 << 20) as f64, 1024.0])
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
pub fn tidy(v: f64) -> String {
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

/// Output tokens/s one user (stream) sees: 1000 / TPOT p50.
fn tok_s_per_user(p: &Point) -> Option<f64> {
    p.mean(Metric::Scalar(Scalar::StreamTokS))
}

/// The points no other point beats on both axes (each higher is better), in x order: the
/// best per-GPU throughput at each per-user rate.
pub fn pareto_front(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut by_x: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .collect();
    // Right to left, the higher y first at one x: a point is on the front when it is higher
    // than every point to its right.
    by_x.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.total_cmp(&a.1)));
    let mut front: Vec<(f64, f64)> = Vec::new();
    for p in by_x {
        if front.last().is_none_or(|last| p.1 > last.1) {
            front.push(p);
        }
    }
    front.reverse();
    front
}

/// Output tokens/s per GPU against tokens/s per user, each point labelled by its load and
/// run (its varying keys) and, with `--gpu-hour-cost`, its dollars per million output tokens;
/// one colour per group, and the Pareto front over all of them.
fn throughput_against_interactivity(
    points: &[Point],
    groups: &[(String, Vec<&Point>)],
    usd_per_gpu_hour: Option<f64>,
) -> Panel {
    let varying = Keys::of(points).varying;
    let mut series: Vec<Series> = groups
        .iter()
        .enumerate()
        .map(|(group, (name, ps))| {
            let placed: Vec<(&Point, (f64, f64))> = ps
                .iter()
                .filter_map(|p| Some((*p, (tok_s_per_user(p)?, p.tok_s_per_gpu()?))))
                .collect();
            Series {
                name: name.clone(),
                points: placed.iter().map(|(_, xy)| *xy).collect(),
                look: Look::Scatter(
                    placed
                        .iter()
                        .map(|(p, _)| {
                            let name = point_name(p, &varying);
                            match usd_per_gpu_hour.and_then(|usd| p.usd_per_mtok(usd)) {
                                Some(cost) => format!("{name} ${}/M", human(cost)),
                                None => name,
                            }
                        })
                        .collect(),
                ),
                group,
            }
        })
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.points.clone()).collect();
    series.push(Series {
        name: "Pareto front".into(),
        points: pareto_front(&all),
        look: Look::Front,
        group: 0,
    });
    Panel {
        title: "Throughput per GPU against tokens/s per user".into(),
        x_label: "tokens/s per user (1000 / TPOT p50)".into(),
        y_label: "output tokens/s per GPU".into(),
        x_axis: XAxis::AroundPoints,
        x_bytes: false,
        // The front runs from high throughput at few tokens/s per user down to the right:
        // nothing is up there.
        legend: SeriesLabelPosition::UpperRight,
        series,
    }
}

pub fn panels(
    points: &[Point],
    coll: &[CollRecord],
    by: &[String],
    usd_per_gpu_hour: Option<f64>,
) -> Vec<Panel> {
    let mut out = Vec::new();
    let with_load: Vec<Point> = points
        .iter()
        .filter(|p| load_of(p).is_some())
        .cloned()
        .collect();
    if !with_load.is_empty() {
        let gs = groups(&with_load, by);
        // One colour per group in every panel: its p99 thin, its TPOT dashed.
        let line = |group: usize,
                    name: String,
                    x: &dyn Fn(&Point) -> Option<f64>,
                    m: Metric,
                    look: Look| Series {
            name,
            points: gs[group]
                .1
                .iter()
                .filter_map(|p| Some((x(p)?, p.mean(m)?)))
                .collect(),
            look,
            group,
        };
        let tok = |p: &Point| p.mean(Metric::TOK_S);
        let (mut thr, mut lat, mut pct) = (Vec::new(), Vec::new(), Vec::new());
        for (g, (n, _)) in gs.iter().enumerate() {
            thr.push(line(g, n.clone(), &load_of, Metric::TOK_S, Look::Line));
            lat.push(line(
                g,
                format!("{n} p50"),
                &tok,
                Metric::TTFT_P50,
                Look::Line,
            ));
            lat.push(line(
                g,
                format!("{n} p99"),
                &tok,
                Metric::TTFT_P99,
                Look::Thin,
            ));
            pct.push(line(
                g,
                format!("{n} ITL p50"),
                &load_of,
                Metric::ITL_P50,
                Look::Line,
            ));
            pct.push(line(
                g,
                format!("{n} ITL p99"),
                &load_of,
                Metric::ITL_P99,
                Look::Thin,
            ));
            pct.push(line(
                g,
                format!("{n} TPOT p50"),
                &load_of,
                Metric::TPOT_P50,
                Look::Dashed,
            ));
        }
        out.push(Panel {
            title: "Output throughput against load".into(),
            x_label: load_axis(&with_load).into(),
            y_label: "output tokens/s".into(),
            x_axis: XAxis::Log,
            x_bytes: false,
            legend: SeriesLabelPosition::UpperLeft,
            series: thr,
        });
        out.push(Panel {
            title: "TTFT against throughput".into(),
            x_label: "output tokens/s".into(),
            y_label: "TTFT (ms)".into(),
            x_axis: XAxis::FromZero,
            x_bytes: false,
            legend: SeriesLabelPosition::UpperLeft,
            series: lat,
        });
        out.push(Panel {
            title: "Inter-token latency percentiles against load".into(),
            x_label: load_axis(&with_load).into(),
            y_label: "ITL / TPOT (ms)".into(),
            x_axis: XAxis::Log,
            x_bytes: false,
            legend: SeriesLabelPosition::UpperLeft,
            series: pct,
        });
        out.push(throughput_against_interactivity(
            &with_load,
            &gs,
            usd_per_gpu_hour,
        ));
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
            x_axis: XAxis::Log,
            x_bytes: true,
            legend: SeriesLabelPosition::UpperLeft,
            series: by_op
                .into_iter()
                .enumerate()
                .map(|(group, (name, mut points))| {
                    points.sort_by(|a, b| a.0.total_cmp(&b.0));
                    Series {
                        name,
                        points,
                        look: Look::Line,
                        group,
                    }
                })
                .collect(),
        });
    }
    out
}
