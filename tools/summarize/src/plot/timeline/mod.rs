//! The timeline (`--plot-kind timeline`): every request of one point (or of a window of its
//! wall time) as one lane, in send order: its wait for its slot (open loop), the send, its time
//! in the engine's queue and its prefill (where the engine timed them per request:
//! `server_timing`), the first token, each later chunk, the end; failures and cancelled
//! requests marked. Below, the requests in flight over the same wall time, and the engine's
//! steps per second (its step log's, where the run has one). Seconds from the point's start,
//! on loadgen's monotonic clock; the engine's queue and prefill are durations on its own
//! clock, laid from the send.
//!
//! The lanes are data first ([`Timeline`]): the picture draws them (`draw`), and `--plot -`
//! prints them as a table, so what the picture shows can be read and checked.

pub mod draw;

use crate::input::kept::Kept;
use crate::input::param::Params;
use crate::input::{AccKey, Inputs};
use crate::render::{Cell, Column, Table};
use servbench::cli;
use servbench::record::{EngineSteps, ErrorClass, RequestRecord};

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Outcome {
    Ok,
    Failed(ErrorClass),
    /// Abandoned by the client on purpose (`loadgen --cancel-rate`), or stopped by the user
    /// (Ctrl-C, class `interrupted`) before it finished.
    Cancelled,
}

impl Outcome {
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed(class) => class.as_str(),
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// One request's lane. Times in seconds from the point's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Lane {
    pub id: u64,
    /// When it was due (open loop: its slot; closed loop: when a slot freed).
    pub intended_s: f64,
    pub sent_s: f64,
    /// In the engine's queue, then its prefill (start, end), where the engine timed them.
    pub queued: Option<(f64, f64)>,
    pub prefill: Option<(f64, f64)>,
    /// The first chunk with content.
    pub first_token_s: Option<f64>,
    /// Every content chunk's arrival, the first's included.
    pub chunks_s: Vec<f64>,
    /// The end of the stream, or when it failed.
    pub end_s: f64,
    pub outcome: Outcome,
}

impl Lane {
    pub fn of(r: &RequestRecord) -> Lane {
        let at = |ms: f64| (r.intended_ms + ms) / 1e3;
        let sent_s = at(r.send_lag_ms.max(0.0));
        let first_token_s = r.ttft_ms.map(at);
        let mut chunks_s = Vec::with_capacity(r.itl_ms.len() + 1);
        if let Some(first) = r.ttft_ms {
            let mut t = first;
            chunks_s.push(at(t));
            for gap in &r.itl_ms {
                t += gap;
                chunks_s.push(at(t));
            }
        }
        let timing = r.server_timing.as_ref();
        let queue_ms = timing.and_then(|t| t.queue_ms);
        let queued = queue_ms.map(|q| (sent_s, sent_s + q / 1e3));
        let prefill = timing.and_then(|t| t.prefill_ms).map(|p| {
            let from = sent_s + queue_ms.unwrap_or(0.0) / 1e3;
            (from, from + p / 1e3)
        });
        let outcome = match &r.error {
            None if r.is_cancelled() => Outcome::Cancelled,
            None => Outcome::Ok,
            Some(e) if e.class == ErrorClass::Interrupted => Outcome::Cancelled,
            Some(e) => Outcome::Failed(e.class),
        };
        Lane {
            id: r.id,
            intended_s: at(0.0),
            sent_s,
            queued,
            prefill,
            first_token_s,
            chunks_s,
            end_s: at(r.e2e_ms.unwrap_or(r.send_lag_ms.max(0.0))),
            outcome,
        }
    }
}

/// What the timeline draws for one point.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// `point 3 (C=8)`, and the labels that tell its run apart.
    pub title: String,
    pub lanes: Vec<Lane>,
    /// The wall time drawn: the window asked for, else the lanes' span.
    pub span_s: (f64, f64),
    /// The point's engine steps (its summary's), where its server logged them.
    pub steps: Option<EngineSteps>,
    /// The engine's steps in each second of its log's clock (start, end, steps/s over the
    /// part of the second inside the point), where the run placed them.
    pub per_second: Vec<(f64, f64, f64)>,
    /// Said under the picture and on stderr: requests left out, what is absent.
    pub notes: Vec<String>,
}

