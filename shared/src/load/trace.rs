//! Trace files (`--trace FILE`): the requests a production trace recorded, with their send
//! times, input and output lengths and the prefixes they share. loadgen replays them against a
//! server; srv-sim's `--predict` replays the same rows in virtual time. One reader, so both see
//! the same rows, the same skipped ones and the same error lines.
//!
//! Formats (told apart by the first line):
//! - Mooncake-style JSON lines: `timestamp` (milliseconds from the trace's start),
//!   `input_length`, `output_length`, and optional `hash_ids`: one id per block of
//!   `--trace-block` tokens (512 for Mooncake's traces), equal ids meaning an equal block, so a
//!   request whose ids begin like another's shares that prefix with it.
//! - CSV with a header naming a timestamp and the two lengths: Azure's LLM inference traces
//!   (`TIMESTAMP,ContextTokens,GeneratedTokens`, the timestamp a date and time), BurstGPT
//!   (`Timestamp,...,Request tokens,Response tokens,...`, seconds; rows with no response were
//!   failures and are skipped), or any CSV with `timestamp` (seconds), `input_length` and
//!   `output_length`.

use crate::files::{self, FileKind};
use serde_json::Value;

/// The longest prompt a workload may ask for, in tokens (`--input-len`'s bound, and a trace
/// row's): beyond any model's context.
pub const MAX_INPUT_LEN: u32 = 10_000_000;

/// One request of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Send time, seconds from the first row.
    pub at_s: f64,
    pub input_len: u32,
    pub output_len: u32,
    /// One per block of the prompt, in order (empty: no shared prefixes).
    pub hash_ids: Vec<u64>,
}

/// A trace as read, in time order.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub rows: Vec<Row>,
    /// Tokens per hash block.
    pub block: u32,
    /// Things worth a warning (rows skipped, rows reordered).
    pub notes: Vec<String>,
}

/// Reads `path` (see the module's formats); errors name `path:line` and the fix. The file is
/// read line by line within the bounds of [`FileKind::Trace`].
pub fn read(path: &str, block: u32) -> Result<Trace, String> {
    let mut lines = files::lines(path, FileKind::Trace)?;
    let jsonl = lines.peek_non_space()? == Some(b'{');
    let lines = lines.filter(|l| l.as_ref().map_or(true, |(_, text)| !text.trim().is_empty()));
    let mut notes = Vec::new();
    let mut rows = if jsonl {
        read_jsonl(path, lines, block, &mut notes)?
    } else {
        read_csv(path, lines, &mut notes)?
    };
    if rows.is_empty() {
        return Err(format!("{path}: no requests in it"));
    }
    if rows.windows(2).any(|w| w[1].at_s < w[0].at_s) {
        // Stable: rows recorded at the same time keep their order.
        rows.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
        notes.push(format!(
            "{path}: rows are not in time order; sent in time order"
        ));
    }
    let t0 = rows[0].at_s;
    for r in &mut rows {
        r.at_s -= t0;
    }
    Ok(Trace { rows, block, notes })
}

fn read_jsonl(
    path: &str,
    lines: impl Iterator<Item = Result<(usize, String), String>>,
    block: u32,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    let mut no_output = 0u64;
    for line in lines {
        let (n, line) = line?;
        let at = format!("{path}:{n}");
        let v: Value = serde_json::from_str(&line).map_err(|e| format!("{at}: not JSON: {e}"))?;
        let num = |key: &str| -> Result<f64, String> {
            v.get(key).and_then(Value::as_f64).ok_or_else(|| {
                format!("{at}: needs a number \"{key}\" (Mooncake: timestamp in ms, input_length, output_length, hash_ids)")
            })
        };
        let ts_ms = num("timestamp")?;
        let (input, output) = (num("input_length")?, num("output_length")?);
        let input_len = input_length(input, &at, "input_length")?;
        let output_len = length(output, &at, "output_length")?;
        if output_len == 0 {
            // Nothing to generate: as BurstGPT's rows without a response, not a request.
            no_output += 1;
            continue;
        }
        let hash_ids: Vec<u64> = match v.get("hash_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(ids) => ids
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
                .ok_or_else(|| format!("{at}: \"hash_ids\" must be a list of integers"))?,
        };
        let blocks = input_len.div_ceil(block.max(1)) as usize;
        if !hash_ids.is_empty() && hash_ids.len() != blocks {
            return Err(format!(
                "{at}: {} hash_ids for input_length {input_len} in blocks of {block} tokens (expected {blocks}): give the trace's block size with --trace-block (Mooncake 512)",
                hash_ids.len()
            ));
        }
        rows.push(Row {
            at_s: ts_ms / 1000.0,
            input_len,
            output_len,
            hash_ids,
        });
    }
    note_no_output(path, no_output, notes);
    Ok(rows)
}

