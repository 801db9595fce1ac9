//! The wire formats srv-sim serves, as vLLM speaks them: request validation (with vLLM-style 400
//! bodies for anything the simulator does not support), and the exact bytes of every response and
//! SSE event. What is the same for every API is here (errors, the checks of sampling and lengths,
//! the per-request [`Formatter`]); each API is one file behind [`Wire`] (where its prompt and
//! output length are in the body, its events, its whole answer) and one line in
//! [`Endpoint::wire`]. Streaming events are built from per-request prefixes so a token costs a
//! few memcpys.

use crate::progress::Progress;
use crate::tokens;
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

mod chat;
mod completions;
mod image;
mod messages;
mod responses;
pub mod structured;

pub use chat::{messages_content, messages_text};

/// Which generation endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
    Responses,
    Messages,
}

impl Endpoint {
    /// Every generation endpoint, for the routes.
    pub const ALL: &[Endpoint] = &[
        Endpoint::Completions,
        Endpoint::Chat,
        Endpoint::Responses,
        Endpoint::Messages,
    ];

    /// The one place an endpoint meets its wire format.
    fn wire(self) -> &'static dyn Wire {
        match self {
            Endpoint::Completions => &completions::Completions,
            Endpoint::Chat => &chat::Chat,
            Endpoint::Responses => &responses::Responses,
            Endpoint::Messages => &messages::Messages,
        }
    }

    pub fn path(self) -> &'static str {
        self.wire().path()
    }

    /// The generation endpoint served at `path`.
    pub fn at(path: &str) -> Option<Endpoint> {
        Endpoint::ALL.iter().copied().find(|e| e.path() == path)
    }
}

/// One API's wire format: where a body keeps its prompt and output length, and the bytes of its
/// answers (a stream's events, or the whole answer).
trait Wire: Sync {
    /// The route, `/v1/...`.
    fn path(&self) -> &'static str;
    /// The prompt of a body (`Err`: missing or malformed, said as the API's field).
    fn prompt(&self, obj: &Map<String, Value>, limits: &Limits) -> Result<Prompt, ApiError>;
    /// The output tokens asked for, where the body says.
    fn max_tokens(&self, obj: &Map<String, Value>) -> Result<Option<u32>, ApiError>;
    /// The answer's id for request `n`, and as trtllm-serve names its request `n`.
    fn id(&self, n: u64) -> String;
    fn trtllm_id(&self, n: u64) -> String;
    /// The fixed start of this request's events ([`Formatter::head`]).
    fn head(&self, id: &str, created: u64, model_json: &str) -> String;
    /// The events before the first token.
    fn start(&self, f: &Formatter, out: &mut Vec<u8>);
    /// One event carrying `text` (one or more tokens); `generated` counts all so far.
    fn token(&self, f: &Formatter, out: &mut Vec<u8>, text: &[&str], last: bool, generated: u32);
    /// The events after the last token.
    fn finish(&self, f: &Formatter, out: &mut Vec<u8>, completion: u32, progress: &Progress);
    /// The whole non-streaming answer.
    fn whole(&self, f: &Formatter, text: &str, completion: u32) -> Value;
}

/// An error answered as JSON, shaped like vLLM's: `{"error":{"message","type","param","code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
}

impl ApiError {
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
        }
    }

    pub fn new(status: u16, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self.status {
            400 => "BadRequestError",
            404 => "NotFoundError",
            405 => "MethodNotAllowed",
            413 => "RequestTooLarge",
            500 => "InternalServerError",
            503 => "ServiceUnavailableError",
            _ => "Error",
        }
    }

    pub fn body(&self) -> String {
        json!({"error": {"message": self.message, "type": self.kind(), "param": null, "code": self.status}})
            .to_string()
    }
}

