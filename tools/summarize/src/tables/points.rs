//! The load-points table (from `request` and `summary` records): its columns (`--cols`), the
//! rows in group and load order, and with `--roofline` each row's limits and shares.

use crate::input::metrics::{DistName, Metric, Scalar, Stat};
use crate::input::param::{Param, is_load_key};
use crate::input::points::{Keys, Point, point_name};
use crate::notes::note::{Facts, Under};
use crate::render::{Cell, Column, Table, human};
use crate::roofline::{Roofline, row_share, stream};
use crate::tables::view::{Col, TEXT_WIDTH, View};
use servbench::presets::{DEFAULT_STEP_OVERHEAD_US, Layout};

/// The default columns a roofline's columns may push out, least needed first.
const DROPPABLE: [&str; 14] = [
    "lag_p99",
    "tok_s_per_gpu",
    "j_per_tok",
    "itl_p99",
    "req_s",
    "ttft_p99",
    "itl_p50",
    "gpu_util",
    "prefix_hit",
    "preemptions",
    "kv_max",
    "spec_accept",
    "mem_limit_tok_s",
    "step_limit_tok_s",
];

/// The load points, with their notes; nothing without points.
pub fn section(facts: &Facts, view: &View) -> Vec<Table> {
    if facts.points.is_empty() {
        return Vec::new();
    }
    let roof = facts.roofline.as_ref();
    let mut t = points_table(
        facts.points,
        view.cols,
        view.by,
        roof,
        view.usd_per_gpu_hour,
    );
    if roof.is_some() && view.cols.is_none() && view.fit {
        let names: Vec<String> = DROPPABLE.iter().map(|s| s.to_string()).collect();
        t.fit_width(TEXT_WIDTH, &names);
    }
    t.notes.extend(view.notes_under(Under::Points, facts));
    vec![t]
}

/// The metrics shown by default, in order (columns with no value anywhere are dropped).
/// The server's figures come last and only where loadgen read them.
pub const DEFAULT_METRICS: [Metric; 27] = [
    Metric::REQ_S,
    Metric::INPUTS_S,
    Metric::TOK_S,
    Metric::TTFT_P50,
    Metric::TTFT_P99,
    // The engine's own TTFT split, where it reported per-request timing.
    Metric::ENG_QUEUE,
    Metric::ENG_PREFILL,
    Metric::TTFT_OUTSIDE,
    // Only where a model reasoned (empty columns are dropped).
    Metric::TTFO_P50,
    Metric::REASONING,
    Metric::ITL_P50,
    Metric::ITL_P99,
    Metric::TPOT_P50,
    Metric::TPC,
    Metric::ERRORS,
    Metric::LAG_P99,
    Metric::KV_MAX,
    Metric::PREEMPTIONS,
    Metric::SPEC_ACCEPT,
    Metric::PREFIX_HIT,
    Metric::GPU_UTIL,
    Metric::TOK_S_PER_GPU,
    Metric::J_PER_TOK,
    // The engine's own FLOP and byte counters (vLLM --enable-mfu-metrics), per GPU.
    Metric::Scalar(Scalar::EngineTflops),
    Metric::Scalar(Scalar::EngineGbps),
    // The engine's own steps (vLLM --enable-logging-iteration-details), from its log.
    Metric::Scalar(Scalar::EngineStepMs),
    Metric::Scalar(Scalar::EngineStepsS),
];

/// Beside inputs/s (embeddings): the requests' latency.
const EMBED_LATENCY: [Metric; 2] = [Metric::E2E_P50, Metric::Dist(DistName::E2e, Stat::P99)];

/// The group keys of the points: `by` when given, else every varying key except the load
/// (`conc`/`rate`), which is what a group's rows (and a plot's x axis) step through.
pub fn group_keys(keys: &Keys, by: &[String]) -> Vec<String> {
    if !by.is_empty() {
        return by.to_vec();
    }
    keys.varying
        .iter()
        .filter(|k| !is_load_key(k))
        .cloned()
        .collect()
}

