//! `/v1/embeddings` as vLLM serves it for an embedding model: `input` is a string, a list of
//! strings, a list of token ids or a list of such lists; each input is counted by srv-sim's
//! tokenization rule, and all of them go to an engine as one prompt of their total tokens, so
//! the answer comes when the engine has prefilled them (its first token: in fixed-latency mode
//! `--ttft`, in the modelled one the prefill's cost). The answer carries one vector per input,
//! in order, and `usage.prompt_tokens`, the inputs' total.

use super::{App, SimBody, error_response, json_response, read_body, unix_now};
use crate::api::{self, ApiError};
use crate::progress::{Progress, WaitFor};
use crate::step::Submit;
use crate::tokens::{self, splitmix64, unit};
use hyper::Response;
use hyper::body::Incoming;
use serde_json::{Value, json};
use std::time::Instant;

/// Numbers in each vector: enough to be a vector, few enough that the answer's size is the
/// inputs', not the vectors'.
const DIMENSIONS: u32 = 16;

pub(super) async fn embeddings(app: &App, req: hyper::Request<Incoming>) -> Response<SimBody> {
    let arrival = Instant::now();
    if app.loading() {
        return error_response(&ApiError::new(503, "Loading model"));
    }
    let inputs = match read_body(app, req).await.and_then(|b| inputs(app, &b)) {
        Ok(i) => i,
        Err(e) => return error_response(&e),
    };
    let total: u32 = inputs.iter().map(|i| i.0).sum();
    let hash = inputs.iter().fold(0, |h, i| splitmix64(h ^ i.1));
    let progress = Progress::new(1);
    let engine = (hash % app.engines.len() as u64) as usize;
    app.engines[engine].submit(Submit {
        progress: progress.clone(),
        prompt_tokens: total,
        cached: 0,
        arrival,
        rid: None,
        pooling: true,
        // An embeddings request names the model itself (srv-sim serves no pooling adapter).
        adapter: None,
    });
    WaitFor {
        progress: &progress,
        count: 1,
    }
    .await;
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(i, &(_, h))| {
            let v: Vec<f64> = (0..DIMENSIONS)
                .map(|d| {
                    let x = 2.0 * unit(splitmix64(h ^ u64::from(d))) - 1.0;
                    (x * 1e6).round() / 1e6
                })
                .collect();
            json!({"index": i, "object": "embedding", "embedding": v})
        })
        .collect();
    json_response(
        200,
        json!({
            "id": format!("embd-sim{hash:016x}"), "object": "list", "created": unix_now(),
            "model": app.limits.served_model, "data": data,
            "usage": {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0,
                      "prompt_tokens_details": null},
        })
        .to_string(),
    )
}

/// Each input's tokens and hash; every input must fit the model's context.
fn inputs(app: &App, body: &[u8]) -> Result<Vec<(u32, u64)>, ApiError> {
    let obj = api::parse_object(body)?;
    if let Some(model) = obj.get("model").filter(|m| !m.is_null()) {
        let name = model
            .as_str()
            .ok_or_else(|| ApiError::bad_request("'model' must be a string"))?;
        if name != app.limits.served_model {
            return Err(ApiError::new(
                404,
                format!("The model `{name}` does not exist."),
            ));
        }
    }
    let one = |v: &Value| -> Option<(u32, u64)> {
        match v {
            Value::String(s) => Some((tokens::count(s), tokens::fnv1a(s.as_bytes()))),
            Value::Array(ids) if !ids.is_empty() && ids.iter().all(Value::is_u64) => {
                Some((ids.len() as u32, tokens::fnv1a(v.to_string().as_bytes())))
            }
            _ => None,
        }
    };
    let list = match obj.get("input") {
        None | Some(Value::Null) => return Err(ApiError::bad_request("'input' is required")),
        Some(v) => match one(v) {
            Some(i) => vec![i],
            None => match v.as_array().filter(|a| !a.is_empty()) {
                Some(items) => items
                    .iter()
                    .map(one)
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(bad_input)?,
                None => return Err(bad_input()),
            },
        },
    };
    let limit = app.limits.max_model_len;
    if let Some((i, (n, _))) = list.iter().enumerate().find(|(_, (n, _))| *n > limit) {
        return Err(ApiError::bad_request(format!(
            "input[{i}] has {n} tokens, more than the model's maximum context length of {limit}"
        )));
    }
    Ok(list)
}

fn bad_input() -> ApiError {
    ApiError::bad_request(
        "'input' must be a string, a list of strings, a list of token ids or a list of such lists",
    )
}
