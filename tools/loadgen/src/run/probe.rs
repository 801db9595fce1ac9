//! What a run learns from the server before its first point: the model to name (and its
//! context length, where the server says). How the server counts tokens, so synthetic prompts
//! have exactly the lengths asked for, is the workload's (`workload/align.rs`). What a server
//! answers is input like any other, and every probe is bounded by `--timeout`.

use crate::client::http::Pool;
use bytes::Bytes;
use serde_json::Value;
use servbench::cli;
use servbench::record::ErrorClass;
use std::time::Duration;

/// The model a run names.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    /// Prompt + output tokens the server accepts, where /v1/models says (vLLM, SGLang, srv-sim
    /// report `max_model_len`).
    pub max_model_len: Option<u32>,
}

/// The model to name: `wanted` (`--model`) checked against /v1/models, else the first it lists.
pub async fn find_model(
    pool: &Pool,
    wanted: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Model> {
    let url = &pool.target.url;
    let (status, body) = match pool
        .exchange(hyper::Method::GET, "/v1/models", Bytes::new(), timeout)
        .await
    {
        Ok(r) => r,
        Err(f) if f.class == ErrorClass::Connect => {
            return Err(cli::failure(format!(
                "no server answering at {url}: {}",
                f.message
            )));
        }
        Err(f) => return Err(cli::failure(format!("{url}/v1/models: {}", f.message))),
    };
    let listed: Vec<Value> = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    let ids: Vec<&str> = listed
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect();
    let max_len_of = |id: &str| {
        listed
            .iter()
            .find(|m| m.get("id").and_then(Value::as_str) == Some(id))
            .and_then(|m| m.get("max_model_len"))
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
            .map(|n| n.min(u64::from(u32::MAX)) as u32)
    };
    let name = match wanted {
        Some(m) if ids.is_empty() || ids.contains(&m) => m.to_string(),
        Some(m) => {
            return Err(cli::failure(format!(
                "model {m} not found: the server at {url} has {}",
                ids.join(", ")
            )));
        }
        None => match ids.first() {
            Some(id) => id.to_string(),
            None => {
                return Err(cli::failure(format!(
                    "{url}/v1/models (HTTP {status}) lists no model: pass --model NAME"
                )));
            }
        },
    };
    Ok(Model {
        max_model_len: max_len_of(&name),
        name,
    })
}
