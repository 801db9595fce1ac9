//! summarize: the end of a servbench pipeline. Reads records (many runs at once), recomputes
//! each sweep point's statistics with the shared implementation, and prints tables for
//! people, comparisons with a noise test, notes on what a careful engineer would spot,
//! efficiency against a roofline, and plots.
//!
//! In layers, every import running down (no module reaches up or sideways into a higher one):
//! - [`input`]: records read and checked, folded into sweep points, and the figures a point
//!   carries (`metrics`) with their noise from one run (`noise`);
//! - [`roofline`]: how a point is judged against the hardware (limits, its decode step);
//! - [`notes`]: the notes, with the words and thresholds they share (`notes::words`);
//! - [`tables`]: one section per kind of record;
//! - [`compare`] and [`plot`]: the comparisons and the pictures.
//!
//! [`render`] (a table in text, Markdown, CSV, JSON) sits under them all; this file wires them.

pub mod compare;
pub mod input;
pub mod notes;
pub mod plot;
pub mod render;
pub mod roofline;
pub mod tables;

use input::Inputs;
use input::points::{self, Point};
use notes::note::{Facts, Note};
use render::{Format, Table};
use servbench::cli::{self, Exit};
use servbench::jsonl::Source;
use servbench::record::label;
use servbench::stats::Slo;
use std::io::Write;
use std::path::PathBuf;
use tables::Section;
use tables::view::{Col, TEXT_WIDTH, View};

/// What to do, from the command line.
#[derive(Debug, Clone)]
pub struct Config {
    pub sources: Vec<Source>,
    pub format: Format,
    pub cols: Option<Vec<Col>>,
    pub by: Vec<String>,
    /// Labels dropped before grouping, so one point measured on several hosts merges.
    pub merge_labels: Vec<String>,
    pub slo: Option<Slo>,
    pub compare: Option<(Source, Source)>,
    pub compare_by: Option<String>,
    pub compare_metrics: Vec<input::metrics::Metric>,
    pub notes: bool,
    pub plot: Option<PathBuf>,
    /// `--plot-kind`: the sweep's panels, or one point's timeline.
    pub plot_kind: plot::PlotKind,
    /// The timeline's point and window (`--point`, `--window`).
    pub timeline: input::kept::Select,
    pub roofline: Option<roofline::Roofline>,
    /// Hardware for the collectives' link share when no model is given.
    pub link_hw: Option<servbench::presets::Hardware>,
    pub strict: bool,
    /// `--wide`: every column, however wide the text table gets.
    pub wide: bool,
    /// `--gpu-hour-cost`: dollars per GPU-hour (finite, above 0).
    pub usd_per_gpu_hour: Option<f64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sources: vec![Source::Stdin],
            format: Format::Text,
            cols: None,
            by: Vec::new(),
            merge_labels: vec![label::HOST.to_string(), label::RANK.to_string()],
            slo: None,
            compare: None,
            compare_by: None,
            compare_metrics: compare::DEFAULT_METRICS.to_vec(),
            notes: true,
            plot: None,
            plot_kind: plot::PlotKind::Sweep,
            timeline: input::kept::Select::default(),
            roofline: None,
            link_hw: None,
            strict: false,
            wide: false,
            usd_per_gpu_hour: None,
        }
    }
}

/// Reads sources and builds points.
pub fn load_points(sources: &[Source], config: &Config) -> anyhow::Result<(Inputs, Vec<Point>)> {
    let keep = (config.plot.is_some() && config.plot_kind == plot::PlotKind::Timeline).then(|| {
        input::kept::Select {
            merge_labels: config.merge_labels.clone(),
            ..config.timeline.clone()
        }
    });
    let inputs = input::load_keeping(sources, config.strict, config.slo.as_ref(), keep)?;
    let points = points::build(&inputs, &config.merge_labels, config.slo.as_ref());
    Ok((inputs, points))
}

/// The tables for one set of inputs, notes included.
pub fn tables(inputs: &Inputs, points: &[Point], config: &Config) -> Vec<Table> {
    tables_with(inputs, points, config, notes::NOTES, tables::SECTIONS)
}

