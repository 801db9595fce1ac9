//! Tables for people (aligned text, Markdown) and for other programs (CSV, TSV, JSON): one
//! structure, several renderings, so every format shows the same figures.

use serde_json::{Map, Value, json};
use servbench::cli::printable;
use std::fmt::Write;

/// Output format of `summarize`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for a terminal.
    Text,
    /// Markdown tables (for issues, PRs, notebooks).
    Md,
    Csv,
    Tsv,
    /// One JSON document: tables with their rows as objects, and the notes.
    Json,
}

/// One cell.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Empty,
    Text(String),
    /// A number; `ci` is the half-width of its 95% interval (repeats).
    Num {
        value: f64,
        ci: Option<f64>,
    },
    /// A count or an integer parameter.
    Int(i64),
    /// A number printed with a fixed number of decimals, so a column of them (shares in %)
    /// reads in one format: `100.0` above `99.8`, never `100` above `99.8`.
    Fixed {
        value: f64,
        decimals: usize,
    },
}

impl Cell {
    pub fn int(value: impl TryInto<i64>) -> Cell {
        value.try_into().map_or(Cell::Empty, Cell::Int)
    }

    pub fn num(value: Option<f64>) -> Cell {
        match value {
            Some(v) if v.is_finite() => Cell::Num { value: v, ci: None },
            _ => Cell::Empty,
        }
    }

    /// A percentage, one decimal in every row.
    pub fn pct(value: Option<f64>) -> Cell {
        match value {
            Some(v) if v.is_finite() => Cell::Fixed {
                value: v,
                decimals: 1,
            },
            _ => Cell::Empty,
        }
    }

    fn human(&self) -> String {
        match self {
            Cell::Empty => "-".to_string(),
            Cell::Text(t) => t.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Num { value, ci: None } => human(*value),
            Cell::Fixed { value, decimals } => format!("{value:.decimals$}"),
            Cell::Num {
                value,
                ci: Some(ci),
            } if *ci == 0.0 => human(*value),
            Cell::Num {
                value,
                ci: Some(ci),
            } => {
                let d = decimals(*value);
                format!("{value:.d$} ± {ci:.d$}")
            }
        }
    }

    fn machine(&self) -> String {
        match self {
            Cell::Empty => String::new(),
            Cell::Text(t) => t.clone(),
            Cell::Int(i) => i.to_string(),
            Cell::Num { value, .. } | Cell::Fixed { value, .. } => machine(*value),
        }
    }

    fn json(&self) -> Value {
        match self {
            Cell::Empty => Value::Null,
            Cell::Text(t) => json!(t),
            Cell::Int(i) => json!(i),
            Cell::Num { value, .. } | Cell::Fixed { value, .. } => json!(round6(*value)),
        }
    }
}

/// Decimals that keep about three significant digits without noise.
fn decimals(v: f64) -> usize {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    }
}

pub fn human(v: f64) -> String {
    let d = decimals(v);
    let s = format!("{v:.d$}");
    // 99.96 rounds to "100.0" at one decimal: print it as the 100 it became.
    match s.parse::<f64>() {
        Ok(r) if decimals(r) < d => format!("{r:.*}", decimals(r)),
        _ => s,
    }
}

fn round6(v: f64) -> f64 {
    if v.abs() >= 1e12 {
        v
    } else {
        (v * 1e6).round() / 1e6
    }
}

fn machine(v: f64) -> String {
    let s = format!("{:.6}", round6(v));
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A column: a stable machine name (for CSV headers and `--cols`) and a header for people.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub header: String,
}

#[derive(Debug, Clone, Default)]
pub struct Table {
    /// What the table shows (`load points`, `collectives`, ...).
    pub title: String,
    /// Keys that are the same on every row, shown once above the table.
    pub context: Vec<(String, String)>,
    pub columns: Vec<Column>,
    pub rows: Vec<Vec<Cell>>,
    /// Group number per row: text output leaves a blank line where it changes.
    pub groups: Vec<usize>,
    /// Plain sentences under the table.
    pub notes: Vec<String>,
}

impl Table {
    pub fn new(title: &str, columns: Vec<Column>) -> Table {
        Table {
            title: title.to_string(),
            columns,
            ..Table::default()
        }
    }

    pub fn push(&mut self, row: Vec<Cell>, group: usize) {
        self.rows.push(row);
        self.groups.push(group);
    }

