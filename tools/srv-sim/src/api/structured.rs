//! Structured output: a request's `response_format` (`json_schema`, or `json_object`) answered
//! with JSON made from the schema, word by word as srv-sim's tokens are (each token one
//! whitespace-separated word, a leading space before it). What a schema may use: `type`
//! (`object` with `properties` and `required`, `string` with `enum`, `integer` and `number`
//! with `minimum`/`maximum`, `boolean`, `null`, `array` with `items`, `minItems` and
//! `maxItems`; a list of types takes its first), `enum` and `const` anywhere, nested to
//! [`MAX_DEPTH`]. Anything else (`$ref`, `anyOf`, `pattern`, string lengths...) is refused
//! with a 400 when the request comes in, not answered with JSON that may not follow it.

use super::ApiError;
use crate::tokens::{self, splitmix64};
use serde_json::{Map, Value, json};
use std::fmt::Write as _;

/// The deepest nesting a schema may have.
pub const MAX_DEPTH: usize = 16;
/// The most items an array gets (within `minItems`/`maxItems`).
const MAX_ITEMS: u64 = 3;

/// Keywords that only describe (or that the generated JSON follows by construction).
const HARMLESS: &[&str] = &[
    "type",
    "properties",
    "required",
    "enum",
    "const",
    "items",
    "minItems",
    "maxItems",
    "minimum",
    "maximum",
    "title",
    "description",
    "$schema",
    "$id",
    "additionalProperties",
    "default",
    "examples",
];

/// The schema a request's `response_format` asks for: `None` for plain text.
pub fn requested(obj: &Map<String, Value>) -> Result<Option<Value>, ApiError> {
    let Some(rf) = super::field(obj, "response_format") else {
        return Ok(None);
    };
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(json!({"type": "object"}))),
        Some("json_schema") => {
            let schema = rf
                .get("json_schema")
                .and_then(|j| j.get("schema"))
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "response_format json_schema needs json_schema.schema (an object)",
                    )
                })?;
            check(schema, "", 0)?;
            Ok(Some(schema.clone()))
        }
        _ => Err(ApiError::bad_request(format!(
            "response_format type must be text, json_object or json_schema, got {}",
            rf.get("type").unwrap_or(&Value::Null)
        ))),
    }
}

/// Refuses what srv-sim cannot answer validly, naming where in the schema.
fn check(schema: &Value, at: &str, depth: usize) -> Result<(), ApiError> {
    let refuse = |why: String| {
        Err(ApiError::bad_request(format!(
            "response_format json_schema at '{}': {why} (srv-sim generates type/properties/required/enum/const/items/minItems/maxItems/minimum/maximum)",
            if at.is_empty() { "/" } else { at }
        )))
    };
    let Some(s) = schema.as_object() else {
        return refuse("a schema must be an object".into());
    };
    if depth > MAX_DEPTH {
        return refuse(format!("nested deeper than {MAX_DEPTH}"));
    }
    if let Some(k) = s.keys().find(|k| !HARMLESS.contains(&k.as_str())) {
        return refuse(format!("'{k}' is not supported by srv-sim"));
    }
    if let Some(e) = s.get("enum")
        && e.as_array().is_none_or(Vec::is_empty)
    {
        return refuse("'enum' must be a list of values".into());
    }
    if s.contains_key("enum") || s.contains_key("const") {
        return Ok(());
    }
    match type_of(s).as_deref() {
        Some("object") => {
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, p) in props {
                    check(p, &format!("{at}/properties/{k}"), depth + 1)?;
                }
            }
            if let Some(missing) = required(s).find(|r| properties(s).get(*r).is_none()) {
                return refuse(format!("required '{missing}' has no properties entry"));
            }
            Ok(())
        }
        Some("array") => {
            let (lo, hi) = (u(s, "minItems"), u(s, "maxItems"));
            if hi.is_some_and(|h| h < lo.unwrap_or(0)) {
                return refuse("maxItems below minItems".into());
            }
            match s.get("items") {
                Some(i) => check(i, &format!("{at}/items"), depth + 1),
                None => Ok(()),
            }
        }
        Some("integer" | "number") => {
            let (lo, hi) = (f(s, "minimum"), f(s, "maximum"));
            if lo.zip(hi).is_some_and(|(lo, hi)| hi < lo) {
                return refuse("maximum below minimum".into());
            }
            if type_of(s).as_deref() == Some("integer")
                && lo.zip(hi).is_some_and(|(lo, hi)| lo.ceil() > hi.floor())
            {
                return refuse("no integer between minimum and maximum".into());
            }
            Ok(())
        }
        Some("string" | "boolean" | "null") | None => Ok(()),
        Some(other) => refuse(format!("type '{other}' is not a JSON type")),
    }
}

fn type_of(s: &Map<String, Value>) -> Option<String> {
    match s.get("type")? {
        Value::String(t) => Some(t.clone()),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .next()
            .map(str::to_string),
        _ => None,
    }
}

