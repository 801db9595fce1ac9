//! The environment a server runs in, recorded once in its `server` record: the engine's own
//! version (its HTTP endpoint, else the program's `--version`), the GPUs it was given (model,
//! count), the driver and CUDA version, the kernel, the CPU model and the host name. What
//! cannot be learned is left out; none of it stops a launch.

use servbench::exec::{Exec, gpu, shell_quote};
use servbench::record::ServerEnv;
use std::time::Duration;

/// Gathers the environment of the server at `url` (program `argv0`) on `exec`'s host; `gpus`
/// is the `--gpus` list (only those GPUs are described).
pub(crate) fn gather(
    exec: &dyn Exec,
    url: &str,
    version_at: &[(&str, &str)],
    argv0: &str,
    gpus: Option<&str>,
) -> ServerEnv {
    let mut env = ServerEnv {
        engine_version: http_version(url, version_at).or_else(|| program_version(exec, argv0)),
        ..ServerEnv::default()
    };
    if let Ok(Some(inv)) = gpu::inventory(exec, &gpu::indices_of(gpus)) {
        env.gpu_model = inv.names.first().cloned();
        env.gpu_count = (!inv.names.is_empty()).then_some(inv.names.len() as u32);
        env.driver_version = inv.driver_version;
        env.cuda_version = inv.cuda_version;
    }
    let host = exec
        .run(
            "echo \"kernel=$(uname -r)\"; \
             echo \"hostname=$(hostname 2>/dev/null || cat /proc/sys/kernel/hostname)\"; \
             echo \"cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2-)\"",
        )
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

/// The version the server reports over HTTP: the first (path, JSON field) that answers.
fn http_version(url: &str, version_at: &[(&str, &str)]) -> Option<String> {
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
        rt.block_on(async {
            let r = client.get(format!("{base}{path}")).send().await.ok()?;
            if !r.status().is_success() {
                return None;
            }
            let body: serde_json::Value = r.json().await.ok()?;
            match &body[*field] {
                serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        })
    })
}

/// The first line of `argv0 --version` that names a version (it has a digit), within 10 s.
fn program_version(exec: &dyn Exec, argv0: &str) -> Option<String> {
    let out = exec
        .run(&format!(
            "timeout 10 {} --version 2>&1 | head -5",
            shell_quote(argv0)
        ))
        .ok()?;
    out.stdout_text()
        .lines()
        .map(str::trim)
        .find(|l| l.chars().any(|c| c.is_ascii_digit()))
        .map(|l| l.chars().take(200).collect())
}
