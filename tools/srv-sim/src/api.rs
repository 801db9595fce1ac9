//! The OpenAI wire format as vLLM speaks it: request validation (with vLLM-style 400 bodies for
//! anything the simulator does not support), and the exact bytes of every response and SSE event.
//! Streaming chunks are built from per-request prefixes so a token costs a few memcpys.

use crate::progress::Progress;
use crate::{prefix, tokens};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

/// Which generation endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Completions,
    Chat,
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
}

/// What the server knows when validating.
#[derive(Debug, Clone)]
pub struct Limits {
    pub served_model: String,
    pub max_model_len: u32,
    pub default_max_tokens: u32,
}

fn field<'a>(obj: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    obj.get(name).filter(|v| !v.is_null())
}

fn as_u32(obj: &Map<String, Value>, name: &str) -> Result<Option<u32>, ApiError> {
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

fn type_name(v: &Value) -> &'static str {
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

/// A completions `prompt`: a string, token ids, or a one-element list of either (batches of
/// several prompts are not supported).
pub fn prompt_of(prompt: &Value) -> Result<Prompt, ApiError> {
    match prompt {
        Value::String(s) => Ok(Prompt {
            tokens: tokens::count(s),
            hash: tokens::fnv1a(s.as_bytes()),
            blocks: prefix::text_blocks(s),
        }),
        Value::Array(items) if !items.is_empty() && items.iter().all(Value::is_u64) => Ok(Prompt {
            tokens: items.len() as u32,
            hash: tokens::fnv1a(prompt.to_string().as_bytes()),
            blocks: prefix::block_hashes(items.iter().filter_map(Value::as_u64)),
        }),
        Value::Array(items) if items.len() == 1 => prompt_of(&items[0]),
        Value::Array(items) if items.len() > 1 => Err(ApiError::bad_request(
            "batched prompts (a list of several prompts) are not supported by srv-sim; send one prompt per request",
        )),
        other => Err(ApiError::bad_request(format!(
            "'prompt' must be a string or a list of token ids, got {}",
            type_name(other)
        ))),
    }
}

/// The text of chat `messages`: every message's text content, joined by newlines (roles and
/// templates add no tokens).
pub fn messages_text(messages: &Value) -> Result<String, ApiError> {
    let Some(list) = messages.as_array().filter(|l| !l.is_empty()) else {
        return Err(ApiError::bad_request(
            "'messages' must be a non-empty list of {\"role\", \"content\"} objects",
        ));
    };
    let mut text = String::new();
    for (i, m) in list.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(ApiError::bad_request(format!(
                "messages[{i}] must be an object"
            )));
        };
        if !obj.get("role").is_some_and(Value::is_string) {
            return Err(ApiError::bad_request(format!(
                "messages[{i}].role must be a string"
            )));
        }
        match obj.get("content") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                text.push_str(s);
                text.push('\n');
            }
            Some(Value::Array(parts)) => {
                for (j, part) in parts.iter().enumerate() {
                    match (
                        part.get("type").and_then(Value::as_str),
                        part.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text"), Some(t)) => {
                            text.push_str(t);
                            text.push('\n');
                        }
                        _ => {
                            return Err(ApiError::bad_request(format!(
                                "messages[{i}].content[{j}]: only {{\"type\":\"text\",\"text\":...}} parts are supported by srv-sim"
                            )));
                        }
                    }
                }
            }
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "messages[{i}].content must be a string or a list of text parts, got {}",
                    type_name(other)
                )));
            }
        }
    }
    Ok(text)
}

/// Chat `messages` as a prompt.
pub fn messages_of(messages: &Value) -> Result<Prompt, ApiError> {
    let text = messages_text(messages)?;
    Ok(Prompt {
        tokens: tokens::count(&text),
        hash: tokens::fnv1a(text.as_bytes()) ^ 0xC4A7,
        blocks: prefix::text_blocks(&text),
    })
}

/// Validates a completions or chat body.
pub fn parse_generate(
    endpoint: Endpoint,
    body: &[u8],
    limits: &Limits,
) -> Result<GenRequest, ApiError> {
    let obj = parse_object(body)?;
    if let Some(model) = field(&obj, "model") {
        let Some(name) = model.as_str() else {
            return Err(ApiError::bad_request("'model' must be a string"));
        };
        if name != limits.served_model {
            return Err(ApiError::new(
                404,
                format!("The model `{name}` does not exist."),
            ));
        }
    }
    let prompt = match endpoint {
        Endpoint::Completions => match field(&obj, "prompt") {
            Some(p) => prompt_of(p)?,
            None => return Err(ApiError::bad_request("'prompt' is required")),
        },
        Endpoint::Chat => match field(&obj, "messages") {
            Some(m) => messages_of(m)?,
            None => return Err(ApiError::bad_request("'messages' is required")),
        },
    };
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
    if let Some(rf) = field(&obj, "response_format")
        && rf.get("type").and_then(Value::as_str) != Some("text")
    {
        return Err(ApiError::bad_request(
            "response_format other than {\"type\":\"text\"} is not supported by srv-sim",
        ));
    }
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

    let max_tokens = match endpoint {
        Endpoint::Chat => match as_u32(&obj, "max_completion_tokens")? {
            Some(n) => Some(n),
            None => as_u32(&obj, "max_tokens")?,
        },
        Endpoint::Completions => as_u32(&obj, "max_tokens")?,
    };
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
    })
}

