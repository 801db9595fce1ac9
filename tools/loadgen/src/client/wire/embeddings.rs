//! Embeddings (`/v1/embeddings`), as OpenAI and vLLM serve them: `input` (the prompt's text),
//! no output and no stream. The answer's `data` holds one vector per input (the inputs counted
//! are its entries) and `usage.prompt_tokens` the inputs' tokens; a point's figures are its
//! latency and inputs/s.

use super::{Answer, Form, PromptText, Wire, as_text, json_string};
use crate::client::sse::{self, ChunkReader, Classified};
use serde_json::Value;

pub(super) struct Embeddings;

impl Wire for Embeddings {
    fn name(&self) -> &'static str {
        "embeddings"
    }

    fn path(&self) -> &'static str {
        "/v1/embeddings"
    }

    fn max_tokens_key(&self) -> Option<&'static str> {
        None
    }

    fn form(&self) -> Form {
        Form::Text
    }

    fn put_prompt(&self, out: &mut Vec<u8>, prompt: &PromptText, _: &[String]) {
        out.extend_from_slice(b"\"input\":");
        json_string(out, &as_text(prompt));
    }

    fn event<'a>(&self, _: &mut ChunkReader, _: &'a [u8]) -> Result<Classified<'a>, String> {
        Err("an embeddings answer is not a stream".into())
    }

    fn answer(&self, v: &Value, _reply: Option<&mut String>) -> Result<Answer, String> {
        let mut usage = sse::usage(&v["usage"]).map_err(|why| {
            format!(
                "malformed usage in answer ({why}): {}",
                servbench::jsonl::excerpt(&v["usage"].to_string(), 120)
            )
        })?;
        let data = v["data"]
            .as_array()
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                format!(
                    "an embeddings answer without its vectors (\"data\"): {}",
                    servbench::jsonl::excerpt(&v.to_string(), 120)
                )
            })?;
        if let Some(i) = data
            .iter()
            .position(|d| !(d["embedding"].is_array() || d["embedding"].is_string()))
        {
            return Err(format!(
                "data[{i}] is not an embedding: {}",
                servbench::jsonl::excerpt(&data[i].to_string(), 120)
            ));
        }
        // No output: the answer is complete without completion tokens.
        usage.completion_tokens = Some(0);
        Ok(Answer {
            usage,
            inputs: u32::try_from(data.len()).ok(),
        })
    }
}