/// The tables of `sections` with `notes` under them (the lists [`tables`] passes, or others
/// beside them: tests/extending.rs).
pub fn tables_with(
    inputs: &Inputs,
    points: &[Point],
    config: &Config,
    notes: &[Note],
    sections: &[Section],
) -> Vec<Table> {
    let facts = Facts::new(
        inputs,
        points,
        config.roofline.as_ref(),
        config.link_hw.as_ref(),
    );
    let view = View {
        cols: config.cols.as_deref(),
        by: &config.by,
        notes: if config.notes { notes } else { &[] },
        fit: fits_width(config),
        usd_per_gpu_hour: config.usd_per_gpu_hour,
    };
    tables::all(&facts, &view, sections)
}

/// A terminal's Ctrl-C reaches every tool of the pipeline at once, and summarize holds the
/// points: the first means upstream is stopping (read on to the end of stdin, print the table
/// of what arrived, exit 130); a second, or no end within `drain_wait`, stops the reading and
/// prints what it holds.
pub fn catch_interrupts(drain_wait: std::time::Duration) {
    servbench::interrupt::catch(drain_wait);
    servbench::interrupt::on_signal(move |seen| {
        if seen == 1 {
            cli::info(format!(
                "interrupted: reading on until upstream ends ({drain_wait:?} at most; again to stop reading), then printing what arrived"
            ));
        }
        true
    });
}

/// Whether tables are fitted to [`TEXT_WIDTH`]: aligned text without `--wide`.
fn fits_width(config: &Config) -> bool {
    config.format == Format::Text && !config.wide
}

/// A comparison's value columns (base and new) a fitted table may drop, the last metric's
/// first: the ratio with its verdict stays.
fn fit_comparison(table: &mut Table, config: &Config) {
    if !fits_width(config) {
        return;
    }
    let names: Vec<String> = config
        .compare_metrics
        .iter()
        .rev()
        .flat_map(|m| [format!("{}_base", m.name()), format!("{}_new", m.name())])
        .collect();
    table.fit_width(TEXT_WIDTH, &names);
}

/// Runs summarize, writing the report to `out`: load, tabulate (or compare), note, plot; after
/// a Ctrl-C (see [`catch_interrupts`]) the report of what arrived, and exit 130.
pub fn run(config: &Config, out: &mut impl Write) -> anyhow::Result<Exit> {
    let exit = report(config, out)?;
    if servbench::interrupt::interrupted() && exit == Exit::Ok {
        cli::info(
            "interrupted: the tables hold what arrived before the input ended (points cut short are noted as partial)",
        );
        return Ok(Exit::Interrupted);
    }
    Ok(exit)
}

fn report(config: &Config, out: &mut impl Write) -> anyhow::Result<Exit> {
    if let Some((base, new)) = &config.compare {
        let tables = compare_files(base, new, config)?;
        return write_text(out, &render::render(&tables, config.format));
    }
    let (inputs, points) = load_points(&config.sources, config)?;
    report_ignored(&inputs);
    if let Some(roof) = &config.roofline {
        roof.check(&points).map_err(cli::usage)?;
        for w in roof.warnings(&points) {
            cli::warn(w);
        }
    }
    let mut tables = match &config.compare_by {
        Some(label) => {
            let metrics = compare::with_judged(&config.compare_metrics, &points, &points);
            let mut t = compare::compare_by_label(&points, label, &metrics)?;
            fit_comparison(&mut t, config);
            vec![t]
        }
        None => tables(&inputs, &points, config),
    };
    if tables.is_empty() {
        if servbench::interrupt::interrupted() {
            cli::info("interrupted before any record arrived: nothing to summarize");
            return Ok(Exit::Interrupted);
        }
        return Err(cli::usage(
            "no records to summarize: give loadgen, collbench, srv-launch or srv-kill output (files or stdin)",
        ));
    }
    let mut terminal = String::new();
    match &config.plot {
        Some(path) if config.plot_kind == plot::PlotKind::Timeline => {
            let timeline = plot::timeline::Timeline::of(&inputs).map_err(cli::usage)?;
            if path.as_os_str() == "-" {
                // The lanes as tables after the report's (in JSON, one document).
                tables.push(timeline.table());
                tables.extend(timeline.steps_table());
            } else {
                plot::timeline::write_file(path, &timeline)?;
                for n in &timeline.notes {
                    cli::info(format!("note: timeline: {n}"));
                }
                cli::info(format!(
                    "timeline of {} ({} requests) written to {}",
                    timeline.title,
                    timeline.lanes.len(),
                    path.display()
                ));
            }
        }
        Some(path) if path.as_os_str() == "-" => {
            terminal.push('\n');
            terminal.push_str(&plot::terminal(&points, &inputs.coll, &config.by));
        }
        Some(path) => {
            plot::write_file(
                path,
                &points,
                &inputs.coll,
                &config.by,
                config.usd_per_gpu_hour,
            )?;
            cli::info(format!("plot written to {}", path.display()));
        }
        None => {}
    }
    let mut text = render::render(&tables, config.format);
    text.push_str(&terminal);
    write_text(out, &text)
}

