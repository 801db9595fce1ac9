//! Drawing a [`Timeline`] with plotters: the lanes on top, one per request (first sent at the
//! top), then the requests in flight and the engine's steps per second on the same time axis.

use super::{Lane, Outcome, Timeline, in_flight};
use crate::plot::draw::register_font;
use crate::plot::panel::tidy;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use std::path::Path;

/// Pixels per lane, and the lanes' area's bounds.
const LANE_PX: u32 = 9;
const LANES_MIN_PX: u32 = 260;
const LANES_MAX_PX: u32 = 1800;
/// Each panel below the lanes.
const PANEL_PX: u32 = 190;
const WIDTH_PX: u32 = 1200;
/// Chunk ticks drawn one by one up to this many (beyond, the decode band alone).
const MAX_TICKS: usize = 40_000;

const WAIT: RGBColor = RGBColor(200, 200, 200);
const QUEUE: RGBColor = RGBColor(255, 127, 14);
const PREFILL: RGBColor = RGBColor(31, 119, 180);
const DECODE: RGBColor = RGBColor(160, 214, 160);
const TOKEN: RGBColor = RGBColor(20, 110, 40);
const FAILED: RGBColor = RGBColor(214, 39, 40);
const CANCELLED: RGBColor = RGBColor(148, 103, 189);

fn size(t: &Timeline) -> (u32, u32) {
    let lanes = (t.lanes.len() as u32 * LANE_PX).clamp(LANES_MIN_PX, LANES_MAX_PX);
    (
        WIDTH_PX,
        lanes + 90 + 2 * PANEL_PX + 20 * t.notes.len() as u32,
    )
}

pub fn svg(path: &Path, t: &Timeline) -> Result<(), String> {
    register_font();
    draw(SVGBackend::new(path, size(t)).into_drawing_area(), t)
}

pub fn png(path: &Path, t: &Timeline) -> Result<(), String> {
    register_font();
    draw(BitMapBackend::new(path, size(t)).into_drawing_area(), t)
}

fn err<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, t: &Timeline) -> Result<(), String> {
    root.fill(&WHITE).map_err(err)?;
    let (_, h) = root.dim_in_pixel();
    let notes_px = 20 * t.notes.len() as u32;
    let (body, foot) = root.split_vertically(h - notes_px);
    let (lanes, below) = body.split_vertically(h - notes_px - 2 * PANEL_PX);
    let (conc, steps) = below.split_vertically(PANEL_PX);
    draw_lanes(&lanes, t)?;
    draw_in_flight(&conc, t)?;
    draw_steps(&steps, t)?;
    let font = ("sans-serif", 13).into_font().color(&BLACK.mix(0.8));
    for (i, n) in t.notes.iter().enumerate() {
        foot.draw(&Text::new(
            format!("note: {n}"),
            (16, 2 + 20 * i as i32),
            font.clone(),
        ))
        .map_err(err)?;
    }
    root.present().map_err(err)
}

/// A filled bar of lane `y` (its centre) over `span`.
type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel below the lanes: the point's wall time across, `y_desc` from 0 up to `top`.
fn panel<'a, DB: DrawingBackend + 'a>(
    area: &'a DrawingArea<DB, Shift>,
    (x0, x1): (f64, f64),
    top: f64,
    y_desc: &str,
) -> Result<Chart<'a, DB>, String> {
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1.max(x0 + 1e-3), 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds from the point's start")
        .y_desc(y_desc)
        .light_line_style(TRANSPARENT)
        .label_style(("sans-serif", 13))
        .x_label_formatter(&|v| tidy(*v))
        .y_label_formatter(&|v| tidy(*v))
        .draw()
        .map_err(err)?;
    Ok(chart)
}

/// A chart's legend box, the same on every panel.
fn legend<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 12))
        .position(position)
        .draw()
        .map_err(err)
}

fn bar(span: (f64, f64), y: f64, half: f64, color: RGBColor) -> Rectangle<(f64, f64)> {
    Rectangle::new([(span.0, y - half), (span.1, y + half)], color.filled())
}