/// A validated generation request.
#[derive(Debug, Clone)]
pub struct GenRequest {
    pub endpoint: Endpoint,
    pub prompt_tokens: u32,
    /// The prompt's prefix-cache block hashes ([`crate::prefix`]).
    pub blocks: Vec<u64>,
    /// Seeds the generated words together with the server's `--seed` (and the request's `seed`).
    pub text_seed: u64,
    pub max_tokens: u32,
    pub stream: bool,
    pub include_usage: bool,
    pub continuous_usage: bool,
    /// vLLM's disaggregated-serving hand-off (`kv_transfer_params`), as sent (pd.rs).
    pub kv_transfer_params: Option<Value>,
    /// The LoRA adapter its `model` named (an index into [`Limits::adapters`]).
    pub adapter: Option<u32>,
    /// `response_format` json_schema (or json_object): the answer is JSON made from it.
    pub json_schema: Option<Value>,
}

/// What the server knows when validating.
#[derive(Debug, Clone)]
pub struct Limits {
    pub served_model: String,
    /// `--lora`: adapters served under their own names beside `served_model`.
    pub adapters: Vec<String>,
    pub max_model_len: u32,
    pub default_max_tokens: u32,
    /// The model card's `image_token_px` (None: a model that takes no images).
    pub image_token_px: Option<u32>,
}

pub(crate) fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

pub(crate) fn as_u32(obj: &Map<String, Value>, name: &str) -> Result<Option<u32>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                ApiError::bad_request(format!("'{name}' must be a non-negative integer, got {v}"))
            }),
    }
}

fn as_bool(obj: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    match field(obj, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(v) => Err(ApiError::bad_request(format!(
            "'{name}' must be a boolean, got {v}"
        ))),
    }
}

fn as_number(obj: &Map<String, Value>, name: &str) -> Result<Option<f64>, ApiError> {
    match field(obj, name) {
        None => Ok(None),
        Some(v) => v
            .as_f64()
            .map(Some)
            .ok_or_else(|| ApiError::bad_request(format!("'{name}' must be a number, got {v}"))),
    }
}

/// Parses and validates a JSON body as a request object.
pub fn parse_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(ApiError::bad_request(format!(
            "the request body must be a JSON object, got {}",
            type_name(&other)
        ))),
        Err(e) => Err(ApiError::bad_request(format!("invalid JSON body: {e}"))),
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What the server takes from a prompt: its token count, a stable hash of it, its prefix-cache
/// block hashes.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub tokens: u32,
    pub hash: u64,
    pub blocks: Vec<u64>,
}

/// A prompt given as text (chat messages' joined text, ...): `salt` keeps the hashes of one
/// text sent through different APIs apart.
pub(crate) fn text_prompt(text: &str, salt: u64) -> Prompt {
    Prompt {
        tokens: tokens::count(text),
        hash: tokens::fnv1a(text.as_bytes()) ^ salt,
        blocks: crate::prefix::text_blocks(text),
    }
}

