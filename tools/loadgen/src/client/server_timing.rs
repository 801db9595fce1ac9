//! The engine's own timing of a request, read from its answer: the stream's chunk that carries
//! vLLM's `metrics` (its final usage chunk) or llama-server's `timings`, or the whole answer.
//! The shape and its checks are `servbench::record::ServerTiming`; a figure that is not a time
//! is left out and said once per run on stderr (the request itself is fine).

use servbench::record::ServerTiming;
use std::sync::atomic::{AtomicBool, Ordering};

static NOTED: AtomicBool = AtomicBool::new(false);

/// From a whole answer.
pub fn of_answer(v: &serde_json::Value) -> Option<ServerTiming> {
    let (timing, bad) = ServerTiming::from_answer(v)?;
    if !bad.is_empty() && !NOTED.swap(true, Ordering::Relaxed) {
        servbench::cli::warn(format!(
            "the server's per-request timing has figures that are not times, left out: {} (said once)",
            servbench::jsonl::excerpt(&bad.join(", "), 200)
        ));
    }
    Some(timing)
}

/// From one SSE `data:` payload the scanner saw carry `metrics` or `timings`.
pub fn of_chunk(payload: &[u8]) -> Option<ServerTiming> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    of_answer(&v)
}

/// The most of an answer's `id` kept.
const MAX_ID_CHARS: usize = 128;

/// A whole answer's `id`, where it is a string.
pub fn answer_id(v: &serde_json::Value) -> Option<String> {
    Some(v.get("id")?.as_str()?.chars().take(MAX_ID_CHARS).collect())
}

/// The `id` of one SSE `data:` payload (a stream's first chunk): only that field is kept.
pub fn answer_id_of_chunk(payload: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id<'a> {
        #[serde(borrow)]
        id: Option<std::borrow::Cow<'a, str>>,
    }
    let chunk: Id = serde_json::from_slice(payload).ok()?;
    Some(chunk.id?.chars().take(MAX_ID_CHARS).collect())
}