fn draw_lanes<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t: &Timeline,
) -> Result<(), String> {
    let n = t.lanes.len() as f64;
    let (x0, x1) = t.span_s;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Timeline of {}: {} requests", t.title, t.lanes.len()),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1.max(x0 + 1e-3), 0f64..n)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds from the point's start")
        .y_desc("requests, in send order")
        .y_labels(0)
        .light_line_style(TRANSPARENT)
        .label_style(("sans-serif", 13))
        .x_label_formatter(&|v| tidy(*v))
        .draw()
        .map_err(err)?;
    // Lane i (sent i-th) at the top: its centre at n - i - 0.5.
    let y = |i: usize| n - i as f64 - 0.5;
    let lanes: Vec<(usize, &Lane)> = t.lanes.iter().enumerate().collect();
    let dot = |c: RGBColor| {
        move |(x, y): (i32, i32)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
    };
    // Before the first token where the engine did not say: sent to first token (or end).
    chart
        .draw_series(
            lanes
                .iter()
                .filter(|(_, l)| l.queued.is_none() && l.prefill.is_none())
                .map(|(i, l)| {
                    bar(
                        (l.sent_s, l.first_token_s.unwrap_or(l.end_s)),
                        y(*i),
                        0.3,
                        WAIT,
                    )
                }),
        )
        .map_err(err)?
        .label("sent, waiting for the first token")
        .legend(dot(WAIT));
    chart
        .draw_series(
            lanes
                .iter()
                .filter_map(|(i, l)| Some(bar(l.queued?, y(*i), 0.35, QUEUE))),
        )
        .map_err(err)?
        .label("queued in the engine")
        .legend(dot(QUEUE));
    chart
        .draw_series(
            lanes
                .iter()
                .filter_map(|(i, l)| Some(bar(l.prefill?, y(*i), 0.35, PREFILL))),
        )
        .map_err(err)?
        .label("prefill (engine)")
        .legend(dot(PREFILL));
    chart
        .draw_series(
            lanes
                .iter()
                .filter_map(|(i, l)| Some(bar((l.first_token_s?, l.end_s), y(*i), 0.3, DECODE))),
        )
        .map_err(err)?
        .label("first token to end")
        .legend(dot(DECODE));
    // The wait for a slot (open loop): a thin line from due to sent.
    chart
        .draw_series(
            lanes
                .iter()
                .filter(|(_, l)| l.sent_s > l.intended_s)
                .map(|(i, l)| {
                    PathElement::new(
                        vec![(l.intended_s, y(*i)), (l.sent_s, y(*i))],
                        BLACK.mix(0.5),
                    )
                }),
        )
        .map_err(err)?;
    let ticks: usize = t.lanes.iter().map(|l| l.chunks_s.len()).sum();
    if ticks <= MAX_TICKS {
        chart
            .draw_series(lanes.iter().flat_map(|(i, l)| {
                let yc = y(*i);
                l.chunks_s.iter().skip(1).map(move |&c| {
                    PathElement::new(vec![(c, yc - 0.3), (c, yc + 0.3)], TOKEN.stroke_width(1))
                })
            }))
            .map_err(err)?
            .label("each later chunk (tokens)")
            .legend(move |(x, y)| PathElement::new(vec![(x + 7, y - 5), (x + 7, y + 5)], TOKEN));
    }
    chart
        .draw_series(lanes.iter().filter_map(|(i, l)| {
            let f = l.first_token_s?;
            Some(PathElement::new(
                vec![(f, y(*i) - 0.45), (f, y(*i) + 0.45)],
                BLACK.stroke_width(2),
            ))
        }))
        .map_err(err)?
        .label("first token")
        .legend(|(x, y)| {
            PathElement::new(vec![(x + 7, y - 6), (x + 7, y + 6)], BLACK.stroke_width(2))
        });
    chart
        .draw_series(lanes.iter().map(|(i, l)| {
            PathElement::new(
                vec![(l.sent_s, y(*i) - 0.45), (l.sent_s, y(*i) + 0.45)],
                BLACK.mix(0.6),
            )
        }))
        .map_err(err)?
        .label("sent")
        .legend(|(x, y)| PathElement::new(vec![(x + 7, y - 6), (x + 7, y + 6)], BLACK.mix(0.6)));
    for (outcome, color, name) in [
        (false, FAILED, "failed (at its end)"),
        (true, CANCELLED, "cancelled"),
    ] {
        let marked: Vec<&(usize, &Lane)> = lanes
            .iter()
            .filter(|(_, l)| match l.outcome {
                Outcome::Ok => false,
                Outcome::Cancelled => outcome,
                Outcome::Failed(_) => !outcome,
            })
            .collect();
        if marked.is_empty() {
            continue;
        }
        chart
            .draw_series(
                marked
                    .iter()
                    .map(|(i, l)| Cross::new((l.end_s, y(*i)), 5, color.stroke_width(2))),
            )
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| Cross::new((x + 7, y), 5, color.stroke_width(2)));
    }
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

