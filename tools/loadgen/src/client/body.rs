//! The one place a request body is built. Everything that is the same for every request of a
//! point (model, stream options, sampling, `--extra-body`) is merged once into a JSON object and
//! serialized once into a head; each request then appends only what varies (its `max_tokens`
//! and its prompt or messages) behind it: one buffer, no JSON tree per request. With `--lora`
//! there is one head per adapter (its name as `model`), and a request takes its adapter's.
//!
//! Merging: loadgen's defaults (temperature 0, usage in every chunk), then `--extra-body` merged
//! in (nested: objects merge key by key, anything else replaces), then `--temperature` and
//! `--top-p`, then the fields the measurement depends on, which win over `--extra-body` with a
//! warning: `model`, `stream`, `stream_options.include_usage`, `ignore_eos` when the output
//! length is forced, and the per-request `max_tokens`/`min_tokens`/`max_completion_tokens`,
//! `prompt` and `messages`.

use crate::client::image::Images;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

pub use crate::client::wire::{Api, PromptText};

/// `--extra-body`: a JSON object, given inline or as `@FILE`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraBody(pub Map<String, Value>);

impl ExtraBody {
    /// Parses the flag's value; the error is one line naming the file where there is one.
    pub fn parse(s: &str) -> Result<ExtraBody, String> {
        let (text, from) = match s.strip_prefix('@') {
            Some(path) => (
                servbench::files::read_text(path, servbench::files::FileKind::RequestBody)?,
                format!("{path}: "),
            ),
            None => (s.to_string(), String::new()),
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => {
                refuse_other_measurements(&map).map_err(|e| format!("{from}{e}"))?;
                Ok(ExtraBody(map))
            }
            Ok(other) => Err(format!(
                "{from}expected a JSON object ({{\"key\": value, ...}}), got {}",
                kind(&other)
            )),
            Err(e) => Err(format!("{from}not JSON: {e}")),
        }
    }
}

/// Fields that make one request measure something else: several choices per request (`n`,
/// `best_of`) stream as one, so TPOT and tok/s would count n choices' tokens as one answer's
/// (4x low TPOT at n=4), and `echo` returns the prompt as output. Refused, not overridden: a
/// run asking for them means another benchmark than the one loadgen measures.
const OTHER_MEASUREMENTS: &[(&str, &str)] = &[("n", "1"), ("best_of", "1"), ("echo", "false")];

fn refuse_other_measurements(map: &Map<String, Value>) -> Result<(), String> {
    for (key, fine) in OTHER_MEASUREMENTS {
        if let Some(v) = map.get(*key)
            && !v.is_null()
            && *v != serde_json::from_str::<Value>(fine).unwrap_or_default()
        {
            return Err(format!(
                "\"{key}\": {}: loadgen measures one answer per request (TTFT, TPOT and tok/s of one choice); leave \"{key}\" out (or {fine})",
                servbench::jsonl::excerpt(&v.to_string(), 40)
            ));
        }
    }
    Ok(())
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Merges `from` into `into`: objects key by key, recursively; any other value replaces.
pub fn merge(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Object(a)), Value::Object(b)) => merge(a, b),
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

/// What every request of a point asks for besides its prompt and output length.
#[derive(Debug, Clone)]
pub struct BodySpec {
    pub api: Api,
    pub model: String,
    /// `--lora`: the adapters requests name as their `model` instead, one head each.
    pub adapters: Vec<String>,
    /// `stream: true` with usage; false for `--no-stream`.
    pub stream: bool,
    /// Add `ignore_eos` and `min_tokens` so the server generates exactly `max_tokens`.
    pub force_length: bool,
    /// Ask for usage in every chunk (vLLM's `continuous_usage_stats`).
    pub usage_per_chunk: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub extra: Option<ExtraBody>,
    /// `--response-format`: the body's `response_format` (a JSON schema's).
    pub response_format: Option<Value>,
}

/// A point's request bodies: the serialized head, and what each request appends.
#[derive(Debug, Clone)]
pub struct Template {
    api: Api,
    /// `ignore_eos` and `min_tokens` ask for exactly `max_tokens` (an API that generates).
    force_length: bool,
    /// `{"model":...,...,` : every fixed field, ready for the per-request ones; one per
    /// `--lora` adapter (its name as `model`), else one.
    heads: Vec<Vec<u8>>,
    /// The merged fixed fields, for the summary.
    fixed: Map<String, Value>,
    /// `--images`: each request's images, drawn from the seed and the requests built so far.
    images: Option<(Images, u64, Arc<AtomicU64>)>,
}

/// Keys each request sets itself; `--extra-body` cannot set them.
const PER_REQUEST: &[&str] = &[
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "prompt",
    "messages",
    "input",
];

