//! srv-launch's `server` records: one row per server, its startup phases.

use crate::notes::note::{Facts, Under};
use crate::render::{Cell, Column, Table, human};
use crate::tables::view::View;
use servbench::record::{ServerRecord, label};

/// The servers, with the notes on their hosts.
pub fn section(facts: &Facts, view: &View) -> Vec<Table> {
    if facts.inputs.servers.is_empty() {
        return Vec::new();
    }
    let mut t = server_table(&facts.inputs.servers);
    if !view.notes.is_empty() {
        t.notes = view.notes_under(Under::Servers, facts);
    }
    vec![t]
}

pub fn server_table(servers: &[ServerRecord]) -> Table {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut table = Table::new(
        "servers",
        vec![
            col("engine", "engine"),
            col("model", "model"),
            col("host", "host"),
            col("pid", "pid"),
            col("url", "url"),
            col("ready_s", "ready s"),
            col("startup", "startup phases"),
        ],
    );
    // The same server read from several inputs (a launch record teed into each file, or
    // passed on by srv-kill) is one server: listed once.
    let mut seen: Vec<(&str, &str, u32, &str)> = Vec::new();
    for s in servers {
        let id = (s.engine.as_str(), s.host.as_str(), s.pid, s.url.as_str());
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        table.push(
            vec![
                Cell::Text(s.engine.to_string()),
                // srv-launch names the model in its labels when the engine has no model field.
                s.model
                    .clone()
                    .or_else(|| s.labels.get(label::MODEL).cloned())
                    .map_or(Cell::Empty, Cell::Text),
                Cell::Text(s.host.clone()),
                Cell::int(s.pid),
                Cell::Text(s.url.clone()),
                Cell::num(Some(s.ready_s)),
                s.startup
                    .as_ref()
                    .and_then(startup_phases)
                    .map_or(Cell::Empty, Cell::Text),
            ],
            0,
        );
        if s.startup.as_ref().is_some_and(|st| st.log_cut) {
            table.notes.push(format!(
                "{} pid {} on {}: its log outgrew srv-launch's read cap during startup, so later phases are missing",
                s.engine, s.pid, s.host
            ));
        }
    }
    table
}

/// A startup's phases in one cell: the engine's own duration where it printed one (`weights
/// 12.1 s`), else when the line was seen after launch (`kv_cache @47.2 s`).
fn startup_phases(startup: &servbench::record::Startup) -> Option<String> {
    let parts: Vec<String> = startup
        .phases
        .iter()
        .map(|p| match p.took_s {
            Some(took) => format!("{} {} s", p.name, human(took)),
            None => format!("{} @{} s", p.name, human(p.at_s)),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join(", "))
}