/// `--compare BASE NEW`: each file read on its own, then matched point by point; the
/// differences of the two servers' environments above, where both have server records.
fn compare_files(base: &Source, new: &Source, config: &Config) -> anyhow::Result<Vec<Table>> {
    let (base_inputs, base_points) = load_points(std::slice::from_ref(base), config)?;
    let (new_inputs, new_points) = load_points(std::slice::from_ref(new), config)?;
    report_ignored(&base_inputs);
    report_ignored(&new_inputs);
    if base_points.is_empty() || new_points.is_empty() {
        let empty = if base_points.is_empty() { base } else { new };
        return Err(cli::usage(format!(
            "--compare: {} holds no request or summary records to compare",
            empty.name()
        )));
    }
    let mut tables: Vec<Table> =
        compare::env_diff::table(&base_inputs.servers, &new_inputs.servers)
            .into_iter()
            .collect();
    let mut t = compare::compare_sides(
        &base_points,
        &new_points,
        &base.name(),
        &new.name(),
        &compare::with_judged(&config.compare_metrics, &base_points, &new_points),
    );
    fit_comparison(&mut t, config);
    tables.push(t);
    let run = |source: &Source, inputs: &Inputs, points| {
        compare::pd::RunLayout::of(&inputs.servers, points).map(|layout| compare::pd::Run {
            name: source.name(),
            layout,
            points,
        })
    };
    if let (Some(b), Some(n)) = (
        run(base, &base_inputs, &base_points),
        run(new, &new_inputs, &new_points),
    ) && let Some(mut pd) = compare::pd::table(&b, &n)
    {
        if fits_width(config) {
            pd.fit_width(TEXT_WIDTH, &compare::pd::DROPPABLE.map(String::from));
        }
        tables.push(pd);
    }
    // Beside the speed: whether the two runs answered alike, where they recorded text.
    tables.extend(compare::agreement::table(&base_inputs, &new_inputs));
    Ok(tables)
}

fn write_text(out: &mut impl Write, text: &str) -> anyhow::Result<Exit> {
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(servbench::jsonl::OutputError::from_io)?;
    Ok(Exit::Ok)
}

fn report_ignored(inputs: &Inputs) {
    let mut ignored = inputs.ignored.clone();
    for (kind, n) in tables::unread(&inputs.records, tables::SECTIONS) {
        *ignored.entry(kind).or_default() += n;
    }
    if !ignored.is_empty() {
        let list: Vec<String> = ignored
            .iter()
            .map(|(k, n)| format!("{n} {}", if k.is_empty() { "(no kind)" } else { k }))
            .collect();
        cli::info(format!(
            "ignored {} record(s) of kinds or schema versions it does not tabulate: {}",
            ignored.values().sum::<u64>(),
            list.join(", ")
        ));
    }
}