fn note_no_output(path: &str, no_output: u64, notes: &mut Vec<String>) {
    if no_output > 0 {
        notes.push(format!(
            "{path}: {no_output} rows with 0 output tokens (failed in the trace, or nothing to generate) skipped"
        ));
    }
}

/// An input length: a token count within [`MAX_INPUT_LEN`] (`--input-len`'s bound).
fn input_length(x: f64, at: &str, key: &str) -> Result<u32, String> {
    let n = length(x, at, key)?;
    if n > MAX_INPUT_LEN {
        return Err(format!(
            "{at}: \"{key}\" {n}: at most {} tokens, as --input-len (beyond any model's context)",
            MAX_INPUT_LEN
        ));
    }
    Ok(n)
}

fn length(x: f64, at: &str, key: &str) -> Result<u32, String> {
    if x.is_finite() && x >= 0.0 && x <= f64::from(u32::MAX) && x.fract() == 0.0 {
        Ok(x as u32)
    } else {
        Err(format!("{at}: \"{key}\" {x} is not a token count"))
    }
}

/// Header names of each column (compared lower-case, spaces and underscores ignored).
const TIME: &[&str] = &["timestamp", "time", "arrivaltime"];
const INPUT: &[&str] = &[
    "inputlength",
    "contexttokens",
    "requesttokens",
    "inputtokens",
    "prompttokens",
];
const OUTPUT: &[&str] = &[
    "outputlength",
    "generatedtokens",
    "responsetokens",
    "outputtokens",
    "completiontokens",
];

fn read_csv(
    path: &str,
    mut lines: impl Iterator<Item = Result<(usize, String), String>>,
    notes: &mut Vec<String>,
) -> Result<Vec<Row>, String> {
    let Some(header) = lines.next() else {
        return Ok(Vec::new());
    };
    let (header_no, header) = header?;
    let names: Vec<String> = fields(&header)
        .map(|h| h.to_lowercase().replace([' ', '_'], ""))
        .collect();
    let column = |wanted: &[&str], what: &str| {
        names
            .iter()
            .position(|n| wanted.contains(&n.as_str()))
            .ok_or_else(|| {
                format!(
                    "{path}:{header_no}: no {what} column in the header (one of {}; or JSON lines in Mooncake's format)",
                    wanted.join(", ")
                )
            })
    };
    let (t, i, o) = (
        column(TIME, "timestamp")?,
        column(INPUT, "input length")?,
        column(OUTPUT, "output length")?,
    );
    let mut rows = Vec::new();
    let mut no_output = 0u64;
    for line in lines {
        let (n, line) = line?;
        let at = format!("{path}:{n}");
        let f: Vec<&str> = fields(&line).collect();
        let get = |k: usize| {
            f.get(k)
                .copied()
                .ok_or_else(|| format!("{at}: {} fields, the header has {}", f.len(), names.len()))
        };
        let num = |k: usize, what: &str| -> Result<f64, String> {
            let s = get(k)?;
            s.parse()
                .map_err(|_| format!("{at}: {what} '{s}' is not a number"))
        };
        let output_len = length(num(o, "output length")?, &at, "output length")?;
        if output_len == 0 {
            // BurstGPT marks a failed request with no response tokens.
            no_output += 1;
            continue;
        }
        rows.push(Row {
            at_s: seconds(get(t)?).map_err(|e| format!("{at}: {e}"))?,
            input_len: input_length(num(i, "input length")?, &at, "input length")?,
            output_len,
            hash_ids: Vec::new(),
        });
    }
    note_no_output(path, no_output, notes);
    Ok(rows)
}

fn fields(line: &str) -> impl Iterator<Item = &str> {
    line.split(',').map(|f| f.trim().trim_matches('"'))
}

