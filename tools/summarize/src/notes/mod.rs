//! Notes: plain sentences under the table for what a careful engineer would spot, each naming
//! the points involved. Every note is one small function over the points, so each can be
//! tested on a fixture built to trigger it and on a clean one where it must stay silent.
//! The words and thresholds they share are in [`words`].

pub mod distrusted;
pub mod energy;
pub mod host;
pub mod roofline;
pub mod runs;
pub mod self_report;
pub mod server;
pub mod sweep;
pub mod words;

use crate::input::points::{Keys, Point};
use servbench::record::RampRecord;
use sweep::{
    client_limited, errors_or_partial, lengths_missed, saturation_knee, saturation_knee_by,
    shorter_output_slower, throughput_falls, tokens_per_chunk, ttft_tail,
};

/// Every note, in a fixed order.
pub fn all(points: &[Point]) -> Vec<String> {
    all_with_ramps(points, &[])
}

/// Every note, the knee of a ramp's levels judged by the ramp's own rule (its `min_gain`), so
/// the note names the ramp's best C.
pub fn all_with_ramps(points: &[Point], ramps: &[RampRecord]) -> Vec<String> {
    let keys = Keys::of(points);
    let mut out = throughput_falls(points, &keys);
    out.extend(saturation_knee_by(points, &keys, ramps));
    for f in [
        shorter_output_slower,
        ttft_tail,
        errors_or_partial,
        tokens_per_chunk,
        client_limited,
        lengths_missed,
        runs::too_few_requests,
        runs::spec_gain_collapses,
        runs::across_runs,
        server::spec_acceptance_falls,
        server::kv_full_preempting,
        server::gpu_idle_single_stream,
        server::server_ttft_below_client,
        server::token_counts_disagree,
        server::prefix_hits_unexpected,
        distrusted::metrics_went_silent,
        distrusted::samples_not_believed,
        self_report::ttft_mostly_outside,
        self_report::engine_queue_waits,
        self_report::server_ttft_over_client,
    ] {
        out.extend(f(points, &keys));
    }
    out
}

type NoteFn = fn(&[Point], &Keys) -> Vec<String>;

/// The notes by name, for tests and documentation.
pub fn by_name() -> Vec<(&'static str, NoteFn)> {
    vec![
        ("throughput_falls", throughput_falls),
        ("saturation_knee", saturation_knee),
        ("shorter_output_slower", shorter_output_slower),
        ("ttft_tail", ttft_tail),
        ("errors_or_partial", errors_or_partial),
        ("tokens_per_chunk", tokens_per_chunk),
        ("client_limited", client_limited),
        ("lengths_missed", lengths_missed),
        ("too_few_requests", runs::too_few_requests),
        ("spec_gain_collapses", runs::spec_gain_collapses),
        ("across_runs", runs::across_runs),
        ("spec_acceptance_falls", server::spec_acceptance_falls),
        ("kv_full_preempting", server::kv_full_preempting),
        ("gpu_idle_single_stream", server::gpu_idle_single_stream),
        ("server_ttft_below_client", server::server_ttft_below_client),
        ("token_counts_disagree", server::token_counts_disagree),
        ("prefix_hits_unexpected", server::prefix_hits_unexpected),
        ("metrics_went_silent", distrusted::metrics_went_silent),
        ("samples_not_believed", distrusted::samples_not_believed),
        ("ttft_mostly_outside", self_report::ttft_mostly_outside),
        ("engine_queue_waits", self_report::engine_queue_waits),
        (
            "server_ttft_over_client",
            self_report::server_ttft_over_client,
        ),
    ]
}