/// Requests in flight over time: a step line through (time, count) corners.
pub fn in_flight(lanes: &[Lane]) -> Vec<(f64, f64)> {
    let mut events: Vec<(f64, i64)> = lanes
        .iter()
        .flat_map(|l| [(l.sent_s, 1), (l.end_s.max(l.sent_s), -1)])
        .collect();
    // At one instant, an end before a send: a closed loop's next request takes the slot.
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = Vec::with_capacity(events.len() * 2);
    let mut n = 0i64;
    for (t, d) in events {
        out.push((t, n as f64));
        n += d;
        out.push((t, n as f64));
    }
    out
}

impl Timeline {
    /// The timeline of the point `inputs.kept` chose; `None` when no request of it was read.
    pub fn of(inputs: &Inputs) -> Result<Timeline, String> {
        let Some(kept) = inputs.kept.as_ref() else {
            return Err("no requests were kept for a timeline".into());
        };
        let Some((index, repeat, labels)) = kept.chosen.clone() else {
            return Err(no_point(kept));
        };
        let mut lanes: Vec<Lane> = kept.requests.iter().map(Lane::of).collect();
        // Request ids count in send order.
        lanes.sort_by_key(|l| l.id);
        let summary = kept.requests.first().and_then(|r| {
            let key = AccKey {
                labels: r.labels.clone(),
                params: Params::of(&r.point),
                repeat,
            };
            inputs.points.get(&key)?.first_summary.as_ref()
        });
        let point = kept.requests.first().map(|r| &r.point);
        let load = point.map_or(String::new(), |p| match (p.concurrency, p.rate_rps) {
            (Some(c), _) => format!(" (C={c})"),
            (None, Some(r)) => format!(" (rate={r}/s)"),
            _ => String::new(),
        });
        let run: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let run = if run.is_empty() {
            String::new()
        } else {
            format!(" {}", run.join(" "))
        };
        let title = format!("point {index}{load}{run}");
        let mut notes = Vec::new();
        if kept.over_cap > 0 {
            notes.push(format!(
                "{} of the point's requests in the window are not drawn (at most {} lanes): choose a narrower --window",
                kept.over_cap,
                crate::input::kept::MAX_KEPT
            ));
        }
        if kept.other_runs > 0 {
            notes.push(format!(
                "{} requests of point {index} from another run (other labels or repeat) are not drawn: give that run's file alone",
                kept.other_runs
            ));
        }
        if lanes
            .iter()
            .all(|l| l.queued.is_none() && l.prefill.is_none())
            && !lanes.is_empty()
        {
            notes.push(
                "no engine timing per request (queue, prefill): the wait to the first token is drawn as one (vLLM --enable-per-request-metrics, srv-launch --self-report)".into(),
            );
        }
        let steps = summary.and_then(|s| s.engine_steps.clone());
        let per_second = steps.as_ref().map_or(Vec::new(), steps_per_second);
        match &steps {
            None => notes.push(
                "no engine step log for this point: no steps per second drawn (srv-launch --self-report logs them)".into(),
            ),
            Some(_) if per_second.is_empty() => notes.push(
                "the step log's lines were not placed on the point's time (no clock, or a loadgen before `per_second`): only the point's mean steps/s is drawn".into(),
            ),
            Some(_) => {}
        }
        let span_s = match kept.select.window_s {
            Some(w) => w,
            None => lanes.iter().fold((0.0f64, 0.0f64), |(a, b), l| {
                (a.min(l.intended_s), b.max(l.end_s))
            }),
        };
        if lanes.is_empty() {
            return Err(format!(
                "point {index} has no request in the window {:.3}..{:.3} s ({} outside it)",
                span_s.0, span_s.1, kept.outside
            ));
        }
        Ok(Timeline {
            title,
            lanes,
            span_s,
            steps,
            per_second,
            notes,
        })
    }