impl Template {
    /// The template, and one warning per field of `--extra-body` that loadgen overrides.
    pub fn new(spec: &BodySpec) -> (Template, Vec<String>) {
        let wire = spec.api.wire();
        let generates = spec.api.generates();
        let mut b = Map::new();
        if generates {
            b.insert("temperature".into(), json!(0.0));
        }
        if spec.stream && spec.usage_per_chunk && wire.stream_options() {
            b.insert(
                "stream_options".into(),
                json!({"continuous_usage_stats": true}),
            );
        }
        let extra = spec.extra.as_ref().map(|e| &e.0);
        if let Some(extra) = extra {
            merge(&mut b, extra);
        }
        if let Some(t) = spec.temperature {
            b.insert("temperature".into(), json!(t));
        }
        if let Some(p) = spec.top_p {
            b.insert("top_p".into(), json!(p));
        }
        let mut warnings = Vec::new();
        let mut own = |b: &mut Map<String, Value>, path: &[&str], value: Option<Value>| {
            let given = lookup(extra, path);
            let key = path.join(".");
            if let Some(g) = given
                && Some(g) != value.as_ref()
            {
                warnings.push(match &value {
                    Some(v) => format!(
                        "--extra-body sets \"{key}\": {g}, loadgen's {v} wins (the measurement depends on it)"
                    ),
                    None => format!(
                        "--extra-body sets \"{key}\": loadgen leaves it out here (the measurement depends on it)"
                    ),
                });
            }
            set(b, path, value);
        };
        own(&mut b, &["model"], Some(json!(spec.model)));
        if generates {
            own(&mut b, &["stream"], Some(json!(spec.stream)));
        }
        if spec.stream && wire.stream_options() {
            own(
                &mut b,
                &["stream_options", "include_usage"],
                Some(json!(true)),
            );
        } else if !spec.stream {
            // vLLM refuses stream_options without stream.
            own(&mut b, &["stream_options"], None);
        }
        if spec.force_length && generates {
            own(&mut b, &["ignore_eos"], Some(json!(true)));
            own(&mut b, &["min_tokens"], None);
        }
        if let Some(rf) = &spec.response_format {
            own(&mut b, &["response_format"], Some(rf.clone()));
        }
        for key in PER_REQUEST {
            if let Some(g) = lookup(extra, &[key]) {
                warnings.push(format!(
                    "--extra-body sets \"{key}\": {}, each request's own value wins (use --max-tokens or the prompt flags)",
                    servbench::jsonl::excerpt(&g.to_string(), 60)
                ));
            }
            b.remove(*key);
        }
        let head = |b: &Map<String, Value>| {
            let mut head = serde_json::to_vec(&Value::Object(b.clone())).unwrap_or_default();
            // `{...}` becomes `{...,` (the map is never empty: it has the model).
            head.pop();
            head.push(b',');
            head
        };
        let heads = if spec.adapters.is_empty() {
            vec![head(&b)]
        } else {
            let mut named = b.clone();
            spec.adapters
                .iter()
                .map(|a| {
                    named.insert("model".into(), json!(a));
                    head(&named)
                })
                .collect()
        };
        (
            Template {
                api: spec.api,
                force_length: spec.force_length && generates,
                heads,
                fixed: b,
                images: None,
            },
            warnings,
        )
    }

    /// Every request carries `images` (chat), drawn from `seed`.
    pub fn with_images(mut self, images: Images, seed: u64) -> Template {
        self.images = Some((images, seed, Arc::new(AtomicU64::new(0))));
        self
    }

    /// The images each request carries.
    pub fn images(&self) -> Option<Images> {
        self.images.as_ref().map(|i| i.0)
    }

    /// The body of one request, naming adapter `adapter` (an index into the spec's
    /// `adapters`; 0 without them).
    pub fn build(&self, adapter: usize, prompt: &PromptText, max_tokens: u32) -> Bytes {
        let urls = match &self.images {
            Some((images, seed, drawn)) => {
                images.data_urls(seed ^ drawn.fetch_add(1, Ordering::Relaxed))
            }
            None => Vec::new(),
        };
        let text_len = match prompt {
            PromptText::Text(t) => t.len(),
            PromptText::Messages(_) => 256,
        };
        let images_len: usize = urls.iter().map(|u| u.len() + 64).sum();
        let head = &self.heads[adapter.min(self.heads.len() - 1)];
        let mut out = Vec::with_capacity(head.len() + text_len + text_len / 8 + 96 + images_len);
        out.extend_from_slice(head);
        let wire = self.api.wire();
        if let Some(key) = wire.max_tokens_key() {
            let _ = write!(out, "\"{key}\":{max_tokens},");
            if self.force_length {
                let _ = write!(out, "\"min_tokens\":{max_tokens},");
            }
        }
        wire.put_prompt(&mut out, prompt, &urls);
        out.push(b'}');
        Bytes::from(out)
    }