/// Validates a generation body.
pub fn parse_generate(
    endpoint: Endpoint,
    body: &[u8],
    limits: &Limits,
) -> Result<GenRequest, ApiError> {
    let obj = parse_object(body)?;
    let mut adapter = None;
    if let Some(model) = field(&obj, "model") {
        let Some(name) = model.as_str() else {
            return Err(ApiError::bad_request("'model' must be a string"));
        };
        adapter = crate::lora::named(name, &limits.served_model, &limits.adapters)
            .ok_or_else(|| ApiError::new(404, format!("The model `{name}` does not exist.")))?;
    }
    let wire = endpoint.wire();
    let prompt = wire.prompt(&obj, limits)?;
    let prompt_tokens = prompt.tokens;
    // Features a real server has and the simulator does not: refuse rather than pretend.
    if as_u32(&obj, "n")?.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request("n > 1 is not supported by srv-sim"));
    }
    if as_u32(&obj, "best_of")?.is_some_and(|n| n != 1) {
        return Err(ApiError::bad_request(
            "best_of > 1 is not supported by srv-sim",
        ));
    }
    if as_bool(&obj, "echo")? {
        return Err(ApiError::bad_request("echo is not supported by srv-sim"));
    }
    let logprobs = match field(&obj, "logprobs") {
        None | Some(Value::Bool(false)) => false,
        Some(_) => true,
    };
    if logprobs || field(&obj, "top_logprobs").is_some() || field(&obj, "prompt_logprobs").is_some()
    {
        return Err(ApiError::bad_request(
            "logprobs are not supported by srv-sim",
        ));
    }
    for unsupported in [
        "tools",
        "functions",
        "suffix",
        "guided_json",
        "guided_regex",
        "guided_choice",
    ] {
        if field(&obj, unsupported).is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty())) {
            return Err(ApiError::bad_request(format!(
                "'{unsupported}' is not supported by srv-sim"
            )));
        }
    }
    let json_schema = structured::requested(&obj)?;
    match field(&obj, "stop") {
        None => {}
        Some(Value::Array(a)) if a.is_empty() => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(_) => {
            return Err(ApiError::bad_request(
                "'stop' sequences are not supported by srv-sim (it never stops early; use max_tokens)",
            ));
        }
    }
    if let Some(t) = as_number(&obj, "temperature")?
        && t < 0.0
    {
        return Err(ApiError::bad_request(format!(
            "temperature must be non-negative, got {t}"
        )));
    }
    for sampling in [
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
    ] {
        as_number(&obj, sampling)?;
    }
    as_bool(&obj, "ignore_eos")?;
    let request_seed = match field(&obj, "seed") {
        None => 0,
        Some(v) => v
            .as_i64()
            .map(|s| s as u64)
            .ok_or_else(|| ApiError::bad_request(format!("'seed' must be an integer, got {v}")))?,
    };

    let max_tokens = wire.max_tokens(&obj)?;
    let room = limits.max_model_len.saturating_sub(prompt_tokens);
    let max_tokens = max_tokens.unwrap_or(limits.default_max_tokens.min(room.max(1)));
    if max_tokens == 0 {
        return Err(ApiError::bad_request(
            "max_tokens must be at least 1, got 0",
        ));
    }
    let min_tokens = as_u32(&obj, "min_tokens")?.unwrap_or(0);
    if min_tokens > max_tokens {
        return Err(ApiError::bad_request(format!(
            "min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})"
        )));
    }
    let total = u64::from(prompt_tokens) + u64::from(max_tokens);
    if total > u64::from(limits.max_model_len) {
        return Err(ApiError::bad_request(format!(
            "This model's maximum context length is {} tokens. However, you requested {total} tokens \
             ({prompt_tokens} in the messages, {max_tokens} in the completion). Please reduce the length \
             of the messages or completion.",
            limits.max_model_len
        )));
    }

    let kv_transfer_params = match field(&obj, "kv_transfer_params") {
        Some(p) if !p.is_object() => {
            return Err(ApiError::bad_request(format!(
                "'kv_transfer_params' must be an object, got {p}"
            )));
        }
        p => p.cloned(),
    };
    let stream = as_bool(&obj, "stream")?;
    let (mut include_usage, mut continuous_usage) = (false, false);
    if let Some(opts) = field(&obj, "stream_options") {
        if !stream {
            return Err(ApiError::bad_request(
                "Stream options can only be defined when `stream=True`.",
            ));
        }
        let Some(opts) = opts.as_object() else {
            return Err(ApiError::bad_request("'stream_options' must be an object"));
        };
        include_usage = as_bool(opts, "include_usage")?;
        continuous_usage = as_bool(opts, "continuous_usage_stats")?;
    }
    Ok(GenRequest {
        endpoint,
        prompt_tokens,
        blocks: prompt.blocks,
        text_seed: tokens::splitmix64(prompt.hash ^ request_seed.rotate_left(17)),
        max_tokens,
        stream,
        include_usage,
        continuous_usage: include_usage && continuous_usage,
        kv_transfer_params,
        adapter,
        json_schema,
    })
}

