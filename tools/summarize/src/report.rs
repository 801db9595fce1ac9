//! The tables summarize prints, one per kind of record present: load points (from `request`
//! and `summary` records), collectives (`coll`, nccl-tests style), servers and kills.

use crate::efficiency::{self, Roofline};
use crate::metrics::Metric;
use crate::param::{Param, is_load_key};
use crate::points::{Keys, Point};
use crate::steps::PointStep;
use crate::table::{Cell, Column, Table};
use servbench::presets::{Hardware, StepBasis, StepParts, StepVerdict};
use servbench::record::{
    CollBackend, CollRecord, CollRunRecord, DecodeRecord, KillRecord, RampRecord, ServerRecord,
    label,
};

/// What a column of the points table shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Col {
    /// A label or a parameter (`conc`, `rate`, `in`, `out`).
    Key(String),
    Metric(Metric),
}

impl Col {
    pub fn parse(name: &str) -> Result<Col, String> {
        let name = name.trim();
        if Param::parse(name).is_some() {
            return Ok(Col::Key(name.to_string()));
        }
        if let Some(label) = name.strip_prefix("label:") {
            return Ok(Col::Key(label.to_string()));
        }
        Metric::parse(name)
            .map(Col::Metric)
            .ok_or_else(|| format!("unknown column '{name}': use {}", Col::names()))
    }

    /// Every column `--cols` takes, the one list `--help` and its error print.
    pub fn names() -> String {
        format!(
            "{}, label:NAME, {}",
            Param::keys(),
            Metric::names_in_short()
        )
    }

    fn column(&self) -> Column {
        match self {
            Col::Key(k) => Column {
                name: k.clone(),
                header: Param::parse(k).map_or_else(|| k.clone(), |p| p.header().to_string()),
            },
            Col::Metric(m) => Column {
                name: m.name(),
                header: m.header(),
            },
        }
    }
}

/// The metrics shown by default, in order (columns with no value anywhere are dropped).
/// The server's figures come last and only where loadgen read them.
pub const DEFAULT_METRICS: [Metric; 26] = [
    Metric::REQ_S,
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
    Metric::Scalar(crate::metrics::Scalar::EngineTflops),
    Metric::Scalar(crate::metrics::Scalar::EngineGbps),
    // The engine's own steps (vLLM --enable-logging-iteration-details), from its log.
    Metric::Scalar(crate::metrics::Scalar::EngineStepMs),
    Metric::Scalar(crate::metrics::Scalar::EngineStepsS),
];

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
    if let Some(roof) = roof {
        let in_order: Vec<&Point> = order.iter().map(|(_, p)| *p).collect();
        efficiency::add_columns(&mut table, &in_order, &keys, roof);
    }
    table
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

/// nccl-tests' table: size, count, type, time, algbw, busbw, #wrong, per op/backend/ranks.
pub fn coll_table(coll: &[CollRecord], runs: &[CollRunRecord], hw: Option<&Hardware>) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "collectives",
        vec![
            col("op", "op"),
            col("backend", "backend"),
            col("ranks", "ranks"),
            col("mode", "mode"),
            col("bytes", "size B"),
            col("count", "count"),
            col("dtype", "type"),
            col("time_us", "time us"),
            col("algbw_gbps", "algbw GB/s"),
            col("busbw_gbps", "busbw GB/s"),
            col("wrong", "#wrong"),
        ],
    );
    let mut sorted: Vec<&CollRecord> = coll.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.op, &a.backend, a.ranks, &a.mode, a.bytes)
            .cmp(&(&b.op, &b.backend, b.ranks, &b.mode, b.bytes))
    });
    let mut group = 0;
    let mut prev = None;
    for c in &sorted {
        let k = (&c.op, &c.backend, c.ranks, &c.mode);
        if prev.is_some_and(|p| p != k) {
            group += 1;
        }
        prev = Some(k);
        table.push(
            vec![
                Cell::Text(c.op.to_string()),
                Cell::Text(c.backend.to_string()),
                Cell::int(c.ranks),
                Cell::Text(c.mode.to_string()),
                Cell::int(c.bytes),
                Cell::int(c.count),
                Cell::Text(c.dtype.to_string()),
                // nccl-tests reports the average time; our record's mean is that figure.
                Cell::num(Some(c.time_us.mean)),
                Cell::num(Some(c.algbw_gbps)),
                Cell::num(Some(c.busbw_gbps)),
                Cell::int(c.wrong),
            ],
            group,
        );
    }
    if let Some(hw) = hw {
        efficiency::add_link_share(&mut table, &sorted, hw);
    }
    for r in runs {
        table.notes.push(format!(
            "{} {} over {} ranks: average bus bandwidth {} GB/s over {} sizes, {}",
            r.op,
            r.backend,
            r.ranks,
            crate::table::human(r.avg_busbw_gbps),
            r.sizes,
            if r.wrong == 0 {
                "every result checked OK".to_string()
            } else {
                format!("{} wrong elements: FAILED", r.wrong)
            }
        ));
    }
    table
}

