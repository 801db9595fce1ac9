//! The pre-flight verdict of each server's host record (srv-launch's `env.host`), under the
//! servers table: the same warnings srv-launch printed before the server started
//! (servbench::host::preflight), so a report read later still says what the box cost.

use crate::notes::note::Facts;
use servbench::exec::gpu;
use servbench::host::preflight;
use servbench::presets::Layout;

/// One note per warning per server (each server once), naming the server.
pub fn preflight_warnings(facts: &Facts) -> Vec<String> {
    let servers = &facts.inputs.servers;
    let mut out = Vec::new();
    let mut seen: Vec<(&str, u32, &str)> = Vec::new();
    for s in servers {
        let id = (s.host.as_str(), s.pid, s.url.as_str());
        let Some(h) = s.env.as_ref().and_then(|e| e.host.as_ref()) else {
            continue;
        };
        if seen.contains(&id) {
            continue;
        }
        seen.push(id);
        let Layout { tp, pp } = Layout::from_labels(&s.labels);
        let gpus = preflight::engine_gpus(h, &gpu::indices_of(s.gpus.as_deref()), tp, pp);
        for w in preflight::check(h, &gpus, tp) {
            out.push(format!(
                "pre-flight ({} pid {} on {}): {}",
                s.engine, s.pid, s.host, w.text
            ));
        }
    }
    out
}

/// Bytes of the allreduce the best-group note prices when no model is given (a 7168-wide BF16
/// hidden state of one token: a large model's decode allreduce).
pub const GROUP_NOTE_BYTES: f64 = 14336.0;

/// For each host with a topology matrix (each once): the best-connected group of 2, 4 and 8
/// GPUs (which `--gpus` to give a TP engine of that size) with its slowest link, and, with a
/// hardware card, the allreduce the card's model predicts for that group at `bytes` (the
/// roofline model's decode allreduce at batch 1, else [`GROUP_NOTE_BYTES`]).
pub fn best_groups(facts: &Facts) -> Vec<String> {
    let (servers, card) = (&facts.inputs.servers, facts.card());
    let bytes = facts
        .roofline
        .as_ref()
        .map_or(GROUP_NOTE_BYTES, |r| r.model.allreduce_bytes(1));
    let mut out = Vec::new();
    let mut seen: Vec<&str> = Vec::new();
    for s in servers {
        let Some(h) = s.env.as_ref().and_then(|e| e.host.as_ref()) else {
            continue;
        };
        let Some(t) = &h.topology else { continue };
        if seen.contains(&s.host.as_str()) {
            continue;
        }
        seen.push(&s.host);
        let mut parts = Vec::new();
        for size in [2usize, 4, 8] {
            let Some(group) = t.best_group(size) else {
                continue;
            };
            let list: Vec<String> = group.iter().map(u32::to_string).collect();
            let link = t.worst_link(&group).map_or("?".into(), |l| l.words());
            let cost = card.map_or(String::new(), |hw| {
                let (ic, _) = servbench::host::topo::interconnect_for(&hw.interconnect, h, &group);
                let c = ic.allreduce(size as u32, bytes);
                format!(", allreduce {:.1} us ({})", c.us, c.algo.name())
            });
            parts.push(format!("{size}: --gpus {} ({link}{cost})", list.join(",")));
        }
        if !parts.is_empty() {
            let priced = card.map_or(String::new(), |hw| {
                format!(" (allreduce of {bytes:.0} bytes on {})", hw.name)
            });
            out.push(format!(
                "best-connected GPUs on {}{priced}: {}",
                s.host,
                parts.join("; ")
            ));
        }
    }
    out
}