    /// The lanes as a table (`--plot -`): what the picture draws, one row per request.
    pub fn table(&self) -> Table {
        let col = |name: &str, header: &str| Column {
            name: name.into(),
            header: header.into(),
        };
        let mut t = Table::new(
            &format!("timeline of {}", self.title),
            vec![
                col("id", "id"),
                col("intended_s", "due s"),
                col("sent_s", "sent s"),
                col("queued_ms", "queued ms"),
                col("prefill_ms", "prefill ms"),
                col("first_token_s", "1st tok s"),
                col("chunks", "chunks"),
                col("end_s", "end s"),
                col("outcome", "outcome"),
            ],
        );
        let secs = |v: f64| Cell::Fixed {
            value: v,
            decimals: 3,
        };
        let ms = |span: Option<(f64, f64)>| match span {
            Some((a, b)) => Cell::Fixed {
                value: (b - a) * 1e3,
                decimals: 1,
            },
            None => Cell::Empty,
        };
        for l in &self.lanes {
            t.push(
                vec![
                    Cell::int(l.id),
                    secs(l.intended_s),
                    secs(l.sent_s),
                    ms(l.queued),
                    ms(l.prefill),
                    l.first_token_s.map_or(Cell::Empty, secs),
                    Cell::int(l.chunks_s.len()),
                    secs(l.end_s),
                    Cell::Text(l.outcome.name().into()),
                ],
                0,
            );
        }
        if let Some(s) = &self.steps {
            t.notes.push(format!(
                "engine steps: {:.1} steps/s over the point's busy window of {:.2} s ({} step log)",
                s.steps_per_s, s.busy_s, s.source
            ));
        }
        t.notes.extend(self.notes.iter().cloned());
        t
    }

    /// The engine's steps per second as a table (`--plot -`), where the run placed them.
    pub fn steps_table(&self) -> Option<Table> {
        if self.per_second.is_empty() {
            return None;
        }
        let col = |name: &str, header: &str| Column {
            name: name.into(),
            header: header.into(),
        };
        let mut t = Table::new(
            &format!("engine steps per second of {}", self.title),
            vec![
                col("from_s", "from s"),
                col("to_s", "to s"),
                col("steps_per_s", "steps/s"),
            ],
        );
        let fixed = |value: f64, decimals: usize| Cell::Fixed { value, decimals };
        for &(a, b, rate) in &self.per_second {
            t.push(vec![fixed(a, 3), fixed(b, 3), fixed(rate, 1)], 0);
        }
        Some(t)
    }
}

/// A second counts when at least this much of it is inside the point.
const MIN_SHARE_S: f64 = 0.2;

/// Each second of the engine's log (start, end, steps/s over the part of it inside the point's
/// window): the first and last seconds are partly outside it.
fn steps_per_second(e: &EngineSteps) -> Vec<(f64, f64, f64)> {
    let Some(ps) = &e.per_second else {
        return Vec::new();
    };
    ps.steps
        .iter()
        .enumerate()
        .filter_map(|(i, &n)| {
            let from = ps.first_s + i as f64;
            let inside = (from + 1.0).min(e.window_s) - from.max(0.0);
            (inside >= MIN_SHARE_S).then(|| (from, from + 1.0, f64::from(n) / inside.min(1.0)))
        })
        .collect()
}

/// Why there is no point to draw.
fn no_point(kept: &Kept) -> String {
    let have: Vec<String> = kept.indices.iter().map(u32::to_string).collect();
    match kept.select.point {
        Some(p) if have.is_empty() => {
            format!("--point {p}: the input holds no request records (loadgen writes them)")
        }
        Some(p) => format!(
            "--point {p}: no request of that point in the input (its points: {})",
            have.join(", ")
        ),
        None => {
            "the input holds no request records (loadgen writes them): a timeline draws requests"
                .into()
        }
    }
}

/// Writes the timeline of the chosen point to `path` (`.svg` or `.png`).
pub fn write_file(path: &std::path::Path, timeline: &Timeline) -> anyhow::Result<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let result = match ext.as_deref() {
        Some("svg") => draw::svg(path, timeline),
        Some("png") => draw::png(path, timeline),
        _ => {
            return Err(cli::usage(format!(
                "--plot {}: name a .svg or .png file, or - for the lanes as a table",
                path.display()
            )));
        }
    };
    result.map_err(|e| cli::usage(format!("--plot {}: {e}", path.display())))
}
