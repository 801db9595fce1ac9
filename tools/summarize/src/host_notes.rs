//! The pre-flight verdict of each server's host record (srv-launch's `env.host`), under the
//! servers table: the same warnings srv-launch printed before the server started
//! (servbench::host::preflight), so a report read later still says what the box cost.

use servbench::exec::gpu;
use servbench::host::preflight;
use servbench::presets::Layout;
use servbench::record::ServerRecord;

/// One note per warning per server (each server once), naming the server.
pub fn preflight_notes(servers: &[ServerRecord]) -> Vec<String> {
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