fn draw_in_flight<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t: &Timeline,
) -> Result<(), String> {
    let (x0, x1) = t.span_s;
    let all = in_flight(&t.lanes);
    // Clipped to the window: the count at its start, the corners inside, the count at its end.
    let at = |x: f64| {
        all.iter()
            .take_while(|p| p.0 <= x)
            .last()
            .map_or(0.0, |p| p.1)
    };
    let points: Vec<(f64, f64)> = std::iter::once((x0, at(x0)))
        .chain(all.iter().copied().filter(|p| p.0 > x0 && p.0 < x1))
        .chain(std::iter::once((x1, at(x1))))
        .collect();
    let top = points.iter().fold(1.0f64, |a, p| a.max(p.1)) * 1.15;
    let mut chart = panel(area, (x0, x1), top, "in flight")?;
    let color = RGBColor(31, 119, 180);
    chart
        .draw_series(LineSeries::new(points, color.stroke_width(2)))
        .map_err(err)?
        .label("requests in flight (sent, not yet ended)")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    legend(&mut chart, SeriesLabelPosition::UpperRight)
}

/// The engine's steps per second: in each second of its log, where the run placed them, and
/// the point's mean over its busy window (per engine where there are several) dashed over the
/// lanes' busy span; a line saying so where the run has no step log.
fn draw_steps<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    t: &Timeline,
) -> Result<(), String> {
    let (x0, x1) = t.span_s;
    let Some(s) = &t.steps else {
        let font = ("sans-serif", 15).into_font().color(&BLACK.mix(0.7));
        area.draw(&Text::new(
            "engine steps/s: this point has no engine step log (srv-launch --self-report logs one)",
            (80, PANEL_PX as i32 / 2),
            font,
        ))
        .map_err(err)?;
        return Ok(());
    };
    let busy = t.lanes.iter().fold((f64::MAX, f64::MIN), |(a, b), l| {
        (a.min(l.sent_s), b.max(l.end_s))
    });
    let mean = format!(
        "{} steps/s{}: the point's mean over its busy window ({} step log)",
        tidy((s.steps_per_s * 10.0).round() / 10.0),
        if s.engines > 1 {
            " (sum of the engines)"
        } else {
            ""
        },
        s.source
    );
    let mut lines: Vec<(String, f64)> = vec![(mean, s.steps_per_s)];
    for e in &s.per_engine {
        lines.push((
            format!(
                "engine {}: {} steps/s",
                e.engine,
                tidy((e.steps_per_s * 10.0).round() / 10.0)
            ),
            e.steps_per_s,
        ));
    }
    let top = t
        .per_second
        .iter()
        .map(|p| p.2)
        .chain(lines.iter().map(|l| l.1))
        .fold(1.0f64, f64::max)
        * 1.3;
    let mut chart = panel(area, (x0, x1), top, "engine steps/s")?;
    if !t.per_second.is_empty() {
        // Each second of the log's clock, clipped to the window drawn.
        let color = RGBColor(44, 160, 44);
        let style = color.stroke_width(2);
        let path: Vec<(f64, f64)> = t
            .per_second
            .iter()
            .flat_map(|&(a, b, rate)| [(a.max(x0), rate), (b.min(x1), rate)])
            .filter(|p| p.0 >= x0 && p.0 <= x1)
            .collect();
        chart
            .draw_series(LineSeries::new(path, style))
            .map_err(err)?
            .label("engine steps in each second of its log (every engine's)")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    for (k, (name, rate)) in lines.into_iter().enumerate() {
        let grey = if k == 0 { 90 } else { 160 };
        let style = RGBColor(grey, grey, grey).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(busy.0, rate), (busy.1, rate)],
                6,
                4,
                style,
            ))
            .map_err(err)?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
    }
    legend(&mut chart, SeriesLabelPosition::LowerRight)
}
