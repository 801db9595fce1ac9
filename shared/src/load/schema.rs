//! Structured output (`loadgen --response-format FILE`): a JSON schema sent with every request
//! as vLLM and SGLang take it (`response_format: {"type": "json_schema", "json_schema": {name,
//! schema}}`), and every whole answer checked against it. The verdict is a `request` record's
//! `json`; a point counts them as `json_validity`.

use crate::files::{FileKind, read_text};
use crate::record::JsonVerdict;
use serde_json::{Value, json};

/// The longest error a verdict carries.
const ERROR_CHARS: usize = 160;

/// A schema read from its file, and the validator built from it once.
pub struct ResponseFormat {
    /// The file, as given.
    pub file: String,
    /// `json_schema.name`: the file's stem, as OpenAI's API wants it (`[A-Za-z0-9_-]`, 64 at most).
    pub name: String,
    pub schema: Value,
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for ResponseFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFormat")
            .field("file", &self.file)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ResponseFormat {
    /// Reads and checks the schema; the error is one line naming the file.
    pub fn read(path: &str) -> Result<ResponseFormat, String> {
        let text = read_text(path, FileKind::RequestBody)?;
        let schema: Value =
            serde_json::from_str(&text).map_err(|e| format!("{path}: not JSON: {e}"))?;
        if !schema.is_object() {
            return Err(format!(
                "{path}: a JSON schema is an object ({{\"type\": \"object\", ...}})"
            ));
        }
        let validator = jsonschema::validator_for(&schema).map_err(|e| {
            format!(
                "{path}: not a valid JSON schema: {}",
                one_line(&e.to_string())
            )
        })?;
        let stem = std::path::Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut name: String = stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .take(64)
            .collect();
        if name.is_empty() {
            name = "schema".into();
        }
        Ok(ResponseFormat {
            file: path.to_string(),
            name,
            schema,
            validator,
        })
    }

    /// The body's `response_format`.
    pub fn body(&self) -> Value {
        json!({"type": "json_schema", "json_schema": {"name": self.name, "schema": self.schema}})
    }

    /// The verdict on `reply` (`None`: no whole answer to check).
    pub fn judge(&self, reply: Option<&str>) -> JsonVerdict {
        let Some(reply) = reply else {
            return JsonVerdict {
                valid: None,
                error: None,
            };
        };
        let error = match serde_json::from_str::<Value>(reply.trim()) {
            Err(e) => Some(format!("not JSON: {e}")),
            Ok(v) => self.validator.iter_errors(&v).next().map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("{at}: {e}")
            }),
        };
        JsonVerdict {
            valid: Some(error.is_none()),
            error: error.map(|e| one_line(&e).chars().take(ERROR_CHARS).collect()),
        }
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format(schema: &str) -> (tempfile::TempDir, Result<ResponseFormat, String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("person v1.json");
        std::fs::write(&path, schema).unwrap();
        let f = ResponseFormat::read(path.to_str().unwrap());
        (dir, f)
    }

    #[test]
    fn an_answer_is_valid_json_for_the_schema_or_says_where_not() {
        let (_d, f) = format(
            r#"{"type":"object","properties":{"age":{"type":"integer","minimum":0}},"required":["age"]}"#,
        );
        let f = f.unwrap();
        assert_eq!(f.name, "person_v1");
        assert_eq!(f.body()["json_schema"]["schema"]["required"][0], "age");
        assert_eq!(f.judge(Some(" {\"age\": 3}\n")).valid, Some(true));
        let bad = f.judge(Some("{\"age\": -1}"));
        assert_eq!(bad.valid, Some(false));
        assert!(bad.error.unwrap().starts_with("/age: "));
        let broken = f.judge(Some("{\"age\": 3"));
        assert!(broken.error.unwrap().starts_with("not JSON: "));
        assert_eq!(f.judge(None).verdict(), crate::record::Verdict::NotJudged);
    }

    #[test]
    fn a_bad_schema_file_is_one_line_naming_it() {
        for bad in ["{nope", "[1]", r#"{"type": "no-such-type"}"#] {
            let (_d, f) = format(bad);
            let e = f.unwrap_err();
            assert!(e.contains("person v1.json: "), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
