//! What the command line asks of the tables (`--cols`, `--by`, `--no-notes`, `--wide`), and the
//! notes printed under them.

use crate::input::metrics::Metric;
use crate::input::param::Param;
use crate::notes::note::{Facts, Note, Under, under};
use crate::render::Column;

/// Text tables with `--roofline` or `--compare` fit this many columns unless `--wide`.
pub const TEXT_WIDTH: usize = 120;

/// How the tables are shown.
pub struct View<'a> {
    /// `--cols`: the load-points table's columns (None: its defaults).
    pub cols: Option<&'a [Col]>,
    /// `--by`: the keys rows (and plot lines) are grouped by (empty: every varying key but the
    /// load).
    pub by: &'a [String],
    /// The notes printed under the tables: none with `--no-notes`.
    pub notes: &'a [Note],
    /// Text tables are fitted to [`TEXT_WIDTH`] (aligned text without `--wide`).
    pub fit: bool,
    /// `--gpu-hour-cost`: dollars per GPU-hour, for the points' cost per million tokens.
    pub usd_per_gpu_hour: Option<f64>,
}

impl View<'_> {
    /// The sentences of the view's notes under one table.
    pub fn notes_under(&self, table: Under, facts: &Facts) -> Vec<String> {
        under(self.notes, table, facts)
    }
}

/// What a column of the points table shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Col {
    /// A label or a parameter (`conc`, `rate`, `in`, `out`).
    Key(String),
    Metric(Metric),
}

impl Col {
    pub fn parse(name: &str) -> Result<Col, String> {
        let name = name.trim();
        if Param::parse(name).is_some() {
            return Ok(Col::Key(name.to_string()));
        }
        if let Some(label) = name.strip_prefix("label:") {
            return Ok(Col::Key(label.to_string()));
        }
        Metric::parse(name)
            .map(Col::Metric)
            .ok_or_else(|| format!("unknown column '{name}': use {}", Col::names()))
    }

    /// Every column `--cols` takes, the one list `--help` and its error print.
    pub fn names() -> String {
        format!(
            "{}, label:NAME, {}",
            Param::keys(),
            Metric::names_in_short()
        )
    }

    pub fn column(&self) -> Column {
        match self {
            Col::Key(k) => Column {
                name: k.clone(),
                header: Param::parse(k).map_or_else(|| k.clone(), |p| p.header().to_string()),
            },
            Col::Metric(m) => Column {
                name: m.name(),
                header: m.header(),
            },
        }
    }
}
