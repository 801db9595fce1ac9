//! `--eval FILE`: a question set sent as the workload, in the file's order and cycled (request
//! `id` of a point asks question `id % N`, so each point's request ids name the same questions),
//! each answer judged against the question's. JSON lines, each with `prompt` (or `messages`)
//! and `answer`, optionally `match` (`number` or `exact`, else `--eval-match`) and
//! `max_tokens`:
//!
//! ```text
//! {"prompt": "Q: What is 17 + 25? Give the final number.\nA:", "answer": "42"}
//! ```
//!
//! How answers are judged: `servbench::load::eval`.

use super::prompt_files::max_tokens;
use super::{Prepared, Unit, Workload};
use crate::client::body::{Bodies, PromptText};
use serde_json::Value;
use servbench::files::{self, FileKind};
use servbench::load::eval::{Expected, Match, number};
use std::sync::Arc;

/// One question of the set.
#[derive(Debug)]
pub struct Question {
    pub prompt: PromptText,
    pub max_tokens: Option<u32>,
    /// What its answer is judged against.
    pub expected: Arc<Expected>,
}

/// Reads the question set; one error naming `file:line` for the first bad line.
pub fn read(path: &str, default: Match) -> Result<Vec<Question>, String> {
    let mut out = Vec::new();
    for line in files::lines(path, FileKind::Prompts)? {
        let (n, line) = line?;
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{path}:{n}");
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{at}: not JSON: {e}"))?;
        out.push(question(
            &v,
            &at,
            u32::try_from(n).unwrap_or(u32::MAX),
            default,
        )?);
    }
    if out.is_empty() {
        return Err(format!("{path}: no questions in it"));
    }
    Ok(out)
}

fn question(v: &Value, at: &str, line: u32, default: Match) -> Result<Question, String> {
    let prompt = match (v.get("prompt"), v.get("messages")) {
        (Some(Value::String(p)), _) => PromptText::Text(p.clone()),
        (None, Some(m)) if m.is_array() => PromptText::Messages(m.clone()),
        _ => {
            return Err(format!(
                "{at}: needs a \"prompt\" string or a \"messages\" list"
            ));
        }
    };
    let answer = match v.get("answer") {
        Some(Value::String(a)) => a.clone(),
        Some(Value::Number(a)) => a.to_string(),
        _ => return Err(format!("{at}: needs an \"answer\" (a string or a number)")),
    };
    let how = match v.get("match") {
        None | Some(Value::Null) => default,
        Some(Value::String(m)) if m == "number" => Match::Number,
        Some(Value::String(m)) if m == "exact" => Match::Exact,
        Some(m) => {
            return Err(format!(
                "{at}: \"match\" {m} is not \"number\" or \"exact\""
            ));
        }
    };
    if how == Match::Number && number(&answer).is_none() {
        return Err(format!(
            "{at}: \"answer\" {answer:?} is not a number (match \"number\"; use \"exact\" for text)"
        ));
    }
    Ok(Question {
        prompt,
        max_tokens: max_tokens(v, at)?,
        expected: Arc::new(Expected { line, answer, how }),
    })
}

/// The question set as a point's workload.
pub struct Questions {
    pub all: Arc<Vec<Arc<Question>>>,
}

impl Workload for Questions {
    fn next(&self, _seq: u64, id: u64, bodies: &Arc<Bodies>) -> Unit {
        let q = &self.all[(id % self.all.len() as u64) as usize];
        let max_tokens = bodies.max_for(q.max_tokens);
        Unit::Request(Prepared {
            body: bodies.build(id, &q.prompt, max_tokens),
            target: None,
            max_tokens,
            at_s: None,
            question: Some(q.expected.clone()),
        })
    }

    /// Without `-n` or `--duration`, each question once.
    fn budget(&self, _load: &crate::pacing::Load, asked: super::Asked) -> Option<super::Budget> {
        (asked.requests.is_none() && asked.duration.is_none())
            .then(|| super::Budget::Requests(self.all.len() as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_line_is_named_by_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.jsonl");
        let path = path.to_str().unwrap();
        let ok = r#"{"prompt":"1+1=","answer":"2"}"#;
        for (bad, why) in [
            (r#"{"prompt":"2+2="}"#, "needs an \"answer\""),
            (r#"{"prompt":"2+2=","answer":"four"}"#, "is not a number"),
            (
                r#"{"prompt":"2+2=","answer":4,"match":"fuzzy"}"#,
                "\"match\"",
            ),
            ("{not json", "not JSON"),
        ] {
            std::fs::write(path, format!("{ok}\n\n{bad}\n")).unwrap();
            let e = read(path, Match::Number).unwrap_err();
            assert!(
                e.starts_with(&format!("{path}:3: ")) && e.contains(why),
                "{e}"
            );
        }
        std::fs::write(
            path,
            format!(
                "{ok}\n{}\n",
                r#"{"prompt":"x","answer":"four","match":"exact"}"#
            ),
        )
        .unwrap();
        let all = read(path, Match::Number).unwrap();
        assert_eq!(
            (
                all[1].expected.line,
                all[1].expected.how,
                all[1].expected.answer.as_str()
            ),
            (2, Match::Exact, "four")
        );
    }
}