    fn has_ci(&self, col: usize) -> bool {
        self.rows
            .iter()
            .any(|r| matches!(r.get(col), Some(Cell::Num { ci: Some(_), .. })))
    }

    /// `k=v ...` for the people's formats (escaped: labels come from outside).
    fn context_line(&self) -> String {
        self.context
            .iter()
            .map(|(k, v)| format!("{}={}", printable(k), printable(v)))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Aligned text: `# title  context` line, header, rows; numbers right-aligned. Text from
    /// outside (labels, error messages) has its control characters escaped for the terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let ctx = self.context_line();
        let _ = writeln!(
            out,
            "# {}{}",
            printable(&self.title),
            if ctx.is_empty() {
                String::new()
            } else {
                format!(": {ctx}")
            }
        );
        let cells: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|c| printable(&c.human()).into_owned())
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|c| {
                cells
                    .iter()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .chain([self.columns[c].header.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|c| {
                self.rows
                    .iter()
                    .all(|r| !matches!(r.get(c), Some(Cell::Text(_))))
            })
            .collect();
        let line = |vals: &[String]| {
            let mut s = String::new();
            for (c, v) in vals.iter().enumerate() {
                if c > 0 {
                    s.push_str("  ");
                }
                let pad = widths[c].saturating_sub(v.chars().count());
                if numeric[c] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(v);
                } else {
                    s.push_str(v);
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.trim_end().to_string()
        };
        let headers: Vec<String> = self
            .columns
            .iter()
            .map(|c| printable(&c.header).into_owned())
            .collect();
        let _ = writeln!(out, "{}", line(&headers));
        for (i, r) in cells.iter().enumerate() {
            if i > 0 && self.groups.get(i) != self.groups.get(i - 1) {
                out.push('\n');
            }
            let _ = writeln!(out, "{}", line(r));
        }
        for n in &self.notes {
            let _ = writeln!(out, "note: {}", printable(n));
        }
        out
    }

    /// The width of the aligned text's header and rows (the `#` line and notes aside).
    pub fn text_width(&self) -> usize {
        self.text()
            .lines()
            .skip(1)
            .take(self.rows.len() + 1 + self.groups.windows(2).filter(|w| w[0] != w[1]).count())
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
    }

    /// Drops the columns named in `droppable`, in that order, until the aligned text fits
    /// `width` characters, and says so in the context (`--wide` shows them); returns the
    /// names dropped.
    pub fn fit_width(&mut self, width: usize, droppable: &[String]) -> Vec<String> {
        let mut dropped = Vec::new();
        for name in droppable {
            if self.text_width() <= width {
                break;
            }
            let Some(c) = self.columns.iter().position(|c| &c.name == name) else {
                continue;
            };
            self.columns.remove(c);
            for r in &mut self.rows {
                if c < r.len() {
                    r.remove(c);
                }
            }
            dropped.push(name.clone());
        }
        if !dropped.is_empty() {
            self.context.push((
                "hidden".into(),
                format!(
                    "{} (to fit {width} columns; --wide shows all)",
                    dropped.join(",")
                ),
            ));
        }
        dropped
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "### {}", printable(&self.title));
        let ctx = self.context_line();
        if !ctx.is_empty() {
            let _ = writeln!(out, "\n`{ctx}`");
        }
        out.push('\n');
        let esc = |s: &str| printable(s).replace('|', "\\|");
        let headers: Vec<String> = self.columns.iter().map(|c| esc(&c.header)).collect();
        let _ = writeln!(out, "| {} |", headers.join(" | "));
        let aligns: Vec<&str> = (0..self.columns.len())
            .map(|c| {
                if self
                    .rows
                    .iter()
                    .all(|r| !matches!(r.get(c), Some(Cell::Text(_))))
                {
                    "---:"
                } else {
                    "---"
                }
            })
            .collect();
        let _ = writeln!(out, "|{}|", aligns.join("|"));
        for r in &self.rows {
            let vals: Vec<String> = r.iter().map(|c| esc(&c.human())).collect();
            let _ = writeln!(out, "| {} |", vals.join(" | "));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                let _ = writeln!(out, "- {}", printable(n));
            }
        }
        out
    }

