//! Notes: plain sentences under the table for what a careful engineer would spot, each naming
//! the points involved. Every note is one small function over the points, so each can be
//! tested on a fixture built to trigger it and on a clean one where it must stay silent.
//! The words and thresholds they share are in [`words`]; what a note is and reads, in [`note`].
//!
//! A new note is a function `fn(&Facts) -> Vec<String>` in the file of its family and one line
//! in [`NOTES`] (README, "Adding a note").

pub mod distrusted;
pub mod energy;
pub mod host;
pub mod note;
pub mod pd;
pub mod roofline;
pub mod runs;
pub mod self_report;
pub mod server;
pub mod sweep;
pub mod words;

use note::{Facts, Note, Under};

/// A line of [`NOTES`].
const fn note(name: &'static str, under: Under, says: fn(&Facts) -> Vec<String>) -> Note {
    Note { name, under, says }
}

/// Every note, in the order they print under their table.
pub const NOTES: &[Note] = &[
    note("preflight", Under::Servers, host::preflight_warnings),
    note("best_groups", Under::Servers, host::best_groups),
    note("throughput_falls", Under::Points, sweep::throughput_falls),
    note("saturation_knee", Under::Points, sweep::saturation_knee),
    note(
        "shorter_output_slower",
        Under::Points,
        sweep::shorter_output_slower,
    ),
    note("ttft_tail", Under::Points, sweep::ttft_tail),
    note("errors_or_partial", Under::Points, sweep::errors_or_partial),
    note("cancelled", Under::Points, sweep::cancelled),
    note("tokens_per_chunk", Under::Points, sweep::tokens_per_chunk),
    note("client_limited", Under::Points, sweep::client_limited),
    note("lengths_missed", Under::Points, sweep::lengths_missed),
    note("too_few_requests", Under::Points, runs::too_few_requests),
    note(
        "spec_gain_collapses",
        Under::Points,
        runs::spec_gain_collapses,
    ),
    note("spec_gain_falls", Under::Points, runs::spec_gain_falls),
    note("across_runs", Under::Points, runs::across_runs),
    note(
        "spec_acceptance_falls",
        Under::Points,
        server::spec_acceptance_falls,
    ),
    note(
        "kv_full_preempting",
        Under::Points,
        server::kv_full_preempting,
    ),
    note(
        "gpu_idle_single_stream",
        Under::Points,
        server::gpu_idle_single_stream,
    ),
    note(
        "server_ttft_below_client",
        Under::Points,
        server::server_ttft_below_client,
    ),
    note(
        "token_counts_disagree",
        Under::Points,
        server::token_counts_disagree,
    ),
    note(
        "prefix_hits_unexpected",
        Under::Points,
        server::prefix_hits_unexpected,
    ),
    note(
        "metrics_went_silent",
        Under::Points,
        distrusted::metrics_went_silent,
    ),
    note(
        "samples_not_believed",
        Under::Points,
        distrusted::samples_not_believed,
    ),
    note(
        "ttft_mostly_outside",
        Under::Points,
        self_report::ttft_mostly_outside,
    ),
    note(
        "engine_queue_waits",
        Under::Points,
        self_report::engine_queue_waits,
    ),
    note("pd_ttft_by_role", Under::Points, pd::ttft_by_role),
    note(
        "server_ttft_over_client",
        Under::Points,
        self_report::server_ttft_over_client,
    ),
    note(
        "self_report_unavailable",
        Under::Points,
        self_report::unavailable,
    ),
    note("energy_source", Under::Points, energy::source_notes),
    note(
        "measured_bandwidth",
        Under::Points,
        roofline::measured_bandwidth,
    ),
    note("over_limit", Under::Points, roofline::over_limit_note),
    note("single_stream", Under::Points, roofline::single_stream_note),
    note("expert_parallel", Under::Points, roofline::expert_parallel),
    note("utilization", Under::Points, self_report::utilization),
    note("step_budget", Under::Points, roofline::step_budget),
    note("engine_step", Under::Points, roofline::engine_step),
    note(
        "decode_budget",
        Under::Collectives,
        roofline::decode_budget_without_points,
    ),
];

/// Every note's sentences, in list order.
pub fn all(facts: &Facts) -> Vec<String> {
    NOTES.iter().flat_map(|n| (n.says)(facts)).collect()
}