fn properties(s: &Map<String, Value>) -> Map<String, Value> {
    s.get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

fn required(s: &Map<String, Value>) -> impl Iterator<Item = &str> {
    s.get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn u(s: &Map<String, Value>, k: &str) -> Option<u64> {
    s.get(k).and_then(Value::as_u64)
}

fn f(s: &Map<String, Value>, k: &str) -> Option<f64> {
    s.get(k).and_then(Value::as_f64).filter(|v| v.is_finite())
}

/// The answer's tokens for a (checked) schema, drawn from `seed`: each ` word`. `broken`: the
/// last token left out, so the text is not JSON (`--invalid-json-rate`).
pub fn answer(schema: &Value, seed: u64, broken: bool) -> Vec<String> {
    let mut text = String::new();
    let mut draw = Draw(seed);
    value(schema, &mut draw, &mut text);
    let mut words: Vec<String> = text.split_whitespace().map(|w| format!(" {w}")).collect();
    if broken {
        words.pop();
        if words.is_empty() {
            words.push(" {".into());
        }
    }
    words
}

/// A token as its text is inside a JSON string (a stream's events are written around it).
pub fn escaped(word: &str) -> String {
    let quoted = Value::String(word.to_string()).to_string();
    quoted[1..quoted.len() - 1].to_string()
}

struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = splitmix64(self.0);
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Writes a value for `schema`, tokens apart by spaces.
fn value(schema: &Value, draw: &mut Draw, out: &mut String) {
    let s = schema.as_object().cloned().unwrap_or_default();
    if let Some(c) = s.get("const") {
        return literal(c, out);
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array) {
        let pick = draw.below(e.len() as u64) as usize;
        return literal(&e[pick], out);
    }
    match type_of(&s).as_deref() {
        Some("object") | None if s.contains_key("properties") || type_of(&s).is_some() => {
            let props = properties(&s);
            out.push_str(" {");
            if props.is_empty() {
                // `json_object` with nothing asked: one field of words.
                out.push_str(" \"answer\": ");
                words(draw, out);
            }
            for (i, (k, p)) in props.iter().enumerate() {
                if i > 0 {
                    out.push_str(" ,");
                }
                out.push(' ');
                literal(&json!(k), out);
                out.push_str(" :");
                value(p, draw, out);
            }
            out.push_str(" }");
        }
        Some("array") => {
            let lo = u(&s, "minItems").unwrap_or(0);
            let hi = u(&s, "maxItems").unwrap_or(lo.max(MAX_ITEMS)).max(lo);
            let n = lo + draw.below(hi.min(lo.max(MAX_ITEMS)) - lo + 1);
            let items = s.get("items").cloned().unwrap_or(json!({"type": "string"}));
            out.push_str(" [");
            for i in 0..n {
                if i > 0 {
                    out.push_str(" ,");
                }
                value(&items, draw, out);
            }
            out.push_str(" ]");
        }
        Some("integer") => {
            let lo = f(&s, "minimum").map_or(0, |v| v.ceil() as i64);
            let hi = f(&s, "maximum").map_or(lo.saturating_add(100), |v| v.floor() as i64);
            let span = hi.saturating_sub(lo).max(0) as u64;
            let v = lo.saturating_add(draw.below(span.saturating_add(1)) as i64);
            let _ = write!(out, " {v}");
        }
        Some("number") => {
            let lo = f(&s, "minimum").unwrap_or(0.0);
            let hi = f(&s, "maximum").unwrap_or(lo + 100.0);
            let v = lo + (hi - lo) * tokens::unit(draw.next());
            literal(&json!(v.clamp(lo, hi)), out);
        }
        Some("boolean") => literal(&json!(draw.below(2) == 1), out),
        Some("null") => out.push_str(" null"),
        _ => words(draw, out),
    }
}

/// A string of one to three of the model's words.
fn words(draw: &mut Draw, out: &mut String) {
    let n = 1 + draw.below(3) as u32;
    let seed = draw.next();
    let text: String = (0..n).map(|p| tokens::generated(seed, p)).collect();
    literal(&json!(text.trim_start()), out);
}

/// A JSON value as its tokens: serialized compactly; strings keep their words.
fn literal(v: &Value, out: &mut String) {
    out.push(' ');
    out.push_str(&v.to_string());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Value {
        json!({"type": "object", "required": ["name", "age"], "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 18, "maximum": 20},
            "score": {"type": "number", "minimum": 0.5, "maximum": 1},
            "kind": {"type": "string", "enum": ["a", "b c"]},
            "ok": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "inner": {"type": "object", "properties": {"x": {"type": ["integer", "null"]}}},
        }})
    }

    #[test]
    fn an_answer_is_json_that_follows_the_schema_and_a_broken_one_is_not_json() {
        let s = schema();
        let mut r = Map::new();
        r.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "p", "schema": s}}),
        );
        assert_eq!(requested(&r).unwrap(), Some(s.clone()));
        for seed in 0..50 {
            let words = answer(&s, seed, false);
            let text: String = words.concat();
            assert_eq!(tokens::count(&text) as usize, words.len());
            let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert!((18..=20).contains(&v["age"].as_i64().unwrap()), "{text}");
            let score = v["score"].as_f64().unwrap();
            assert!((0.5..=1.0).contains(&score), "{text}");
            assert!(
                ["a", "b c"].contains(&v["kind"].as_str().unwrap()),
                "{text}"
            );
            assert!(v["tags"].as_array().unwrap().len() >= 2, "{text}");
            assert!(v["inner"]["x"].is_i64(), "{text}");
            let broken: String = answer(&s, seed, true).concat();
            assert!(serde_json::from_str::<Value>(&broken).is_err(), "{broken}");
        }
        assert_eq!(answer(&s, 7, false), answer(&s, 7, false));
    }

    #[test]
    fn a_schema_srv_sim_cannot_follow_is_refused_naming_where() {
        let mut r = Map::new();
        r.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "p", "schema":
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "^x$"}}}}}),
        );
        let e = requested(&r).unwrap_err().message;
        assert!(
            e.contains("'/properties/a'") && e.contains("'pattern'"),
            "{e}"
        );
        r.insert("response_format".into(), json!({"type": "json_object"}));
        let text: String = answer(&requested(&r).unwrap().unwrap(), 1, false).concat();
        assert!(
            serde_json::from_str::<Value>(&text).unwrap().is_object(),
            "{text}"
        );
        r.insert("response_format".into(), json!({"type": "regex"}));
        assert!(requested(&r).is_err());
    }
}