    /// CSV or TSV: machine names as headers, context keys as leading columns, a `_ci95`
    /// column after each column that has intervals. Notes are not data: they go to the text
    /// formats and JSON only.
    pub fn delimited(&self, sep: char) -> String {
        let quote = |s: &str| -> String {
            if sep == ',' && (s.contains(',') || s.contains('"') || s.contains('\n')) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else if sep == '\t' {
                s.replace(['\t', '\n'], " ")
            } else {
                s.to_string()
            }
        };
        let ci_cols: Vec<bool> = (0..self.columns.len()).map(|c| self.has_ci(c)).collect();
        let mut header: Vec<String> = self.context.iter().map(|(k, _)| quote(k)).collect();
        for (c, col) in self.columns.iter().enumerate() {
            header.push(quote(&col.name));
            if ci_cols[c] {
                header.push(quote(&format!("{}_ci95", col.name)));
            }
        }
        let mut out = String::new();
        let s = sep.to_string();
        let _ = writeln!(out, "{}", header.join(&s));
        for r in &self.rows {
            let mut vals: Vec<String> = self.context.iter().map(|(_, v)| quote(v)).collect();
            for (c, cell) in r.iter().enumerate() {
                vals.push(quote(&cell.machine()));
                if ci_cols[c] {
                    vals.push(match cell {
                        Cell::Num { ci: Some(ci), .. } => machine(*ci),
                        _ => String::new(),
                    });
                }
            }
            let _ = writeln!(out, "{}", vals.join(&s));
        }
        out
    }

    pub fn json(&self) -> Value {
        let rows: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut obj = Map::new();
                for (col, cell) in self.columns.iter().zip(r) {
                    obj.insert(col.name.clone(), cell.json());
                    if let Cell::Num { ci: Some(ci), .. } = cell {
                        obj.insert(format!("{}_ci95", col.name), json!(round6(*ci)));
                    }
                }
                Value::Object(obj)
            })
            .collect();
        let context: Map<String, Value> = self
            .context
            .iter()
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        json!({
            "table": self.title,
            "context": context,
            "rows": rows,
            "notes": self.notes,
        })
    }
}

/// Renders tables in a format, separated by blank lines (text, md) or one after another.
pub fn render(tables: &[Table], format: Format) -> String {
    match format {
        Format::Text => tables
            .iter()
            .map(Table::text)
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Md => tables
            .iter()
            .map(Table::markdown)
            .collect::<Vec<_>>()
            .join("\n"),
        Format::Csv | Format::Tsv => {
            let sep = if format == Format::Csv { ',' } else { '\t' };
            // Several tables in one CSV stream: a blank line between them.
            tables
                .iter()
                .map(|t| t.delimited(sep))
                .collect::<Vec<_>>()
                .join("\n")
        }
        Format::Json => {
            let all: Vec<Value> = tables.iter().map(Table::json).collect();
            let mut s = serde_json::to_string_pretty(&json!({ "tables": all }))
                .unwrap_or_else(|_| "{}".to_string());
            s.push('\n');
            s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table {
        let mut t = Table::new(
            "points",
            vec![
                Column {
                    name: "conc".into(),
                    header: "C".into(),
                },
                Column {
                    name: "tok_s".into(),
                    header: "tok/s".into(),
                },
            ],
        );
        t.context.push(("engine".into(), "sim".into()));
        t.push(vec![Cell::Int(1), Cell::num(Some(36.25))], 0);
        t.push(
            vec![
                Cell::Int(32),
                Cell::Num {
                    value: 250.4,
                    ci: Some(3.26),
                },
            ],
            0,
        );
        t
    }

    #[test]
    fn text_aligns_numbers_right() {
        let text = table().text();
        assert_eq!(
            text,
            "# points: engine=sim\n C    tok/s\n 1     36.2\n32  250 ± 3\n"
        );
    }

    #[test]
    fn a_column_of_shares_prints_one_format_and_rounding_up_drops_the_decimal() {
        assert_eq!(human(99.96), "100");
        assert_eq!(human(9.996), "10.0");
        assert_eq!(human(99.94), "99.9");
        let cells: Vec<String> = [100.0, 99.8, 8.4]
            .iter()
            .map(|v| Cell::pct(Some(*v)).human())
            .collect();
        assert_eq!(cells, ["100.0", "99.8", "8.4"]);
    }

    #[test]
    fn csv_has_context_and_ci_columns() {
        assert_eq!(
            table().delimited(','),
            "engine,conc,tok_s,tok_s_ci95\nsim,1,36.25,\nsim,32,250.4,3.26\n"
        );
    }
}