/// A CSV timestamp in seconds: a number of seconds, or a date and time (Azure's
/// `2023-11-16 18:17:03.9799600`, read as UTC).
fn seconds(s: &str) -> Result<f64, String> {
    if let Ok(x) = s.parse::<f64>() {
        return if x.is_finite() {
            Ok(x)
        } else {
            Err(format!("timestamp '{s}' is not a time"))
        };
    }
    let t = humantime::parse_rfc3339_weak(s).map_err(|_| {
        format!("timestamp '{s}' is neither seconds nor a date and time (2023-11-16 18:17:03.97)")
    })?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64()))
}

impl Trace {
    /// Leaves out the rows a server of `max_model_len` tokens would refuse (prompt and output
    /// over it): a warning naming how many went, or an error when none is left.
    pub fn keep_servable(
        &mut self,
        path: &str,
        max_model_len: u32,
    ) -> Result<Option<String>, String> {
        let rows = self.rows.len();
        self.rows.retain(|r| {
            u64::from(r.input_len) + u64::from(r.output_len) <= u64::from(max_model_len)
        });
        let over = rows - self.rows.len();
        if self.rows.is_empty() {
            return Err(format!(
                "{path}: every row needs more than the server's max_model_len {max_model_len} (prompt and output tokens): none can be served"
            ));
        }
        Ok((over > 0).then(|| format!(
            "{path}: {over} of {rows} rows need more than the server's max_model_len {max_model_len}: they are left out (the server would refuse them)"
        )))
    }

