use super::{Extra, Labels, current_version};
use serde::{Deserialize, Serialize};

/// Which sweep point a request or summary belongs to: the load and workload parameters that
/// vary across a `loadgen` matrix. Absent parameters were not part of that run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct PointKey {
    /// Position of the point in the sweep, from 0.
    pub index: u32,
    /// Closed-loop concurrency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Open-loop request rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_rps: Option<f64>,
    /// Target prompt length in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_len: Option<u32>,
    /// Requested output tokens per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Repetition of the same point (`--repeat`), from 0.
    #[serde(default)]
    pub repeat: u32,
    /// Trace replay: how much faster than recorded the trace is played (`--trace-speed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_speed: Option<f64>,
    /// Images in each request (`loadgen --images`): points with and without them are
    /// different measurements (their modality).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<u32>,
}

impl PointKey {
    /// The parameters without the position: points with equal params are the same measurement.
    pub fn same_params(&self, other: &PointKey) -> bool {
        self.concurrency == other.concurrency
            && self.rate_rps == other.rate_rps
            && self.input_len == other.input_len
            && self.max_tokens == other.max_tokens
            && self.trace_speed == other.trace_speed
            && self.images == other.images
    }
}

/// What went wrong with a request, as a class that can be counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// Connection refused or failed before a request was sent.
    Connect,
    /// Connection reset or closed mid-request.
    Reset,
    /// The TLS handshake failed (an https server whose certificate is not trusted, say).
    Tls,
    /// No complete answer within `--timeout`.
    Timeout,
    /// HTTP 4xx from the server.
    #[serde(rename = "http_4xx", alias = "http4xx")]
    Http4xx,
    /// HTTP 5xx from the server.
    #[serde(rename = "http_5xx", alias = "http5xx")]
    Http5xx,
    /// The stream was not valid SSE / JSON, or the server sent an error event mid-stream.
    Protocol,
    /// Stopped by the user (Ctrl-C), or still running when `--grace` ended after the server
    /// went down. Written `cancelled` before loadgen's `--cancel-rate` (whose requests are not
    /// failures: [`RequestRecord::cancelled_after_ms`]): that spelling reads as this.
    #[serde(alias = "cancelled")]
    Interrupted,
    /// A class written by a newer tool.
    #[serde(other)]
    Other,
}

impl ErrorClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorClass::Connect => "connect",
            ErrorClass::Reset => "reset",
            ErrorClass::Tls => "tls",
            ErrorClass::Timeout => "timeout",
            ErrorClass::Http4xx => "http_4xx",
            ErrorClass::Http5xx => "http_5xx",
            ErrorClass::Protocol => "protocol",
            ErrorClass::Interrupted => "interrupted",
            ErrorClass::Other => "other",
        }
    }
}

impl std::fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestError {
    pub class: ErrorClass,
    /// One line: what happened, with a short excerpt of the server's body where there was one.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
}

/// Where a request's `output_tokens` came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// The server's `usage` (final chunk, or per chunk with `continuous_usage_stats`).
    Usage,
    /// Counted from content chunks (one token per chunk) because the server gave no usage.
    Chunks,
}