pub fn server_table(servers: &[ServerRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "servers",
        vec![
            col("engine", "engine"),
            col("model", "model"),
            col("host", "host"),
            col("pid", "pid"),
            col("url", "url"),
            col("ready_s", "ready s"),
            col("startup", "startup phases"),
        ],
    );
    // The same server read from several inputs (a launch record teed into each file, or
    // passed on by srv-kill) is one server: listed once.
    let mut seen: Vec<(&str, &str, u32, &str)> = Vec::new();
    for s in servers {
        let id = (s.engine.as_str(), s.host.as_str(), s.pid, s.url.as_str());
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        table.push(
            vec![
                Cell::Text(s.engine.to_string()),
                // srv-launch names the model in its labels when the engine has no model field.
                s.model
                    .clone()
                    .or_else(|| s.labels.get(label::MODEL).cloned())
                    .map_or(Cell::Empty, Cell::Text),
                Cell::Text(s.host.clone()),
                Cell::int(s.pid),
                Cell::Text(s.url.clone()),
                Cell::num(Some(s.ready_s)),
                s.startup
                    .as_ref()
                    .and_then(startup_phases)
                    .map_or(Cell::Empty, Cell::Text),
            ],
            0,
        );
        if s.startup.as_ref().is_some_and(|st| st.log_cut) {
            table.notes.push(format!(
                "{} pid {} on {}: its log outgrew srv-launch's read cap during startup, so later phases are missing",
                s.engine, s.pid, s.host
            ));
        }
    }
    table
}