    /// The temperature every request asks for (absent where `--extra-body` set it to null).
    pub fn temperature(&self) -> Option<f64> {
        self.fixed.get("temperature").and_then(Value::as_f64)
    }

    pub fn top_p(&self) -> Option<f64> {
        self.fixed.get("top_p").and_then(Value::as_f64)
    }

    /// `chat_template_kwargs` as sent, for counting a chat prompt's tokens the same way.
    pub fn chat_template_kwargs(&self) -> Option<&Value> {
        self.fixed.get("chat_template_kwargs")
    }
}

/// What a point's requests share for their bodies: the template, and the output tokens asked
/// for unless a listed prompt says otherwise.
pub struct Bodies {
    pub template: Template,
    /// `--lora`, with the run's seed: which adapter's head each request takes.
    pub lora: Option<(crate::lora::LoraMix, u64)>,
    pub max_tokens: u32,
    /// `--max-tokens` was given: it overrides a prompt file's own `max_tokens`.
    pub max_given: bool,
}

impl Bodies {
    /// The body of request `id` of a point, of `max_tokens` output tokens.
    pub fn build(&self, id: u64, prompt: &PromptText, max_tokens: u32) -> Bytes {
        let adapter = self.lora.as_ref().map_or(0, |(m, seed)| m.pick(*seed, id));
        self.template.build(adapter, prompt, max_tokens)
    }

    /// The output tokens of a prompt with its own `max_tokens` (a listed one's).
    pub fn max_for(&self, own: Option<u32>) -> u32 {
        match own.filter(|_| !self.max_given) {
            Some(m) => m,
            None => self.max_tokens,
        }
    }
}

fn lookup<'a>(map: Option<&'a Map<String, Value>>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let v = map?.get(*first)?;
    if rest.is_empty() {
        Some(v)
    } else {
        lookup(v.as_object(), rest)
    }
}