/// Formats one request's responses. `id`, `created` and the model name are fixed per request,
/// so every event is `head + text + tail`.
#[derive(Debug, Clone)]
pub struct Formatter {
    endpoint: Endpoint,
    pub(crate) id: String,
    pub(crate) created: u64,
    /// The served model name as a JSON string literal (quotes included).
    pub(crate) model_json: String,
    pub(crate) prompt_tokens: u32,
    /// Cached prompt tokens, where usage reports them (`--enable-prompt-tokens-details`).
    pub(crate) cached_tokens: Option<u32>,
    pub(crate) continuous_usage: bool,
    /// A stream ends with a usage event (`stream_options.include_usage`).
    pub(crate) include_usage: bool,
    /// The final usage chunk and the whole answer carry vLLM's per-request `metrics`.
    pub per_request_metrics: bool,
    /// A decode server's wait for the request's KV cache (pd.rs): reported in `metrics`.
    pub kv_transfer_ms: Option<f64>,
    /// A prefill server's hand-off to the decode side: the whole answer's `kv_transfer_params`.
    pub kv_transfer_params: Option<Value>,
    /// Events written so far, for APIs that number them (the Responses API).
    seq: std::cell::Cell<u64>,
    /// What every event of this request starts with (the wire's: for OpenAI's streams
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[`).
    pub(crate) head: String,
}

impl Formatter {
    /// The answer's `id`.
    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn new(
        endpoint: Endpoint,
        request_no: u64,
        created: u64,
        model_json: &str,
        req: &GenRequest,
    ) -> Formatter {
        let wire = endpoint.wire();
        let id = wire.id(request_no);
        Formatter {
            endpoint,
            head: wire.head(&id, created, model_json),
            id,
            created,
            model_json: model_json.to_string(),
            prompt_tokens: req.prompt_tokens,
            cached_tokens: None,
            continuous_usage: req.continuous_usage,
            include_usage: req.include_usage,
            per_request_metrics: false,
            kv_transfer_ms: None,
            kv_transfer_params: None,
            seq: std::cell::Cell::new(0),
        }
    }

    /// The answer's id as trtllm-serve gives its request `n` (`cmpl-N`, `chatcmpl-N`), so a
    /// client finds the request in `/perf_metrics` (`--self-report-as trtllm`).
    pub fn with_trtllm_id(mut self, n: u64) -> Formatter {
        let wire = self.endpoint.wire();
        self.id = wire.trtllm_id(n);
        self.head = wire.head(&self.id, self.created, &self.model_json);
        self
    }

    /// Usage reports `cached` prompt tokens from now on, as vLLM with
    /// `--enable-prompt-tokens-details` does.
    pub fn report_cached(&mut self, cached: u32) {
        self.cached_tokens = Some(cached);
    }

    /// The next event's number (from 0).
    pub(crate) fn next_seq(&self) -> u64 {
        let n = self.seq.get();
        self.seq.set(n + 1);
        n
    }

    /// OpenAI's `"usage":{...}` of `completion` tokens so far.
    pub(crate) fn usage(&self, out: &mut Vec<u8>, completion: u32) {
        let p = self.prompt_tokens;
        let _ = write!(
            Bytes(out),
            "\"usage\":{{\"prompt_tokens\":{p},\"total_tokens\":{},\"completion_tokens\":{completion}",
            u64::from(p) + u64::from(completion)
        );
        if let Some(c) = self.cached_tokens {
            let _ = write!(
                Bytes(out),
                ",\"prompt_tokens_details\":{{\"cached_tokens\":{c}}}"
            );
        }
        out.push(b'}');
    }

    /// OpenAI's usage object of a whole answer.
    pub(crate) fn usage_json(&self, completion: u32) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": u64::from(self.prompt_tokens) + u64::from(completion),
            "completion_tokens": completion,
            "prompt_tokens_details": self.cached_tokens.map(|c| json!({"cached_tokens": c})),
        })
    }

    /// The events before the first token (the chat stream's role chunk, ...).
    pub fn start(&self, out: &mut Vec<u8>) {
        self.endpoint.wire().start(self, out);
    }

    /// One event carrying `text` (one or more generated tokens); `generated` counts all so far.
    pub fn token_chunk(&self, out: &mut Vec<u8>, text: &[&str], last: bool, generated: u32) {
        self.endpoint.wire().token(self, out, text, last, generated);
    }

    /// The events after the last token (usage where asked for, the end of the stream).
    pub fn finish(&self, out: &mut Vec<u8>, completion: u32, progress: &Progress) {
        self.endpoint.wire().finish(self, out, completion, progress);
    }

    /// vLLM's per-request `metrics`, where asked for.
    pub(crate) fn metrics(&self, progress: &Progress, completion: u32) -> Option<Value> {
        self.per_request_metrics.then(|| {
            let mut m = crate::selfreport::metrics_json(&progress.read_times(), completion);
            if let Some(kv) = self.kv_transfer_ms {
                m["kv_transfer_ms"] = kv.into();
            }
            m
        })
    }

    /// The model name as JSON.
    pub(crate) fn model(&self) -> Value {
        serde_json::from_str(&self.model_json).unwrap_or(Value::Null)
    }

    /// The whole non-streaming response.
    pub fn full_response(&self, text: &str, completion: u32, progress: &Progress) -> String {
        let mut v = self.endpoint.wire().whole(self, text, completion);
        if let Some(m) = self.metrics(progress, completion) {
            v["metrics"] = m;
        }
        if let Some(p) = &self.kv_transfer_params {
            v["kv_transfer_params"] = p.clone();
        }
        v.to_string()
    }
}

/// The end of an OpenAI stream (completions, chat): the usage chunk where asked for, `[DONE]`.
pub(crate) fn openai_finish(
    f: &Formatter,
    out: &mut Vec<u8>,
    completion: u32,
    progress: &Progress,
) {
    if f.include_usage {
        out.extend_from_slice(f.head.as_bytes());
        out.extend_from_slice(b"],");
        f.usage(out, completion);
        if let Some(m) = f.metrics(progress, completion) {
            out.extend_from_slice(b",\"metrics\":");
            out.extend_from_slice(m.to_string().as_bytes());
        }
        out.extend_from_slice(b"}\n\n");
    }
    out.extend_from_slice(b"data: [DONE]\n\n");
}

/// The start of every event of an OpenAI stream.
pub(crate) fn openai_head(id: &str, object: &str, created: u64, model_json: &str) -> String {
    format!(
        "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model_json},\"choices\":["
    )
}

/// One OpenAI chunk: `choice` (the first choice's fields up to its text), `text`, then
/// `after` (the rest of the choice), `finish_reason` and usage where continuous.
pub(crate) fn openai_chunk(
    f: &Formatter,
    out: &mut Vec<u8>,
    choice: &[u8],
    text: &[&str],
    after: &[u8],
    last: bool,
    generated: u32,
) {
    out.extend_from_slice(f.head.as_bytes());
    out.extend_from_slice(choice);
    for t in text {
        out.extend_from_slice(t.as_bytes());
    }
    out.extend_from_slice(after);
    out.extend_from_slice(br#","logprobs":null,"finish_reason":"#);
    let finish: &[u8] = if last { br#""length""# } else { b"null" };
    out.extend_from_slice(finish);
    out.extend_from_slice(br#","stop_reason":null}]"#);
    if f.continuous_usage {
        out.push(b',');
        f.usage(out, generated);
    }
    out.extend_from_slice(b"}\n\n");
}

/// `fmt::Write` into a byte vector (formatting integers without a temporary String).
pub(crate) struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
