//! How the server counts tokens, so synthetic prompts have exactly the lengths asked for: each
//! target length's word count aligned once against the server's own count (`/tokenize`, else
//! `usage.prompt_tokens` of probe requests). What a server answers is input like any other: a
//! count that cannot be right for the prompt is not believed, and every probe is bounded by
//! `--timeout`.

use super::prompts::Synthetic;
use crate::client::body::{Api, BodySpec, ExtraBody, PromptText, Template};
use crate::client::http::Pool;
use crate::client::wire::{Form, put_prompt};
use bytes::Bytes;
use serde_json::{Value, json};
use servbench::cli;
use std::sync::Arc;
use std::time::Duration;

/// Tokens per word a server may count for a synthetic prompt. The words are one token each in
/// BPE vocabularies and up to a character each (plus a space) in character-level ones; a count
/// outside this range, beyond what a chat template adds, is not a count of this prompt (a
/// server answering 0 tokens, or nonsense), and believing it would scale the prompt without
/// bound.
const TOKENS_PER_WORD: (f64, f64) = (0.25, 16.0);
/// Tokens a server may add around a prompt (BOS, a chat template with its system text).
const TEMPLATE_TOKENS: f64 = 512.0;

/// Whether `count` tokens is a believable count of a prompt of `words` words.
pub fn plausible(count: u32, words: usize) -> bool {
    let (c, w) = (f64::from(count), words as f64);
    count > 0
        && c <= w * TOKENS_PER_WORD.1 + TEMPLATE_TOKENS
        && c >= w * TOKENS_PER_WORD.0 - TEMPLATE_TOKENS
}

/// The next word count to try for `target` tokens after `words` words counted `count`:
/// scaled by the observed tokens per word, within the believable range of words for the target.
pub fn next_words(words: usize, count: u32, target: u32) -> usize {
    let scaled = (words as f64 * f64::from(target) / f64::from(count.max(1))).round();
    let lo = (f64::from(target) / TOKENS_PER_WORD.1).floor().max(1.0);
    let hi = (f64::from(target) / TOKENS_PER_WORD.0).ceil().max(lo);
    scaled.clamp(lo, hi) as usize
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
    /// `--timeout`, for each count.
    pub timeout: Duration,
    /// `--extra-body`: probe requests carry it, and a chat `/tokenize` its
    /// `chat_template_kwargs`, so the prompt is counted as the load's requests template it.
    pub extra: Option<ExtraBody>,
    aligned: Vec<(u32, Arc<Synthetic>)>,
}

impl Aligner {
    pub fn new(
        pool: Arc<Pool>,
        api: Api,
        model: String,
        shared_prefix: u32,
        seed: u64,
        timeout: Duration,
    ) -> Self {
        Aligner {
            pool,
            api,
            model,
            shared_prefix,
            seed,
            timeout,
            extra: None,
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
            let text = s.text(None, None, seed);
            let words = s.words.len();
            let count = match self.count_tokens(&text, words, &mut method).await {
                Some(c) => c,
                None => {
                    cli::warn(format!(
                        "cannot learn how {} counts tokens (no /tokenize, no believable usage in replies): prompts of {target} tokens are {target} words",
                        self.pool.target.url
                    ));
                    break;
                }
            };
            if best.is_none_or(|(c, _)| c.abs_diff(target) > count.abs_diff(target)) {
                best = Some((count, words));
            }
            if count == target {
                break;
            }
            // Scale by the observed tokens per word (1 with the usual BPE vocabularies, more
            // with character-level ones), then step one word when scaling stalls.
            let mut next = next_words(words, count, target);
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
            // The shared prefix in words: its tokens at the prompt's tokens per word.
            let per_word = f64::from(count) / words as f64;
            s.shared_prefix_words =
                ((f64::from(self.shared_prefix) / per_word).round() as usize).min(words);
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

    /// The server's token count for a prompt of `words` words: `/tokenize` in the request's
    /// form, else a probe request's `usage.prompt_tokens`; `None` when neither gives a
    /// believable count ([`plausible`]).
    async fn count_tokens(
        &self,
        text: &str,
        words: usize,
        method: &mut &'static str,
    ) -> Option<u32> {
        let prompt = PromptText::Text(text.to_string());
        if *method == "tokenize" {
            // vLLM and SGLang read `prompt` (or `messages`). llama-server reads `content`, and
            // counts BOS only with `add_special`, as its completions endpoint does; it has no
            // chat form (it answers no tokens, and probes count the templated prompt instead).
            let mut b = json!({"model": self.model});
            let form = self.api.wire().form();
            if form == Form::Text {
                b["content"] = json!(text);
                b["add_special"] = json!(true);
            } else if let Some(kwargs) = self
                .extra
                .as_ref()
                .and_then(|e| e.0.get("chat_template_kwargs"))
            {
                b["chat_template_kwargs"] = kwargs.clone();
            }
            put_prompt(&mut b, form, &prompt);
            let body = Bytes::from(serde_json::to_vec(&b).unwrap_or_default());
            if let Ok((200, reply)) = self
                .pool
                .exchange(hyper::Method::POST, "/tokenize", body, self.timeout)
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
                if let Some(c) = count
                    .and_then(|c| u32::try_from(c).ok())
                    .filter(|&c| plausible(c, words))
                {
                    return Some(c);
                }
            }
            *method = "probe requests";
        }
        let (probe, _) = Template::new(&BodySpec {
            api: self.api,
            model: self.model.clone(),
            adapters: Vec::new(),
            stream: false,
            force_length: false,
            usage_per_chunk: false,
            temperature: None,
            top_p: None,
            extra: self.extra.clone(),
            response_format: None,
        });
        let body = probe.build(0, &prompt, 1);
        let (status, reply) = self
            .pool
            .exchange(hyper::Method::POST, self.api.path(), body, self.timeout)
            .await
            .ok()?;
        if status != 200 {
            return None;
        }
        let v: Value = serde_json::from_slice(&reply).ok()?;
        // The API's own usage (`input_tokens` in the Responses and Messages APIs).
        let answer = self.api.wire().answer(&v, None).ok()?;
        answer.usage.prompt_tokens.filter(|&c| plausible(c, words))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server answering 0 tokens, or a count no tokenizer gives for the prompt, is not
    /// believed; the next guess never leaves the believable range whatever the count.
    #[test]
    fn nonsense_token_counts_are_not_believed_and_never_scale_the_prompt_without_bound() {
        assert!(!plausible(0, 256));
        assert!(plausible(256, 256));
        assert!(plausible(257 + 30, 256), "BOS and a chat template");
        assert!(plausible(256 * 8, 256), "character-level");
        assert!(!plausible(10_000_000, 256));
        assert!(!plausible(1, 100_000));
        for count in [0, 1, 2, 7, 1000, u32::MAX] {
            let next = next_words(256, count, 256);
            assert!((16..=1024).contains(&next), "count {count}: {next} words");
        }
        assert_eq!(next_words(300, 600, 300), 150);
        assert_eq!(next_words(256, 256, 256), 256);
    }
}
