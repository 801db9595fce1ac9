//! The pre-flight check before the server starts: the host read once (servbench::host, every
//! program bounded, all of it within [`PREFLIGHT_BOUND`]), its warnings printed on stderr, and
//! with `--strict-preflight` a refusal (exit 3) on any. The host goes into the record's
//! `env.host`; read before the server starts, every compute process on a GPU is someone else's.

use crate::Plan;
use servbench::cli;
use servbench::exec::{Bounds, Exec, gpu};
use servbench::host::{self, preflight};
use servbench::record::HostEnv;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The most the whole host capture takes.
pub(crate) const PREFLIGHT_BOUND: Duration = Duration::from_secs(15);

/// Reads the host, prints its warnings, and refuses under `--strict-preflight`; `None` when
/// nothing at all could be read.
pub(crate) fn check(
    cfg: &Plan,
    exec: &dyn Exec,
    stop: &'static AtomicBool,
) -> anyhow::Result<Option<HostEnv>> {
    let end = Instant::now() + PREFLIGHT_BOUND;
    let bounds = |cap: usize| {
        let left = end.saturating_duration_since(Instant::now());
        (!left.is_zero() && !stop.load(Ordering::SeqCst))
            .then(|| Bounds::new(left.min(Bounds::QUERY.deadline), cap).stopped_by(stop))
    };
    let (host, _) = host::capture(exec, &cfg.nvidia_smi, &cfg.host_root, &bounds);
    if stop.load(Ordering::SeqCst) {
        return Err(cli::Interrupted.into());
    }
    for why in &host.unreadable {
        cli::warn(format!("pre-flight: could not read the host: {why}"));
    }
    let given = gpu::indices_of(cfg.gpus.as_deref());
    let gpus = preflight::engine_gpus(&host, &given, cfg.tp, cfg.pp);
    let warnings = preflight::check(&host, &gpus, cfg.tp);
    for w in &warnings {
        cli::warn(format!("pre-flight: {}", w.text));
    }
    if cfg.strict_preflight && !warnings.is_empty() {
        let kinds: Vec<&str> = warnings.iter().map(|w| w.kind).collect();
        return Err(cli::Refused(format!(
            "--strict-preflight: not starting the server on {}: {} pre-flight warning(s) ({}); fix them, or launch without --strict-preflight",
            exec.host(),
            warnings.len(),
            kinds.join(", ")
        ))
        .into());
    }
    Ok((host != HostEnv::default()).then_some(host))
}