/// Points in table order: by group, then by load; with the group number of each.
pub fn ordered<'a>(points: &'a [Point], groups: &[String]) -> Vec<(usize, &'a Point)> {
    let mut sorted: Vec<&Point> = points.iter().collect();
    let gkey =
        |p: &Point| -> Vec<Option<String>> { groups.iter().map(|g| p.key_value(g)).collect() };
    sorted.sort_by(|a, b| {
        let ka = (gkey(a), a.params.sort_key(), &a.labels);
        let kb = (gkey(b), b.params.sort_key(), &b.labels);
        // Group values that are numbers sort as numbers.
        cmp_keys(&ka.0, &kb.0)
            .then_with(|| ka.1.cmp(&kb.1))
            .then_with(|| ka.2.cmp(kb.2))
    });
    let mut out = Vec::new();
    let mut group = 0;
    let mut prev: Option<Vec<Option<String>>> = None;
    for p in sorted {
        let k = gkey(p);
        if prev.as_ref().is_some_and(|pk| *pk != k) {
            group += 1;
        }
        prev = Some(k);
        out.push((group, p));
    }
    out
}

fn cmp_keys(a: &[Option<String>], b: &[Option<String>]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Some(x), Some(y)) => match (x.parse::<f64>(), y.parse::<f64>()) {
                (Ok(fx), Ok(fy)) => fx.total_cmp(&fy),
                _ => x.cmp(y),
            },
            _ => x.cmp(y),
        };
        if o.is_ne() {
            return o;
        }
    }
    std::cmp::Ordering::Equal
}

/// The points table: varying keys first (group keys, then the load), then metrics.
pub fn points_table(
    points: &[Point],
    cols: Option<&[Col]>,
    by: &[String],
    roof: Option<&Roofline>,
    usd_per_gpu_hour: Option<f64>,
) -> Table {
    let keys = Keys::of(points);
    let groups = group_keys(&keys, by);
    let chosen: Vec<Col> = match cols {
        Some(c) => c.to_vec(),
        None => {
            let mut c: Vec<Col> = groups.iter().map(|g| Col::Key(g.clone())).collect();
            for k in &keys.varying {
                if !groups.contains(k) {
                    c.push(Col::Key(k.clone()));
                }
            }
            // The load is shown even when constant: it is what a row is about.
            for load in Param::LOADS.map(Param::key) {
                let present = points.iter().any(|p| p.key_value(load).is_some());
                if present && !c.contains(&Col::Key(load.to_string())) {
                    c.push(Col::Key(load.to_string()));
                }
            }
            for m in DEFAULT_METRICS {
                if points.iter().any(|p| p.mean(m).is_some()) {
                    c.push(Col::Metric(m));
                    // Embeddings have no tokens to time: their latency is the whole answer's.
                    if m == Metric::INPUTS_S {
                        c.extend(EMBED_LATENCY.map(Col::Metric));
                    }
                }
            }
            c
        }
    };
    let mut table = Table::new("load points", chosen.iter().map(Col::column).collect());
    let shown: Vec<&str> = chosen
        .iter()
        .filter_map(|c| match c {
            Col::Key(k) => Some(k.as_str()),
            Col::Metric(_) => None,
        })
        .collect();
    table.context = keys
        .constant
        .iter()
        .filter(|(k, _)| !shown.contains(&k.as_str()))
        .cloned()
        .collect();
    // loadgen names the model in its summaries; say it when no label does.
    let models: std::collections::BTreeSet<&str> =
        points.iter().filter_map(|p| p.model.as_deref()).collect();
    if models.len() == 1
        && !keys.varying.iter().any(|k| k == "model")
        && !table.context.iter().any(|(k, _)| k == "model")
    {
        let model = models.into_iter().next().unwrap_or_default();
        table.context.push(("model".into(), model.to_string()));
    }
    let repeats = points.iter().map(|p| p.repeats.len()).max().unwrap_or(0);
    if repeats > 1 {
        table.title = "load points (mean ± 95% CI over repeats)".into();
        table.context.push(("repeats".into(), repeats.to_string()));
    }
    let order = ordered(points, &groups);
    for &(group, p) in &order {
        let row = chosen
            .iter()
            .map(|c| match c {
                Col::Key(k) => match p.key_value(k) {
                    Some(v) => key_cell(k, v),
                    None => Cell::Empty,
                },
                Col::Metric(m) => match p.figure(*m) {
                    Some(f) if m.is_count() => Cell::int(f.mean as i64),
                    Some(f) if m.is_whole() && f.mean.fract() == 0.0 && f.half_width.is_none() => {
                        Cell::int(f.mean as i64)
                    }
                    Some(f) => Cell::Num {
                        value: f.mean,
                        ci: f.half_width,
                    },
                    None => Cell::Empty,
                },
            })
            .collect();
        table.push(row, group);
    }
    let in_order: Vec<&Point> = order.iter().map(|(_, p)| *p).collect();
    if let Some(roof) = roof {
        add_columns(&mut table, &in_order, &keys, roof);
    }
    if let Some(usd) = usd_per_gpu_hour {
        add_cost_column(&mut table, &in_order, usd);
    }
    table
}