    /// Rows sent in `budget_s` seconds of trace time at `speed` (all: `None`).
    pub fn rows_within(&self, budget_s: Option<f64>, speed: f64) -> usize {
        match budget_s {
            None => self.rows.len(),
            Some(b) => self.rows.partition_point(|r| r.at_s / speed < b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(name: &str, text: &str) -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        let p = p.to_str().unwrap().to_string();
        (dir, p)
    }

    #[test]
    fn mooncake_rows_read_in_seconds_from_the_first() {
        let (_d, p) = write(
            "t.jsonl",
            r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]}
{"timestamp": 27500, "input_length": 600, "output_length": 4, "hash_ids": [46, 99]}

{"timestamp": 30000, "input_length": 10, "output_length": 1}
"#,
        );
        let t = read(&p, 512).unwrap();
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0].at_s, 0.0);
        assert!((t.rows[1].at_s - 0.018).abs() < 1e-9);
        assert!((t.rows[2].at_s - 2.518).abs() < 1e-9);
        assert_eq!(t.rows[1].hash_ids, vec![46, 99]);
        assert!(t.rows[2].hash_ids.is_empty());
        assert!(t.notes.is_empty());
    }

    #[test]
    fn bad_rows_name_the_place_and_the_fix() {
        let cases = [
            (
                r#"{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1]}"#,
                "--trace-block",
            ),
            (r#"{"timestamp": 0, "output_length": 4}"#, "input_length"),
            (
                r#"{"timestamp": 0, "input_length": 6, "output_length": 4, "hash_ids": ["a"]}"#,
                "list of integers",
            ),
            (
                r#"{"timestamp": 0, "input_length": -6, "output_length": 4}"#,
                "not a token count",
            ),
            ("a,b\n1,2\n", "no timestamp column"),
            (
                "timestamp,input_length,output_length\n1,x,3\n",
                "not a number",
            ),
            ("timestamp,input_length,output_length\n1,2\n", "2 fields"),
            (
                "timestamp,input_length,output_length\nyesterday,2,3\n",
                "neither seconds",
            ),
        ];
        for (text, want) in cases {
            let (_d, p) = write("bad.txt", text);
            let e = read(&p, 512).unwrap_err();
            assert!(e.contains(want) && e.contains("bad.txt:"), "{text}: {e}");
        }
    }

    #[test]
    fn a_trace_row_longer_than_any_prompt_is_refused_naming_its_line() {
        let (_d, p) = write(
            "huge.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 2}\n{\"timestamp\": 1, \"input_length\": 4000000000, \"output_length\": 2}\n",
        );
        let e = read(&p, 512).unwrap_err();
        assert!(
            e.contains("huge.jsonl:2:") && e.contains("at most 10000000"),
            "{e}"
        );
        let (_d, p) = write(
            "huge.csv",
            "timestamp,input_length,output_length\n0,10000001,2\n",
        );
        let e = read(&p, 512).unwrap_err();
        assert!(e.contains("huge.csv:2:") && e.contains("at most"), "{e}");
    }

    #[test]
    fn a_csv_header_behind_a_byte_order_mark_is_read() {
        let (_d, p) = write(
            "excel.csv",
            "\u{feff}timestamp,input_length,output_length\r\n0,10,2\r\n1,20,3\r\n",
        );
        let t = read(&p, 512).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert_eq!((t.rows[1].input_len, t.rows[1].output_len), (20, 3));
    }

    #[test]
    fn a_trace_that_is_not_utf8_names_the_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("latin1.csv");
        std::fs::write(
            &p,
            b"timestamp,input_length,output_length,model\n0,10,2,a\n1,20,3,caf\xe9\n",
        )
        .unwrap();
        let e = read(p.to_str().unwrap(), 512).unwrap_err();
        assert!(e.contains("latin1.csv:3:") && e.contains("UTF-8"), "{e}");
    }

    #[test]
    fn rows_with_nothing_to_generate_are_skipped_and_counted() {
        let (_d, p) = write(
            "zero.jsonl",
            "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 0}\n{\"timestamp\": 5, \"input_length\": 8, \"output_length\": 0}\n{\"timestamp\": 9, \"input_length\": 8, \"output_length\": 3}\n",
        );
        let t = read(&p, 512).unwrap();
        assert_eq!(t.rows.len(), 1);
        assert_eq!(t.rows[0].output_len, 3);
        assert!(
            t.notes
                .iter()
                .any(|n| n.contains("2 rows with 0 output tokens")),
            "{:?}",
            t.notes
        );
    }

    #[test]
    fn an_endless_trace_is_one_error_naming_the_bound() {
        let e = read("/dev/zero", 512).unwrap_err();
        assert!(e.contains("/dev/zero:1") && e.contains("16 MiB"), "{e}");
    }

    #[test]
    fn azure_and_burstgpt_csvs() {
        let (_d, p) = write(
            "azure.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n2023-11-16 18:17:04.0319140,3180,8\n",
        );
        let t = read(&p, 512).unwrap();
        assert_eq!(t.rows.len(), 2);
        assert!(
            (t.rows[1].at_s - 0.051954).abs() < 1e-6,
            "{}",
            t.rows[1].at_s
        );
        assert_eq!((t.rows[0].input_len, t.rows[0].output_len), (4808, 10));
        let (_d, p) = write(
            "burst.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n2,ChatGPT,10,20,30,API log\n",
        );
        let t = read(&p, 512).unwrap();
        assert_eq!(t.rows.len(), 2, "the failed row is skipped");
        assert_eq!(t.rows[0].input_len, 10, "sorted by time");
        assert_eq!(t.rows[1].at_s, 3.0);
        assert_eq!(t.notes.len(), 2, "{:?}", t.notes);
    }

    #[test]
    fn rows_over_the_model_length_are_left_out_and_counted() {
        let row = |input_len, output_len| Row {
            at_s: 0.0,
            input_len,
            output_len,
            hash_ids: vec![],
        };
        let mut t = Trace {
            rows: vec![row(10, 6), row(10, 7), row(2, 2)],
            block: 512,
            notes: vec![],
        };
        let note = t.keep_servable("t.csv", 16).unwrap().unwrap();
        assert_eq!(t.rows, vec![row(10, 6), row(2, 2)]);
        assert!(
            note.contains("t.csv: 1 of 3 rows") && note.contains("max_model_len 16"),
            "{note}"
        );
        assert_eq!(t.keep_servable("t.csv", 16).unwrap(), None);
        let e = t.keep_servable("t.csv", 3).unwrap_err();
        assert!(
            e.contains("t.csv: every row needs more than the server's max_model_len 3"),
            "{e}"
        );
    }

    #[test]
    fn a_time_budget_counts_rows_at_the_played_speed() {
        let t = Trace {
            rows: (0..10)
                .map(|i| Row {
                    at_s: f64::from(i),
                    input_len: 1,
                    output_len: 1,
                    hash_ids: vec![],
                })
                .collect(),
            block: 512,
            notes: vec![],
        };
        assert_eq!(t.rows_within(None, 1.0), 10);
        assert_eq!(t.rows_within(Some(3.0), 1.0), 3);
        assert_eq!(t.rows_within(Some(3.0), 2.0), 6);
    }
}
