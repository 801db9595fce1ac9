//! `--prompts FILE`, read as prompts or (with `--turns`) as conversations, within the bounds
//! of [`FileKind::Prompts`]. Two shapes, told apart by the first byte that is not white space:
//! - a JSON list of ShareGPT entries, `{"conversations": [{"from": "human", "value": ...},
//!   {"from": "gpt", "value": ...}, ...]}` (turns as `role`/`content`, or the list under
//!   `messages`, are read the same);
//! - JSON lines, each with `prompt` or `messages` (and an optional `max_tokens`), or a ShareGPT
//!   entry.
//!
//! A ShareGPT prompt is its first human turn, and asks for as many tokens as the reply to it
//! had, as vLLM's and SGLang's ShareGPT benchmarks do (`--max-tokens` forces one length
//! instead). There is no tokenizer here: the reply's tokens are estimated as a quarter of its
//! characters (about right for English under the usual BPE tokenizers). Entries with nothing to
//! send are skipped with one warning that counts them.

use crate::client::body::PromptText;
use crate::workload::prompts::Entry;
use serde_json::Value;
use servbench::files::{self, FileKind};

/// Who said a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Speaker {
    User,
    Assistant,
    /// `system`, `tool`, or a name not known.
    Other,
}

fn speaker(who: &str) -> Speaker {
    match who.to_ascii_lowercase().as_str() {
        "human" | "user" => Speaker::User,
        "gpt" | "assistant" | "chatgpt" | "bard" | "bing" | "model" => Speaker::Assistant,
        _ => Speaker::Other,
    }
}

/// The turns of one entry (`conversations` or `messages`), each `from`/`value` or
/// `role`/`content`, with their text (`None`: not an entry of turns).
fn turns(v: &Value) -> Option<Vec<(Speaker, &str)>> {
    let list = v
        .get("conversations")
        .or_else(|| v.get("messages"))?
        .as_array()?;
    Some(
        list.iter()
            .filter_map(|t| {
                let who = t.get("from").or_else(|| t.get("role"))?.as_str()?;
                let text = t.get("value").or_else(|| t.get("content"))?.as_str()?;
                Some((speaker(who), text))
            })
            .collect(),
    )
}

/// A file's entries: `(where, value)`, where is `path:line` (JSON lines) or `path: entry N`;
/// and whether they came in a JSON list.
fn entries(path: &str) -> Result<(Vec<(String, Value)>, bool), String> {
    let mut lines = files::lines(path, FileKind::Prompts)?;
    if lines.peek_non_space()? == Some(b'[') {
        let text = lines.rest()?;
        let all: Value = serde_json::from_str(&text)
            .map_err(|e| format!("{path}: not a ShareGPT JSON list: {e}"))?;
        let Value::Array(all) = all else {
            return Err(format!("{path}: not a ShareGPT JSON list"));
        };
        let all = all
            .into_iter()
            .enumerate()
            .map(|(i, v)| (format!("{path}: entry {}", i + 1), v))
            .collect();
        return Ok((all, true));
    }
    let mut out = Vec::new();
    for line in lines {
        let (n, line) = line?;
        if line.trim().is_empty() {
            continue;
        }
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("{path}:{n}: not JSON: {e}"))?;
        out.push((format!("{path}:{n}"), v));
    }
    Ok((out, false))
}

/// The warning for entries skipped, if any.
fn skipped_note(path: &str, skipped: usize, of: usize, why: &str) -> Option<String> {
    (skipped > 0).then(|| format!("{path}: {skipped} of {of} entries skipped ({why})"))
}

/// Reads `--prompts FILE` as prompts; warns once about entries skipped.
pub fn read_prompts_file(path: &str) -> Result<Vec<Entry>, String> {
    let (entries, note) = parse_prompts(path)?;
    if let Some(note) = note {
        servbench::cli::warn(note);
    }
    Ok(entries)
}

/// The prompts of a file, and the note about entries skipped.
pub fn parse_prompts(path: &str) -> Result<(Vec<Entry>, Option<String>), String> {
    let (all, listed) = entries(path)?;
    let mut out = Vec::with_capacity(all.len());
    for (at, v) in &all {
        if v.get("conversations").is_some() {
            out.extend(turns(v).and_then(|t| sharegpt_entry(&t)));
            continue;
        }
        let max_tokens = max_tokens(v, at)?;
        let prompt = if let Some(p) = v.get("prompt").and_then(Value::as_str) {
            PromptText::Text(p.to_string())
        } else if let Some(m) = v.get("messages").filter(|m| m.is_array()) {
            PromptText::Messages(m.clone())
        } else if listed {
            // A list is ShareGPT's: an entry without a prompt is skipped (and counted).
            continue;
        } else {
            return Err(format!(
                "{at}: needs a \"prompt\" string, a \"messages\" list or ShareGPT \"conversations\""
            ));
        };
        out.push(Entry { prompt, max_tokens });
    }
    if out.is_empty() {
        return Err(format!("{path}: no prompts in it"));
    }
    let note = skipped_note(
        path,
        all.len() - out.len(),
        all.len(),
        "no prompt, or no human turn with text",
    );
    Ok((out, note))
}

/// A line's `max_tokens`: absent (or null), or a count the request can carry.
pub(super) fn max_tokens(v: &Value, at: &str) -> Result<Option<u32>, String> {
    match v.get("max_tokens") {
        None | Some(Value::Null) => Ok(None),
        Some(m) => m
            .as_u64()
            .filter(|&n| n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "{at}: \"max_tokens\" {m} is not a token count (a whole number from 1 to {})",
                    u32::MAX
                )
            }),
    }
}

/// The first human turn, asking for the length of the reply that followed it (`None` when
/// there is no reply: the run's `--max-tokens`).
fn sharegpt_entry(turns: &[(Speaker, &str)]) -> Option<Entry> {
    let first = turns
        .iter()
        .position(|(who, text)| *who == Speaker::User && !text.trim().is_empty())?;
    let reply = turns[first + 1..]
        .iter()
        .take_while(|(who, _)| *who != Speaker::User)
        .find(|(who, _)| *who == Speaker::Assistant)
        .map(|(_, text)| estimated_tokens(text));
    Some(Entry {
        prompt: PromptText::Text(turns[first].1.to_string()),
        max_tokens: reply,
    })
}

/// Tokens of `text` without a tokenizer: a quarter of its characters, at least 1.
pub fn estimated_tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4))
        .unwrap_or(u32::MAX)
        .max(1)
}

/// Reads `--prompts FILE` as conversations: each entry's user turns, in order (the replies
/// will be the server's). Warns once about entries skipped.
pub fn read_conversations(path: &str) -> Result<Vec<Vec<String>>, String> {
    let (all, listed) = entries(path)?;
    let mut out = Vec::new();
    for (at, v) in &all {
        let Some(t) = turns(v) else {
            if listed {
                continue;
            }
            return Err(format!(
                "{at}: needs a \"messages\" list (role, content) or ShareGPT \"conversations\""
            ));
        };
        let users: Vec<String> = t
            .iter()
            .filter(|(who, text)| *who == Speaker::User && !text.trim().is_empty())
            .map(|(_, text)| text.to_string())
            .collect();
        if !users.is_empty() {
            out.push(users);
        }
    }
    if out.is_empty() {
        return Err(format!("{path}: no conversation with a user turn in it"));
    }
    if let Some(note) = skipped_note(path, all.len() - out.len(), all.len(), "no user turn") {
        servbench::cli::warn(note);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