/// Formats one request's responses. `id`, `created` and the model name are fixed per request,
/// so every chunk is `prefix + text + suffix`.
#[derive(Debug, Clone)]
pub struct Formatter {
    endpoint: Endpoint,
    id: String,
    created: u64,
    /// The served model name as a JSON string literal (quotes included).
    model_json: String,
    prompt_tokens: u32,
    /// Cached prompt tokens, where usage reports them (`--enable-prompt-tokens-details`).
    cached_tokens: Option<u32>,
    continuous_usage: bool,
    /// The final usage chunk and the whole answer carry vLLM's per-request `metrics`.
    pub per_request_metrics: bool,
    /// A decode server's wait for the request's KV cache (pd.rs): reported in `metrics`.
    pub kv_transfer_ms: Option<f64>,
    /// A prefill server's hand-off to the decode side: the whole answer's `kv_transfer_params`.
    pub kv_transfer_params: Option<Value>,
    /// `data: {"id":..,"object":..,"created":..,"model":..,"choices":[{"index":0,` for this request.
    head: String,
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
        let (id, object) = match endpoint {
            Endpoint::Completions => (format!("cmpl-sim{request_no:016x}"), "text_completion"),
            Endpoint::Chat => (
                format!("chatcmpl-sim{request_no:016x}"),
                "chat.completion.chunk",
            ),
        };
        let head = format!(
            "data: {{\"id\":\"{id}\",\"object\":\"{object}\",\"created\":{created},\"model\":{model_json},\"choices\":["
        );
        Formatter {
            endpoint,
            id,
            created,
            model_json: model_json.to_string(),
            prompt_tokens: req.prompt_tokens,
            cached_tokens: None,
            continuous_usage: req.continuous_usage,
            per_request_metrics: false,
            kv_transfer_ms: None,
            kv_transfer_params: None,
            head,
        }
    }

    /// The answer's id as trtllm-serve gives its request `n` (`cmpl-N`, `chatcmpl-N`), so a
    /// client finds the request in `/perf_metrics` (`--self-report-as trtllm`).
    pub fn with_trtllm_id(mut self, n: u64) -> Formatter {
        let id = match self.endpoint {
            Endpoint::Completions => format!("cmpl-{n}"),
            Endpoint::Chat => format!("chatcmpl-{n}"),
        };
        let (old, new) = (
            format!("\"id\":\"{}\"", self.id),
            format!("\"id\":\"{id}\""),
        );
        self.head = self.head.replacen(&old, &new, 1);
        self.id = id;
        self
    }

    /// Usage reports `cached` prompt tokens from now on, as vLLM with
    /// `--enable-prompt-tokens-details` does.
    pub fn report_cached(&mut self, cached: u32) {
        self.cached_tokens = Some(cached);
    }

    fn usage(&self, out: &mut Vec<u8>, completion: u32) {
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

    /// The chat stream's first event: the assistant role and empty content.
    pub fn role_chunk(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head.as_bytes());
        out.extend_from_slice(
            br#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"stop_reason":null}]"#,
        );
        if self.continuous_usage {
            out.push(b',');
            self.usage(out, 0);
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// One event carrying `text` (one or more generated tokens); `generated` counts all so far.
    pub fn token_chunk(&self, out: &mut Vec<u8>, text: &[&str], last: bool, generated: u32) {
        out.extend_from_slice(self.head.as_bytes());
        match self.endpoint {
            Endpoint::Completions => out.extend_from_slice(br#"{"index":0,"text":""#),
            Endpoint::Chat => out.extend_from_slice(br#"{"index":0,"delta":{"content":""#),
        }
        for t in text {
            out.extend_from_slice(t.as_bytes());
        }
        let finish: &[u8] = if last { br#""length""# } else { b"null" };
        match self.endpoint {
            Endpoint::Completions => {
                out.extend_from_slice(br#"","logprobs":null,"finish_reason":"#);
                out.extend_from_slice(finish);
                out.extend_from_slice(br#","stop_reason":null}]"#);
            }
            Endpoint::Chat => {
                out.extend_from_slice(br#""},"logprobs":null,"finish_reason":"#);
                out.extend_from_slice(finish);
                out.extend_from_slice(br#","stop_reason":null}]"#);
            }
        }
        if self.continuous_usage {
            out.push(b',');
            self.usage(out, generated);
        }
        out.extend_from_slice(b"}\n\n");
    }

    /// The final usage event (`choices: []`), sent when `stream_options.include_usage` is set.
    pub fn usage_chunk(&self, out: &mut Vec<u8>, completion: u32, progress: &Progress) {
        out.extend_from_slice(self.head.as_bytes());
        out.extend_from_slice(b"],");
        self.usage(out, completion);
        if let Some(m) = self.metrics(progress, completion) {
            out.extend_from_slice(b",\"metrics\":");
            out.extend_from_slice(m.to_string().as_bytes());
        }
        out.extend_from_slice(b"}\n\n");
    }

    fn metrics(&self, progress: &Progress, completion: u32) -> Option<Value> {
        self.per_request_metrics.then(|| {
            let mut m = crate::selfreport::metrics_json(&progress.read_times(), completion);
            if let Some(kv) = self.kv_transfer_ms {
                m["kv_transfer_ms"] = kv.into();
            }
            m
        })
    }

    pub fn done(out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    /// The whole non-streaming response.
    pub fn full_response(&self, text: &str, completion: u32, progress: &Progress) -> String {
        let model: Value = serde_json::from_str(&self.model_json).unwrap_or(Value::Null);
        let usage = json!({
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": u64::from(self.prompt_tokens) + u64::from(completion),
            "completion_tokens": completion,
            "prompt_tokens_details": self.cached_tokens.map(|c| json!({"cached_tokens": c})),
        });
        let mut v = match self.endpoint {
            Endpoint::Completions => json!({
                "id": self.id, "object": "text_completion", "created": self.created, "model": model,
                "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "length",
                             "stop_reason": null, "prompt_logprobs": null}],
                "usage": usage,
            }),
            Endpoint::Chat => json!({
                "id": self.id, "object": "chat.completion", "created": self.created, "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
                             "logprobs": null, "finish_reason": "length", "stop_reason": null}],
                "usage": usage,
            }),
        };
        if let Some(m) = self.metrics(progress, completion) {
            v["metrics"] = m;
        }
        if let Some(p) = &self.kv_transfer_params {
            v["kv_transfer_params"] = p.clone();
        }
        v.to_string()
    }
}

/// `fmt::Write` into a byte vector (formatting integers without a temporary String).
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            served_model: "m".into(),
            max_model_len: 100,
            default_max_tokens: 16,
        }
    }

    #[test]
    fn chunks_are_valid_json_events() {
        let req = parse_generate(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"a b c"}],"max_tokens":3,"stream":true,
                "stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#,
            &limits(),
        )
        .unwrap();
        assert_eq!(req.prompt_tokens, 3);
        let f = Formatter::new(Endpoint::Chat, 7, 1, "\"m\"", &req);
        let mut out = Vec::new();
        f.role_chunk(&mut out);
        f.token_chunk(&mut out, &[" ka", " lo"], false, 2);
        f.token_chunk(&mut out, &[" mi"], true, 3);
        f.usage_chunk(&mut out, 3, &crate::progress::Progress::new(3));
        Formatter::done(&mut out);
        let text = String::from_utf8(out).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(events.len(), 5);
        for e in &events[..4] {
            let v: Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(v["model"], "m");
        }
        let last: Value = serde_json::from_str(&events[2][6..]).unwrap();
        assert_eq!(last["choices"][0]["finish_reason"], "length");
        assert_eq!(last["usage"]["completion_tokens"], 3);
        assert_eq!(events[4], "data: [DONE]");
    }

    #[test]
    fn rejects_what_it_cannot_do() {
        let l = limits();
        for bad in [
            &b"not json"[..],
            br#"[1]"#,
            br#"{"prompt":"a","n":2}"#,
            br#"{"prompt":5}"#,
            br#"{"prompt":"a","max_tokens":-1}"#,
            br#"{"prompt":"a","max_tokens":0}"#,
            br#"{"prompt":"a","max_tokens":5,"min_tokens":6}"#,
            br#"{"prompt":"a","max_tokens":100}"#,
            br#"{"prompt":"a","stream_options":{"include_usage":true}}"#,
            br#"{"prompt":"a","stop":["x"]}"#,
            br#"{"prompt":["a","b"]}"#,
            br#"{"prompt":"a","temperature":"hot"}"#,
        ] {
            let err = parse_generate(Endpoint::Completions, bad, &l).unwrap_err();
            assert_eq!(err.status, 400, "{}", String::from_utf8_lossy(bad));
        }
        let err = parse_generate(Endpoint::Completions, br#"{"prompt":"a","model":"x"}"#, &l)
            .unwrap_err();
        assert_eq!(err.status, 404);
        let ok = parse_generate(
            Endpoint::Completions,
            br#"{"prompt":[1,2,3],"ignore_eos":true,"temperature":0}"#,
            &l,
        )
        .unwrap();
        assert_eq!((ok.prompt_tokens, ok.max_tokens), (3, 16));
    }
}