/// A startup's phases in one cell: the engine's own duration where it printed one (`weights
/// 12.1 s`), else when the line was seen after launch (`kv_cache @47.2 s`).
fn startup_phases(startup: &servbench::record::Startup) -> Option<String> {
    let parts: Vec<String> = startup
        .phases
        .iter()
        .map(|p| match p.took_s {
            Some(took) => format!("{} {} s", p.name, crate::table::human(took)),
            None => format!("{} @{} s", p.name, crate::table::human(p.at_s)),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}

pub fn kill_table(kills: &[KillRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "kills",
        vec![
            col("target", "target"),
            col("host", "host"),
            col("matched", "matched"),
            col("signals", "signals"),
            col("survivors", "survivors"),
            col("port_free", "port free"),
            col("elapsed_s", "elapsed s"),
            col("status", "status"),
        ],
    );
    for k in kills {
        table.push(
            vec![
                Cell::Text(k.target.clone()),
                Cell::Text(k.host.clone()),
                Cell::int(k.matched.len()),
                Cell::Text(if k.signals.is_empty() {
                    "-".into()
                } else {
                    k.signals.join(",")
                }),
                Cell::int(k.survivors.len()),
                k.port_free.map_or(Cell::Empty, |f| {
                    Cell::Text(if f { "yes" } else { "no" }.into())
                }),
                Cell::num(Some(k.elapsed_s)),
                Cell::Text(match (&k.error, k.ok) {
                    (Some(e), _) => format!("FAILED: {e}"),
                    (None, true) => "ok".into(),
                    (None, false) => "FAILED".into(),
                }),
            ],
            0,
        );
    }
    table
}

/// collbench's decode question, one row per batch: the allreduce each decode step pays, times
/// the allreduces per step, against the roofline step of the model on the hardware. The verdict
/// under each row is the one the load point of that model, TP and batch got (from its measured
/// step), else the modelled step's, labelled as such.
pub fn decode_table(decode: &[DecodeRecord], steps: &[PointStep]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "decode allreduce budget",
        vec![
            col("model", "model"),
            col("hardware", "hardware"),
            col("backend", "backend"),
            col("tp", "TP"),
            col("batch", "batch"),
            col("allreduce_bytes", "allreduce B"),
            col("allreduces_per_step", "per step"),
            col("allreduce_us_mean", "allreduce mean us"),
            col("comm_ms_per_token", "comm ms/token"),
            col("step_roofline_ms", "roofline step ms"),
            col("comm_pct", "comm %"),
            col("wrong", "#wrong"),
        ],
    );
    for d in decode {
        table.push(
            vec![
                Cell::Text(d.model.clone()),
                Cell::Text(d.hardware.clone()),
                Cell::Text(d.backend.to_string()),
                Cell::int(d.tp),
                Cell::int(d.batch),
                Cell::int(d.allreduce_bytes),
                Cell::int(d.allreduces_per_step),
                Cell::num(Some(d.allreduce_us.mean)),
                Cell::num(Some(d.comm_us_per_token * 1e-3)),
                Cell::num(Some(d.step_roofline_us * 1e-3)),
                Cell::pct(Some(d.comm_fraction * 100.0)),
                Cell::int(d.wrong),
            ],
            0,
        );
        table.notes.push(decode_note(d, steps));
    }
    // comm ms/token is allreduces_per_step x the mean (collbench decode's figure, and what
    // summarize's decode budget reads): a step pays the sum of its allreduces.
    table.context.push((
        "statistic".into(),
        "mean allreduce time (a step pays their sum)".into(),
    ));
    if decode.iter().any(|d| d.backend == CollBackend::Tcp) {
        table.notes.push(
            "the tcp backend measured these allreduces: processes over TCP on this box, which says nothing about NCCL on GPUs; run collbench decode --backend nccl on the GPU host for the real budget".into(),
        );
    }
    table
}

/// loadgen's `--ramp` outcomes: what stopped each ramp and the best level it found.
pub fn ramp_table(ramps: &[RampRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "ramps",
        vec![
            col("in", "in tok"),
            col("out", "out tok"),
            col("levels", "levels"),
            col("last_conc", "last C"),
            col("stopped_by", "stopped by"),
            col("best_conc", "best C"),
            col("best_tok_s", "best out tok/s"),
        ],
    );
    let opt_int = |v: Option<u32>| v.map_or(Cell::Empty, Cell::int);
    for r in ramps {
        table.push(
            vec![
                opt_int(r.point.input_len),
                opt_int(r.point.max_tokens),
                Cell::int(r.levels.len()),
                opt_int(r.levels.last().map(|l| l.concurrency)),
                Cell::Text(r.stopped_by.to_string()),
                opt_int(r.best_concurrency),
                Cell::num(r.best_output_tok_s),
            ],
            0,
        );
        table.notes.push(format!("ramp stopped: {}", r.reason));
    }
    table
}

/// The verdict of one decode record's batch: the matching point's, or the modelled step's.
fn decode_note(d: &DecodeRecord, steps: &[PointStep]) -> String {
    let comm_ms = d.comm_us_per_token / 1000.0;
    if let Some(step) = steps
        .iter()
        .find(|s| s.model == d.model && s.tp == d.tp && s.batch == d.batch)
    {
        return format!(
            "batch {}: allreduce {} ms per step, judged at {}: {}",
            d.batch,
            crate::table::human(comm_ms),
            step.name,
            step.verdict.text()
        );
    }
    let verdict = StepVerdict::judge(StepParts {
        step_ms: (d.comm_us_per_token + d.step_roofline_us) / 1000.0,
        basis: StepBasis::Modelled,
        allreduce_ms: comm_ms,
        compute: None,
    });
    format!(
        "batch {}: allreduce {} ms per step: {}",
        d.batch,
        crate::table::human(comm_ms),
        verdict.text()
    )
}
