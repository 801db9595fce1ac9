//! GPU queries through nvidia-smi, on any host: which GPU memory is used and which processes
//! compute there (srv-kill's `--gpu` and its check that a killed server released its memory).

use super::{Exec, ExecError};

/// Used memory per GPU in bytes; `None` where there is no nvidia-smi.
pub fn used_bytes<E: Exec + ?Sized>(exec: &E) -> Result<Option<Vec<u64>>, ExecError> {
    let mib: Option<Vec<u64>> = nvidia_smi_column(exec, "--query-gpu=memory.used")?;
    Ok(mib.map(|m| m.into_iter().map(|mib| mib << 20).collect()))
}

/// Pids of GPU compute processes; `None` where there is no nvidia-smi.
pub fn compute_pids<E: Exec + ?Sized>(exec: &E) -> Result<Option<Vec<u32>>, ExecError> {
    nvidia_smi_column(exec, "--query-compute-apps=pid")
}

/// One numeric column from an nvidia-smi query, a value per line; `None` where there is no
/// nvidia-smi.
fn nvidia_smi_column<T: std::str::FromStr, E: Exec + ?Sized>(
    exec: &E,
    query: &str,
) -> Result<Option<Vec<T>>, ExecError> {
    let out = exec.run(&format!(
        "command -v nvidia-smi >/dev/null 2>&1 || exit 99; \
         nvidia-smi {query} --format=csv,noheader,nounits"
    ))?;
    if out.status != 0 {
        return Ok(None);
    }
    Ok(Some(
        out.stdout_text()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect(),
    ))
}