/// Adds `$/M out tok` (`--gpu-hour-cost`): what a million output tokens cost at each row's
/// throughput per GPU, and says how it was counted.
fn add_cost_column(table: &mut Table, points_in_order: &[&Point], usd_per_gpu_hour: f64) {
    table.columns.push(Column {
        name: "usd_per_mtok".into(),
        header: "$/M out tok".into(),
    });
    for (row, p) in table.rows.iter_mut().zip(points_in_order) {
        row.push(Cell::num(p.usd_per_mtok(usd_per_gpu_hour)));
    }
    table.context.push((
        "cost".into(),
        format!(
            "${} per GPU-hour over each row's GPUs (those loadgen sampled, else tp x pp)",
            human(usd_per_gpu_hour)
        ),
    ));
}

/// A label or parameter value: parameters are numbers (integers but the rate).
pub fn key_cell(key: &str, value: String) -> Cell {
    if Param::parse(key).is_none() {
        return Cell::Text(value);
    }
    if let Ok(i) = value.parse::<i64>() {
        Cell::Int(i)
    } else if let Ok(x) = value.parse::<f64>() {
        Cell::num(Some(x))
    } else {
        Cell::Text(value)
    }
}

fn share_cell(p: &Point, rate: Option<f64>, limit: f64) -> Cell {
    match rate {
        None => Cell::Empty,
        Some(r) => match row_share(p, r, limit) {
            Some(s) => Cell::pct(Some(100.0 * s)),
            None => Cell::Text("over".into()),
        },
    }
}

/// Adds `tok/s/stream`, the memory-bound and modelled-step limits and the shares of each.
pub fn add_columns(table: &mut Table, points_in_order: &[&Point], keys: &Keys, roof: &Roofline) {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    table.columns.extend([
        col("stream_tok_s", "tok/s/stream"),
        col("mem_limit_tok_s", "mem limit"),
        col("mem_pct", "% of mem"),
        col("step_limit_tok_s", "step limit"),
        col("step_pct", "% of step"),
    ]);
    let mut layouts: Vec<Layout> = Vec::new();
    let mut comms: Vec<String> = Vec::new();
    let mut speculative: Vec<(String, &'static str)> = Vec::new();
    for (row, p) in table.rows.iter_mut().zip(points_in_order) {
        let rate = stream(p);
        let lim = roof.limits(p, keys);
        row.push(Cell::num(rate));
        row.push(Cell::num(Some(lim.memory_tok_s)));
        row.push(share_cell(p, rate, lim.memory_tok_s));
        row.push(Cell::num(Some(lim.step_tok_s)));
        row.push(share_cell(p, rate, lim.step_tok_s));
        if !layouts.contains(&lim.layout) {
            layouts.push(lim.layout);
        }
        let comm = lim.dep.comm.describe();
        if !comms.contains(&comm) {
            comms.push(comm);
        }
        if let Some(spec) = &lim.spec {
            speculative.push((point_name(p, &keys.varying), spec.from));
        }
    }
    let layouts: Vec<String> = layouts
        .iter()
        .map(|l| format!("TP={} PP={}", l.tp, l.pp))
        .collect();
    table.context.push((
        "roofline".into(),
        format!(
            "{} in {} (each row's tp/pp labels{}); step = max(memory, compute) + communication ({}) + {} ms overhead",
            roof.describe(),
            layouts.join(", "),
            match (roof.tp, roof.pp) {
                (None, None) => ", else 1".to_string(),
                (tp, pp) => format!(
                    ", else --tp {} --pp {}",
                    tp.unwrap_or(1),
                    pp.unwrap_or(1)
                ),
            },
            comms.join("; "),
            human(DEFAULT_STEP_OVERHEAD_US / 1000.0)
        ),
    ));
    if !speculative.is_empty() {
        let mut froms: Vec<&str> = speculative.iter().map(|(_, f)| *f).collect();
        froms.dedup();
        let rows: Vec<&str> = speculative.iter().map(|(n, _)| n.as_str()).collect();
        table.context.push((
            "speculative".into(),
            format!(
                "{}: limits are the verify step over the tokens it emits ({})",
                rows.join(", "),
                froms.join(", ")
            ),
        ));
    }
}
