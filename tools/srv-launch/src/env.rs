//! The environment a server runs in, recorded once in its `server` record: the engine's own
//! version (its HTTP endpoint, else the program's `--version`), the GPUs it was given (model,
//! count), the driver and CUDA version, the kernel, the CPU model and the host name. What
//! cannot be learned is left out; none of it stops a launch, and all of it together takes at
//! most [`CAPTURE_BOUND`]: every program run for it (nvidia-smi, the engine's `--version`) is
//! stopped at what is left of that bound, whole process group and all, and the fields it
//! would have given are left out.

use servbench::exec::{Bounds, Exec, gpu, shell_quote};
use servbench::record::{HostEnv, ServerEnv};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// The most the whole capture takes.
pub(crate) const CAPTURE_BOUND: Duration = Duration::from_secs(15);

/// What one `PROGRAM --version` may print (its first lines are all that is read).
const VERSION_OUTPUT_CAP: usize = 64 << 10;

/// Where and how to capture.
pub(crate) struct Capture<'a> {
    pub url: &'a str,
    pub version_at: &'a [(&'a str, &'a str)],
    /// The engine's program, asked `--version` when its endpoint gives none; `None` for a
    /// `--cmd` server (its program is `sh`, whose `--version` is no engine's).
    pub program: Option<&'a str>,
    /// The `--gpus` list (only those GPUs are described).
    pub gpus: Option<&'a str>,
    pub nvidia_smi: &'a str,
    /// Set by SIGINT/SIGTERM: the capture stops at once.
    pub stop: &'static AtomicBool,
    /// The host as the pre-flight check read it before the server started.
    pub host: Option<HostEnv>,
}

impl Capture<'_> {
    /// What is left of the capture's bound, as the bounds of one more run; `None` when it is
    /// spent or a signal came.
    fn bounds(&self, end: Instant, cap: usize) -> Option<Bounds> {
        let left = end.saturating_duration_since(Instant::now());
        let stopped = self.stop.load(std::sync::atomic::Ordering::SeqCst);
        (!left.is_zero() && !stopped)
            .then(|| Bounds::new(left.min(Bounds::QUERY.deadline), cap).stopped_by(self.stop))
    }
}

/// Gathers the environment of the server on `exec`'s host, within [`CAPTURE_BOUND`].
pub(crate) fn gather(exec: &dyn Exec, c: &Capture) -> ServerEnv {
    let end = Instant::now() + CAPTURE_BOUND;
    let mut env = ServerEnv {
        engine_version: http_version(c.url, c.version_at, end).or_else(|| {
            let bounds = c.bounds(end, VERSION_OUTPUT_CAP)?;
            program_version(exec, c.program?, bounds)
        }),
        host: c.host.clone().map(Box::new),
        ..ServerEnv::default()
    };
    let inventory = c.bounds(end, Bounds::QUERY.output_cap).and_then(|b| {
        gpu::inventory(exec, c.nvidia_smi, &gpu::indices_of(c.gpus), b)
            .ok()
            .flatten()
    });
    if let Some(inv) = inventory {
        env.gpu_model = inv.names.first().cloned();
        env.gpu_count = (!inv.names.is_empty()).then_some(inv.names.len() as u32);
        env.driver_version = inv.driver_version;
        env.cuda_version = inv.cuda_version;
    }
    let host = c
        .bounds(end, Bounds::QUERY.output_cap)
        .and_then(|b| {
            exec.run(
                "echo \"kernel=$(uname -r)\"; \
                 echo \"hostname=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)\"; \
                 echo \"cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2-)\"",
                b,
            )
            .ok()
        })
        .filter(|o| !o.cut)
        .map(|o| o.stdout_text())
        .unwrap_or_default();
    for line in host.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = Some(v.trim().to_string()).filter(|v| !v.is_empty());
        match k {
            "kernel" => env.kernel = v,
            "hostname" => env.hostname = v,
            "cpu" => env.cpu_model = v,
            _ => {}
        }
    }
    env
}

/// The version the server reports over HTTP: the first (path, JSON field) that answers with
/// one, before `end`.
fn http_version(url: &str, version_at: &[(&str, &str)], end: Instant) -> Option<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .no_proxy()
        .build()
        .ok()?;
    let base = url.trim_end_matches('/');
    version_at.iter().find_map(|(path, field)| {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let ask = async {
            let r = client.get(format!("{base}{path}")).send().await.ok()?;
            if !r.status().is_success() {
                return None;
            }
            let body: serde_json::Value = r.json().await.ok()?;
            match &body[*field] {
                serde_json::Value::String(s) => looks_like_version(s),
                serde_json::Value::Number(n) => looks_like_version(&n.to_string()),
                _ => None,
            }
        };
        // The timer is made inside the runtime, which drives it.
        let got = rt.block_on(async { tokio::time::timeout(left, ask).await });
        got.ok().flatten()
    })
}

/// The version in the first lines of `program --version`, run within `bounds` (its group is
/// killed at the deadline: an engine whose `--version` ignores SIGTERM gets SIGKILL).
fn program_version(exec: &dyn Exec, program: &str, bounds: Bounds) -> Option<String> {
    let out = exec
        .run(
            &format!("exec {} --version 2>&1", shell_quote(program)),
            bounds,
        )
        .ok()?;
    out.stdout_text()
        .lines()
        .take(5)
        .find_map(looks_like_version)
}

/// `text` (trimmed, at most 200 characters) when it names a version: a word like `0.6.3`,
/// `v1.2`, `b4589` or `12.4.1+cu124` in it; `None` for an error message or anything else
/// ("sh: 0: Illegal option --" has a digit and is no version).
pub(crate) fn looks_like_version(text: &str) -> Option<String> {
    let text = text.trim();
    let is_version = |w: &str| {
        let w = w.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | '"' | '\''));
        let core = w.trim_start_matches(['v', 'V', 'b']);
        let numeric: String = core
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let dotted = numeric.split('.').filter(|p| !p.is_empty()).count() >= 2;
        // A build number alone (llama.cpp's b4589, version 4589) is one too.
        let build = w.starts_with('b') && numeric.len() >= 3 && !numeric.contains('.');
        let rest = &core[numeric.len()..];
        let clean_rest = rest
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-+._".contains(c));
        !numeric.is_empty() && (dotted || build) && clean_rest
    };
    let lowered = text.to_ascii_lowercase();
    let error = [
        "error",
        "illegal",
        "unknown",
        "not found",
        "invalid",
        "usage",
        "no such",
    ]
    .iter()
    .any(|e| lowered.contains(e));
    (!text.is_empty()
        && !error
        && (text.split_whitespace().any(is_version) || is_bare_number(text)))
    .then(|| text.chars().take(200).collect())
}

/// A version given as a bare number (`/props` build numbers such as `4589`).
fn is_bare_number(text: &str) -> bool {
    !text.is_empty() && text.len() <= 12 && text.chars().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_told_from_error_messages() {
        for v in [
            "0.6.3",
            "vLLM 0.6.3.post1",
            "v0.4.0",
            "version: 4589 (b4589)",
            "b4589",
            "4589",
            "trtllm-serve 0.17.0",
            "2.5.1+cu124",
            "Python 3.12.3",
        ] {
            assert_eq!(looks_like_version(v).as_deref(), Some(v), "{v}");
        }
        for not in [
            "sh: 0: Illegal option --",
            "error: unexpected argument '--version' found",
            "usage: server [-h] [-p 8000]",
            "listening on port 8000",
            "",
            "x86_64",
        ] {
            assert_eq!(looks_like_version(not), None, "{not}");
        }
    }
}
