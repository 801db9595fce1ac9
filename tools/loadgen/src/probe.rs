//! What a run learns from the server before its first point: the model to name, and how the
//! server counts tokens, so synthetic prompts have exactly the lengths asked for.

use crate::http::Pool;
use crate::workload::{self, Api, PromptText, Synthetic};
use bytes::Bytes;
use serde_json::{Value, json};
use servbench::cli;
use servbench::record::ErrorClass;
use std::sync::Arc;

/// The model to name: `wanted` (`--model`) checked against /v1/models, else the first it lists.
pub async fn find_model(pool: &Pool, wanted: Option<&str>) -> anyhow::Result<String> {
    let url = &pool.target.url;
    let (status, body) = match pool
        .exchange(hyper::Method::GET, "/v1/models", Bytes::new())
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
    let ids: Vec<String> = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("data").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m.get("id").and_then(Value::as_str).map(String::from))
        .collect();
    match wanted {
        Some(m) if ids.is_empty() || ids.iter().any(|id| id == m) => Ok(m.to_string()),
        Some(m) => Err(cli::failure(format!(
            "model {m} not found: the server at {url} has {}",
            ids.join(", ")
        ))),
        None => ids.into_iter().next().ok_or_else(|| {
            cli::failure(format!(
                "{url}/v1/models (HTTP {status}) lists no model: pass --model NAME"
            ))
        }),
    }
}

/// Synthetic prompts aligned to the server's token count, one per target length, kept for the
/// whole run.
pub struct Aligner {
    pub pool: Arc<Pool>,
    pub api: Api,
    pub model: String,
    /// `--shared-prefix`, in tokens (one word each).
    pub shared_prefix: u32,
    pub seed: u64,
    aligned: Vec<(u32, Arc<Synthetic>)>,
}

impl Aligner {
    pub fn new(pool: Arc<Pool>, api: Api, model: String, shared_prefix: u32, seed: u64) -> Self {
        Aligner {
            pool,
            api,
            model,
            shared_prefix,
            seed,
            aligned: Vec::new(),
        }
    }

    /// A synthetic prompt of `target` tokens as the server counts them.
    pub async fn align(&mut self, target: u32) -> Arc<Synthetic> {
        if let Some((_, s)) = self.aligned.iter().find(|(t, _)| *t == target) {
            return s.clone();
        }
        let seed = self.seed;
        let mut s = Synthetic::new(target, target as usize, self.shared_prefix as usize, seed);
        let mut best: Option<(u32, usize)> = None;
        let mut method = "tokenize";
        let mut tried = vec![s.words.len()];
        for _round in 0..8 {
            let text = s.text(None, seed);
            let count = match self.count_tokens(&text, &mut method).await {
                Some(c) => c,
                None => {
                    cli::warn(format!(
                        "cannot learn how {} counts tokens (no /tokenize, no usage in replies): prompts of {target} tokens are {target} words",
                        self.pool.target.url
                    ));
                    break;
                }
            };
            let words = s.words.len();
            if best.is_none_or(|(c, _)| c.abs_diff(target) > count.abs_diff(target)) {
                best = Some((count, words));
            }
            if count == target {
                break;
            }
            // Scale by the observed tokens per word (1 with the usual BPE vocabularies, more
            // with character-level ones), then step one word when scaling stalls.
            let scaled = (words as f64 * f64::from(target) / f64::from(count.max(1))).round();
            let mut next = (scaled as usize).max(1);
            if next == words {
                next = if count < target {
                    words + 1
                } else {
                    words.saturating_sub(1).max(1)
                };
            }
            if next == words || tried.contains(&next) {
                break;
            }
            tried.push(next);
            s.resize(next, seed);
        }
        if let Some((count, words)) = best {
            s.resize(words, seed);
            if count != target {
                cli::warn(format!(
                    "prompt length {target}: closest the server counted was {count} tokens (by {method})"
                ));
            }
        }
        let s = Arc::new(s);
        self.aligned.push((target, s.clone()));
        s
    }

    /// The server's token count for a prompt: `/tokenize` in the request's form, else a probe
    /// request's `usage.prompt_tokens`.
    async fn count_tokens(&self, text: &str, method: &mut &'static str) -> Option<u32> {
        let prompt = PromptText::Text(text.to_string());
        if *method == "tokenize" {
            // vLLM and SGLang read `prompt` (or `messages`). llama-server reads `content`, and
            // counts BOS only with `add_special`, as its completions endpoint does; it has no
            // chat form (it answers no tokens, and probes count the templated prompt instead).
            let mut b = json!({"model": self.model});
            if self.api == Api::Completions {
                b["content"] = json!(text);
                b["add_special"] = json!(true);
            }
            workload::put_prompt(&mut b, self.api, &prompt);
            let body = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
            if let Ok((200, reply)) = self
                .pool
                .exchange(hyper::Method::POST, "/tokenize", body)
                .await
                && let Ok(v) = serde_json::from_slice::<Value>(&reply)
            {
                let count = v.get("count").and_then(Value::as_u64).or_else(|| {
                    v.get("tokens")
                        .and_then(Value::as_array)
                        .map(|t| t.len() as u64)
                });
                // Zero tokens for a non-empty prompt: the server did not understand the form
                // (llama-server given chat messages); count with probe requests instead.
                if let Some(c) = count.filter(|&c| c > 0 || text.is_empty()) {
                    return Some(c as u32);
                }
            }
            *method = "probe requests";
        }
        let mut b =
            json!({"model": self.model, "max_tokens": 1, "stream": false, "temperature": 0.0});
        workload::put_prompt(&mut b, self.api, &prompt);
        let body = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
        let (status, reply) = self
            .pool
            .exchange(hyper::Method::POST, self.api.path(), body)
            .await
            .ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&reply).ok()?;
        v.get("usage")?
            .get("prompt_tokens")?
            .as_u64()
            .map(|c| c as u32)
    }
}