/// Declares [`RequestRecord`] and, from the same field list, its lean twin for the fast read
/// path ([`RequestRecord::parse_lean`]): the same fields and serde attributes, without the
/// flattened `extra` (serde buffers every field of a struct with a flattened map, which costs
/// more than the rest of reading a line).
macro_rules! request_record {
    (
        $(#[$meta:meta])*
        pub struct RequestRecord {
            $( $(#[$field_meta:meta])* pub $field:ident : $ty:ty, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        pub struct RequestRecord {
            $( $(#[$field_meta])* pub $field: $ty, )*
            #[serde(flatten)]
            pub extra: Extra,
        }
        record_kind!(RequestRecord, "request", Request);

        /// [`RequestRecord`] without `extra`: fields outside the schema are skipped.
        #[derive(Deserialize)]
        struct LeanRequest {
            $( $(#[$field_meta])* $field: $ty, )*
        }

        impl From<LeanRequest> for RequestRecord {
            fn from(lean: LeanRequest) -> Self {
                RequestRecord {
                    $( $field: lean.$field, )*
                    extra: Extra::new(),
                }
            }
        }
    };
}

request_record! {
/// One finished request, written by `loadgen` as it finishes. All times are milliseconds,
/// measured on a monotonic clock from the request's *intended* send time (so open-loop
/// latency includes the time a request waited for its slot: no coordinated omission).
pub struct RequestRecord {
    #[serde(default = "current_version")]
    pub v: u32,
    pub ts: String,
    #[serde(default)]
    pub labels: Labels,
    pub point: PointKey,
    /// Request number within the point, from 0, in send order.
    pub id: u64,
    /// Intended send time, from the start of the point.
    pub intended_ms: f64,
    /// Actual minus intended send time.
    pub send_lag_ms: f64,
    /// Send to the first chunk that carries content (role-only and empty chunks do not count).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    /// Send to the first chunk carrying reasoning content, where the model reasons.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_reasoning_ms: Option<f64>,
    /// Send to the first chunk of the answer itself, content or a tool call, reasoning not
    /// counted (AIPerf's TTFO, guidellm's TTFOT): where the model reasoned (else `ttft_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttfo_ms: Option<f64>,
    /// Send to the end of the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
    /// (e2e - ttft) / (output_tokens - 1): time per output token after the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot_ms: Option<f64>,
    /// Gaps between consecutive content chunks (one fewer than `chunks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub itl_ms: Vec<f64>,
    /// Content chunks received.
    #[serde(default)]
    pub chunks: u32,
    #[serde(default)]
    pub output_tokens: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_source: Option<TokenSource>,
    /// Tokens counted from chunks, when it disagrees with `usage` (else absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens_chunks: Option<u32>,
    /// Of `output_tokens`, those that were reasoning, where the model reasoned: the output
    /// tokens times the share of content chunks that carried reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u32>,
    /// The prompt length the workload aimed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_target: Option<u32>,
    /// Requested output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Embeddings (`loadgen --api embeddings`): the inputs the answer embedded (its vectors).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<u32>,
    /// Images the request carried (`loadgen --images`): its `prompt_tokens` are the server's
    /// count of its text and images together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<u32>,
    /// Absent on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RequestError>,
    /// Cancelled on purpose (`loadgen --cancel-rate`): the client disconnected this long after
    /// the request left, as planned. Not a failure (`error` absent): what it received before is
    /// in the other fields (`ttft_ms` if a token came, `e2e_ms` to the disconnect, tokens
    /// counted from chunks). Absent on every other request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancelled_after_ms: Option<f64>,
    /// The LoRA adapter the request named as its `model` (`loadgen --lora`): the point's
    /// figures are broken down by it (a summary's `by_adapter`). Absent without `--lora`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adapter: Option<String>,
    /// Conversations: the session (conversation) within the point, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<u64>,
    /// Conversations: the turn within its session, from 1 (its prompt holds turns 1..turn-1
    /// and their replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<u32>,
    /// Prompt tokens the server served from its prefix cache, where it says
    /// (`usage.prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u32>,
    /// The engine's own timing of this request, where its answer carried it (vLLM's
    /// `metrics`, llama-server's `timings`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_timing: Option<super::ServerTiming>,
    /// The answer's `id` as the server gave it (`chatcmpl-42`): the name the engine's own
    /// reports know the request by (TensorRT-LLM's `/perf_metrics`), cut to 128 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_id: Option<String>,
    /// `loadgen --record-text` (and `--eval`): the reply's text, one string per content chunk
    /// as it came (a whole answer: one string); joined, the text ([`super::joined_text`]).
    /// Bounded as loadgen bounds every reply it keeps (16 MiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_pieces: Option<Vec<String>>,
    /// `loadgen --eval`: the question this request asked and its answer's verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval: Option<super::EvalVerdict>,
    /// `loadgen --response-format`: whether the answer was JSON valid for the schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub json: Option<super::JsonVerdict>,
}
}

/// A year in milliseconds: no time a request record carries is longer (as `cli::MAX_DURATION`
/// bounds every duration given to the tools).
const MAX_RECORD_MS: f64 = 365.0 * 24.0 * 3600.0 * 1000.0;

impl RequestRecord {
    /// The record of request `id` of a point, sent `send_lag_ms` after its intended time
    /// (`intended_ms` from the point's start), before anything came back: what loadgen and
    /// srv-sim's `--predict` each fill in with what they saw.
    pub fn started(
        labels: Labels,
        point: PointKey,
        id: u64,
        intended_ms: f64,
        send_lag_ms: f64,
    ) -> RequestRecord {
        RequestRecord {
            v: super::SCHEMA_VERSION,
            ts: super::now_ts(),
            labels,
            point,
            id,
            intended_ms,
            send_lag_ms,
            ttft_ms: None,
            ttft_reasoning_ms: None,
            ttfo_ms: None,
            e2e_ms: None,
            tpot_ms: None,
            itl_ms: Vec::new(),
            chunks: 0,
            output_tokens: 0,
            output_tokens_source: None,
            output_tokens_chunks: None,
            reasoning_tokens: None,
            prompt_tokens: None,
            prompt_tokens_target: None,
            max_tokens: None,
            inputs: None,
            images: None,
            error: None,
            cancelled_after_ms: None,
            adapter: None,
            session: None,
            turn: None,
            cached_tokens: None,
            server_timing: None,
            response_id: None,
            output_pieces: None,
            eval: None,
            json: None,
            extra: Default::default(),
        }
    }

    /// Completed: neither failed nor cancelled on purpose.
    pub fn is_ok(&self) -> bool {
        self.error.is_none() && self.cancelled_after_ms.is_none()
    }

    /// Cancelled on purpose by the client (`--cancel-rate`), not a failure.
    pub fn is_cancelled(&self) -> bool {
        self.error.is_none() && self.cancelled_after_ms.is_some()
    }

    /// Why the record's times cannot be real (a latency below zero, not a number, or over a
    /// year): a reader takes such a record as a malformed line instead of folding it into a
    /// histogram. None when every time is plausible.
    pub fn implausible_time(&self) -> Option<String> {
        let latencies = [
            ("ttft_ms", self.ttft_ms),
            ("ttft_reasoning_ms", self.ttft_reasoning_ms),
            ("ttfo_ms", self.ttfo_ms),
            ("e2e_ms", self.e2e_ms),
            ("tpot_ms", self.tpot_ms),
            ("cancelled_after_ms", self.cancelled_after_ms),
        ];
        let itl = self.itl_ms.iter().map(|v| ("itl_ms", Some(*v)));
        for (field, value) in latencies.into_iter().chain(itl) {
            if let Some(v) = value
                && !(0.0..=MAX_RECORD_MS).contains(&v)
            {
                return Some(format!("{field} {v:?} is not a latency (0 ms to a year)"));
            }
        }
        // Offsets from the point's start may be slightly negative (a closed loop's head start).
        for (field, v) in [
            ("intended_ms", self.intended_ms),
            ("send_lag_ms", self.send_lag_ms),
        ] {
            if !(-MAX_RECORD_MS..=MAX_RECORD_MS).contains(&v) {
                return Some(format!("{field} {v:?} is not a time within a year"));
            }
        }
        None
    }

    /// The fast read path for a `request` line (no newline), for readers of millions of them
    /// (summarize): the same record [`Record::parse`](super::Record::parse) gives, except that
    /// fields outside the schema are skipped, not kept in `extra`. Only lines as loadgen writes
    /// them (`kind` first) are read; None for anything else or anything it cannot read, which
    /// `Record::parse` then handles and, where it is malformed, names the problem.
    pub fn parse_lean(line: &[u8]) -> Option<RequestRecord> {
        // The comma closes the kind's string: `request_x` is another kind.
        if !line.starts_with(br#"{"kind":"request","#) {
            return None;
        }
        serde_json::from_slice::<LeanRequest>(line)
            .ok()
            .map(RequestRecord::from)
    }
}
