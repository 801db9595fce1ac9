//! `--predict --trace FILE`: a trace's rows (shared's reader, loadgen's rows) sent in virtual
//! time at their offsets with their lengths, one point per `--trace-speed`, as loadgen replays
//! them against a server.

use super::load::{PointLoad, Prompts};
use super::{Engine, PredictArgs, write_point};
use crate::prefix::PrefixCache;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use servbench::load::{Budget, Load, trace};
use servbench::record::{Labels, PointKey};
use std::sync::Arc;

/// Reads the trace (an unreadable row: one error line naming `FILE:LINE`, exit 2), leaves out
/// the rows the engine's `--max-model-len` cannot hold (a warning, as loadgen's), and predicts
/// each speed, `--repeat` times.
pub(super) fn run(
    args: &PredictArgs,
    path: &str,
    engine: &Engine,
    labels: &Labels,
    mut cache: Option<&mut PrefixCache>,
    out: &mut RecordWriter<std::io::Stdout>,
) -> anyhow::Result<Exit> {
    let mut rows = trace::read(path, args.load.trace_block).map_err(cli::usage)?;
    for note in &rows.notes {
        cli::warn(note);
    }
    if let Some(note) = rows
        .keep_servable(path, engine.max_model_len)
        .map_err(cli::usage)?
    {
        cli::warn(note);
    }
    let rows = Arc::new(rows);
    let mut index = 0u32;
    for &speed in &args.load.trace_speed {
        for repeat in 0..args.load.repeat {
            let point = PointKey {
                index,
                repeat,
                trace_speed: Some(speed),
                ..PointKey::default()
            };
            index += 1;
            if args.load.flush_cache
                && let Some(c) = cache.as_deref_mut()
            {
                c.reset();
            }
            // loadgen's budget of a trace point: its rows, -n the first ones, --duration the
            // ones due within it at this speed.
            let due = rows.rows_within(args.load.duration.map(|d| d.as_secs_f64()), speed) as u64;
            let load = PointLoad {
                point,
                labels: labels.clone(),
                pace: Load::Trace {
                    speed,
                    max_concurrency: args.load.max_concurrency,
                },
                budget: Budget::Requests(args.load.requests.map_or(due, |n| n.min(due))),
                // Each row's own lengths are sent; these are not read.
                input_len: 0,
                max_tokens: 0,
                prompts: Prompts::Unique,
                turns: None,
                trace: Some(rows.clone()),
                seed: engine.seed,
                request_latency: engine.request_latency,
                front_end: engine.roofline.front_end,
                client_gap: engine.client_gap,
                max_model_len: engine.max_model_len,
                kv_cache_tokens: engine.kv_cache_tokens,
            };
            write_point(args, load, cache.as_deref_mut(), engine, out)?;
        }
    }
    Ok(Exit::Ok)
}