/// Sets (or, with `None`, removes) the value at `path`, creating objects on the way.
fn set(map: &mut Map<String, Value>, path: &[&str], value: Option<Value>) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    if rest.is_empty() {
        match value {
            Some(v) => {
                map.insert(first.to_string(), v);
            }
            None => {
                map.remove(*first);
            }
        }
        return;
    }
    if value.is_none() && !map.contains_key(*first) {
        return;
    }
    let entry = map
        .entry(first.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    if let Value::Object(inner) = entry {
        set(inner, rest, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> BodySpec {
        BodySpec {
            api: Api::Chat,
            model: "m".into(),
            adapters: Vec::new(),
            stream: true,
            force_length: true,
            usage_per_chunk: true,
            temperature: None,
            top_p: None,
            extra: (!extra.is_empty()).then(|| ExtraBody::parse(extra).unwrap()),
            response_format: None,
        }
    }

    fn body(t: &Template, prompt: &str, max: u32) -> Value {
        serde_json::from_slice(&t.build(0, &PromptText::Text(prompt.into()), max)).unwrap()
    }

    #[test]
    fn a_response_format_is_in_every_body_and_wins_over_extra_body() {
        let rf = json!({"type": "json_schema", "json_schema": {"name": "s", "schema": {"type": "object"}}});
        let (t, warnings) = Template::new(&BodySpec {
            response_format: Some(rf.clone()),
            ..spec(r#"{"response_format":{"type":"text"}}"#)
        });
        assert_eq!(body(&t, "hi", 8)["response_format"], rf);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("\"response_format\""), "{warnings:?}");
    }

    #[test]
    fn extra_body_merges_nested_and_our_fields_win_with_a_warning() {
        let (t, warnings) = Template::new(&spec(
            r#"{"chat_template_kwargs":{"enable_thinking":false},"stream_options":{"include_usage":false,"x":1},
                "max_tokens":5,"temperature":0.7,"model":"other","top_k":20}"#,
        ));
        let v = body(&t, "hi \"there\"", 64);
        assert_eq!(v["chat_template_kwargs"], json!({"enable_thinking": false}));
        assert_eq!(
            v["stream_options"],
            json!({"include_usage": true, "continuous_usage_stats": true, "x": 1})
        );
        assert_eq!(v["max_tokens"], json!(64));
        assert_eq!(v["min_tokens"], json!(64));
        assert_eq!(v["ignore_eos"], json!(true));
        assert_eq!(v["model"], json!("m"));
        assert_eq!(v["temperature"], json!(0.7));
        assert_eq!(v["top_k"], json!(20));
        assert_eq!(v["messages"][0]["content"], json!("hi \"there\""));
        let all = warnings.join("\n");
        for key in [
            "\"model\"",
            "\"stream_options.include_usage\"",
            "\"max_tokens\"",
        ] {
            assert!(all.contains(key), "{key} in {all}");
        }
        assert_eq!(warnings.len(), 3, "{all}");
        assert_eq!(t.temperature(), Some(0.7));
    }

    #[test]
    fn flags_beat_extra_body_and_no_stream_drops_stream_options() {
        let mut s = spec(r#"{"temperature":0.5,"stream_options":{"continuous_usage_stats":true}}"#);
        s.temperature = Some(1.0);
        s.top_p = Some(0.9);
        s.stream = false;
        s.force_length = false;
        s.api = Api::Completions;
        let (t, warnings) = Template::new(&s);
        let v = body(&t, "a b", 3);
        assert_eq!(v["temperature"], json!(1.0));
        assert_eq!(v["top_p"], json!(0.9));
        assert_eq!(v["stream"], json!(false));
        assert!(v.get("stream_options").is_none());
        assert!(v.get("min_tokens").is_none() && v.get("ignore_eos").is_none());
        assert_eq!(v["prompt"], json!("a b"));
        assert_eq!(warnings.len(), 1, "{warnings:?}");
    }

    #[test]
    fn plain_bodies_are_what_they_always_were() {
        let (t, warnings) = Template::new(&spec(""));
        assert!(warnings.is_empty());
        let v = body(&t, "x", 8);
        assert_eq!(
            v,
            json!({"model":"m","stream":true,"temperature":0.0,"max_tokens":8,"min_tokens":8,"ignore_eos":true,
                   "stream_options":{"include_usage":true,"continuous_usage_stats":true},
                   "messages":[{"role":"user","content":"x"}]})
        );
        let m = json!([{"role":"system","content":"s"},{"role":"user","content":"u"}]);
        let v: Value =
            serde_json::from_slice(&t.build(0, &PromptText::Messages(m.clone()), 2)).unwrap();
        assert_eq!(v["messages"], m);
    }

    #[test]
    fn each_lora_adapter_has_its_head_and_extra_body_cannot_rename_it() {
        let mut s = spec(r#"{"model":"other","top_k":3}"#);
        s.adapters = vec!["sql".into(), "chat\"".into()];
        let (t, warnings) = Template::new(&s);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        for (k, name) in ["sql", "chat\""].into_iter().enumerate() {
            let v: Value =
                serde_json::from_slice(&t.build(k, &PromptText::Text("x".into()), 4)).unwrap();
            assert_eq!(v["model"], json!(name));
            assert_eq!(
                (v["top_k"].clone(), v["max_tokens"].clone()),
                (json!(3), json!(4))
            );
        }
        // Round-robin over two adapters: request i takes head i mod 2.
        let mix =
            crate::lora::LoraMix::new(s.adapters.clone(), crate::lora::Assignment::RoundRobin, 1.0);
        let bodies = Bodies {
            template: t,
            lora: Some((mix, 7)),
            max_tokens: 4,
            max_given: true,
        };
        let model = |id| -> Value {
            serde_json::from_slice::<Value>(&bodies.build(id, &PromptText::Text("x".into()), 4))
                .unwrap()["model"]
                .clone()
        };
        assert_eq!(
            [model(0), model(1), model(2)],
            [json!("sql"), json!("chat\""), json!("sql")]
        );
    }

    #[test]
    fn extra_body_errors_are_one_line() {
        assert!(ExtraBody::parse("[1]").unwrap_err().contains("JSON object"));
        assert!(ExtraBody::parse("{").unwrap_err().contains("not JSON"));
        let e = ExtraBody::parse("@/nonexistent/x.json").unwrap_err();
        assert!(e.starts_with("cannot read /nonexistent/x.json"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("b.json");
        std::fs::write(&f, r#"{"a":{"b":1}}"#).unwrap();
        let e = ExtraBody::parse(&format!("@{}", f.display())).unwrap();
        assert_eq!(e.0["a"]["b"], json!(1));
    }

    #[test]
    fn extra_body_asking_for_several_choices_is_refused() {
        for bad in [
            r#"{"n":4}"#,
            r#"{"best_of":2}"#,
            r#"{"echo":true}"#,
            r#"{"n":"4"}"#,
        ] {
            let e = ExtraBody::parse(bad).unwrap_err();
            assert!(e.contains("one answer per request"), "{bad}: {e}");
        }
        for fine in [r#"{"n":1}"#, r#"{"best_of":null}"#, r#"{"echo":false}"#] {
            assert!(ExtraBody::parse(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn an_endless_extra_body_file_is_one_error_naming_the_bound() {
        let e = ExtraBody::parse("@/dev/zero").unwrap_err();
        assert!(e.contains("/dev/zero: larger than 64 MiB"), "{e}");
    }
}
