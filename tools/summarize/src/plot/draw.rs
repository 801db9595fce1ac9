//! Drawing the panels with plotters, on an SVG or a bitmap: one colour per group, a grid line at
//! each labelled tick, the legend where the panel's points seldom are.

use crate::plot::panel::{Look, Panel, XAxis, size_label, tidy};
use plotters::coord::Shift;
use plotters::prelude::*;
use servbench::cli;
use std::sync::Once;

/// The groups' colours, strong and told apart in print (the common ten-colour palette).
const GROUP_COLORS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

pub fn register_font() {
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
        .filter(|(x, y)| x.is_finite() && y.is_finite() && (panel.x_axis != XAxis::Log || *x > 0.0))
        .collect();
    if all.is_empty() {
        return Ok(());
    }
    let (mut x0, mut x1) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let y1 = all.iter().fold(0.0f64, |a, p| a.max(p.1)) * 1.1;
    let y1 = if y1 > 0.0 { y1 } else { 1.0 };
    match panel.x_axis {
        XAxis::Log if x1 <= x0 => (x0, x1) = (x0 / 2.0, x1 * 2.0),
        XAxis::Log => {}
        XAxis::FromZero if x1 > x0 => (x0, x1) = (0.0, x1 * 1.05),
        XAxis::FromZero => (x0, x1) = (x0 - 1.0, x1 + 1.0),
        XAxis::AroundPoints => {
            // A tenth of the span (at least 5% of the value) to the left, twice that to the
            // right, where the points' labels run.
            let pad = ((x1 - x0) / 10.0).max(x1.abs() / 20.0).max(1e-9);
            (x0, x1) = ((x0 - pad).max(0.0), x1 + 2.0 * pad);
        }
    }
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(65);
    let colors = |group: usize| GROUP_COLORS[group % GROUP_COLORS.len()];
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(panel.x_label.as_str())
                .y_desc(panel.y_label.as_str())
                .x_label_formatter(&|v| {
                    if panel.x_bytes {
                        size_label(*v)
                    } else {
                        tidy(*v)
                    }
                })
                .y_label_formatter(&|v| tidy(*v))
                // A grid line at each labelled tick only: the minor lines between them crowd
                // a log axis's decades into grey.
                .light_line_style(TRANSPARENT)
                .label_style(("sans-serif", 13))
                .draw()
                .map_err(err)?;
            for s in &panel.series {
                let pts: Vec<(f64, f64)> = s
                    .points
                    .iter()
                    .copied()
                    .filter(|(x, y)| {
                        x.is_finite() && y.is_finite() && (panel.x_axis != XAxis::Log || *x > 0.0)
                    })
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let color = colors(s.group);
                match &s.look {
                    Look::Line | Look::Thin => {
                        let width = if matches!(s.look, Look::Thin) { 1 } else { 2 };
                        let style = ShapeStyle::from(color).stroke_width(width);
                        chart
                            .draw_series(LineSeries::new(pts.clone(), style))
                            .map_err(err)?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| {
                                PathElement::new(vec![(x, y), (x + 18, y)], style)
                            });
                        chart
                            .draw_series(
                                pts.iter()
                                    .map(|&(x, y)| Circle::new((x, y), 3, color.filled())),
                            )
                            .map_err(err)?;
                    }
                    Look::Dashed => {
                        let style = ShapeStyle::from(color).stroke_width(2);
                        chart
                            .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                            .map_err(err)?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| {
                                plotters::element::DashedPathElement::new(
                                    vec![(x, y), (x + 18, y)],
                                    5,
                                    3,
                                    style,
                                )
                            });
                    }
                    Look::Scatter(labels) => {
                        chart
                            .draw_series(
                                pts.iter()
                                    .map(|&(x, y)| Circle::new((x, y), 4, color.filled())),
                            )
                            .map_err(err)?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
                        let font = ("sans-serif", 11).into_font().color(&BLACK.mix(0.75));
                        chart
                            .draw_series(s.points.iter().zip(labels).filter_map(|(&(x, y), l)| {
                                (x.is_finite() && y.is_finite()).then(|| {
                                    EmptyElement::at((x, y))
                                        + Text::new(l.clone(), (6, -14), font.clone())
                                })
                            }))
                            .map_err(err)?;
                    }
                    Look::Front => {
                        let style = ShapeStyle::from(BLACK.mix(0.6)).stroke_width(1);
                        chart
                            .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
                            .map_err(err)?
                            .label(s.name.as_str())
                            .legend(move |(x, y)| {
                                plotters::element::DashedPathElement::new(
                                    vec![(x, y), (x + 18, y)],
                                    5,
                                    3,
                                    style,
                                )
                            });
                    }
                }
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK.mix(0.4))
                .label_font(("sans-serif", 12))
                .position(panel.legend.clone())
                .draw()
                .map_err(err)?;
        }};
    }
    if panel.x_axis == XAxis::Log {
        body!(
            builder
                .build_cartesian_2d((x0..x1).log_scale().base(2.0), 0f64..y1)
                .map_err(err)?
        );
    } else {
        body!(builder.build_cartesian_2d(x0..x1, 0f64..y1).map_err(err)?);
    }
    Ok(())
}

pub fn draw_all<DB: DrawingBackend>(
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
