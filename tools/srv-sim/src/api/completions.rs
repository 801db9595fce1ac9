//! `/v1/completions`: a `prompt` (text or token ids), `max_tokens`, and `text_completion` chunks
//! whose first choice carries `text`.

use super::{ApiError, Formatter, Limits, Prompt, Wire, as_u32, field, type_name};
use crate::progress::Progress;
use crate::{prefix, tokens};
use serde_json::{Map, Value, json};

pub(super) struct Completions;

impl Wire for Completions {
    fn path(&self) -> &'static str {
        "/v1/completions"
    }

    fn prompt(&self, obj: &Map<String, Value>, _: &Limits) -> Result<Prompt, ApiError> {
        match field(obj, "prompt") {
            Some(p) => prompt_of(p),
            None => Err(ApiError::bad_request("'prompt' is required")),
        }
    }

    fn max_tokens(&self, obj: &Map<String, Value>) -> Result<Option<u32>, ApiError> {
        as_u32(obj, "max_tokens")
    }

    fn id(&self, n: u64) -> String {
        format!("cmpl-sim{n:016x}")
    }

    fn trtllm_id(&self, n: u64) -> String {
        format!("cmpl-{n}")
    }

    fn head(&self, id: &str, created: u64, model_json: &str) -> String {
        super::openai_head(id, "text_completion", created, model_json)
    }

    fn start(&self, _: &Formatter, _: &mut Vec<u8>) {}

    fn token(&self, f: &Formatter, out: &mut Vec<u8>, text: &[&str], last: bool, generated: u32) {
        super::openai_chunk(
            f,
            out,
            br#"{"index":0,"text":""#,
            text,
            b"\"",
            last,
            generated,
        );
    }

    fn finish(&self, f: &Formatter, out: &mut Vec<u8>, completion: u32, progress: &Progress) {
        super::openai_finish(f, out, completion, progress);
    }

    fn whole(&self, f: &Formatter, text: &str, completion: u32) -> Value {
        json!({
            "id": f.id, "object": "text_completion", "created": f.created, "model": f.model(),
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": "length",
                         "stop_reason": null, "prompt_logprobs": null}],
            "usage": f.usage_json(completion),
        })
    }
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
