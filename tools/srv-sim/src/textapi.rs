//! `/tokenize` and `/detokenize` in vLLM's shape, by srv-sim's tokenization rule.

use crate::api::{self, ApiError};
use crate::tokens;
use serde_json::{Value, json};

/// `/tokenize` in vLLM's shape: `{"prompt": ...}` or `{"messages": [...]}`. A message's images
/// count as the card counts them (api/image.rs), each of their tokens listed as id 0 (the
/// image's placeholder), after the text's.
pub fn tokenize(limits: &api::Limits, body: &[u8]) -> Result<String, ApiError> {
    let obj = api::parse_object(body)?;
    let mut images = 0;
    let text = match (obj.get("prompt"), obj.get("messages")) {
        (Some(Value::String(s)), _) => s.clone(),
        (Some(Value::Array(ids)), _) if ids.iter().all(Value::is_u64) => {
            let ids: Vec<u64> = ids.iter().filter_map(Value::as_u64).collect();
            tokens::detokenize(&ids)
        }
        (Some(_), _) => return Err(ApiError::bad_request("'prompt' must be a string")),
        (None, Some(m)) => {
            let (text, image_tokens) = api::messages_content(m, limits.image_token_px)?;
            images = image_tokens;
            text
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give 'prompt' (a string) or 'messages' (a chat)",
            ));
        }
    };
    let mut ids = tokens::tokenize(&text);
    ids.extend(std::iter::repeat_n(0, images as usize));
    let strs = match obj.get("return_token_strs") {
        Some(Value::Bool(true)) => json!(tokens::token_strs(&text)),
        _ => Value::Null,
    };
    Ok(json!({"count": ids.len(), "max_model_len": limits.max_model_len, "tokens": ids, "token_strs": strs}).to_string())
}

pub fn detokenize(body: &[u8]) -> Result<String, ApiError> {
    let obj = api::parse_object(body)?;
    let Some(ids) = obj
        .get("tokens")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
    else {
        return Err(ApiError::bad_request(
            "'tokens' must be a list of non-negative integers",
        ));
    };
    Ok(json!({"prompt": tokens::detokenize(&ids)}).to_string())
}
