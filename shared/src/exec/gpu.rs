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

/// One GPU at one moment, as nvidia-smi (or a DCGM exporter) reports it; a field it does not
/// give (`[N/A]`, `[Not Supported]`) is `None`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    /// A DCGM exporter's MIG instance (`GPU_I_ID`); nvidia-smi's readings are whole GPUs.
    pub mig_instance: Option<u32>,
    pub name: Option<String>,
    pub util_pct: Option<f64>,
    pub mem_used_mib: Option<f64>,
    pub power_w: Option<f64>,
    pub sm_clock_mhz: Option<f64>,
    pub temp_c: Option<f64>,
    /// Only a DCGM exporter gives these (nvidia-smi's --query-gpu has no PCIe throughput).
    pub pcie_rx_bytes_s: Option<f64>,
    pub pcie_tx_bytes_s: Option<f64>,
}

/// The fields of [`GpuReading`] in nvidia-smi's `--query-gpu` terms, in order.
pub const TELEMETRY_QUERY: &str =
    "index,name,utilization.gpu,memory.used,power.draw,clocks.sm,temperature.gpu";

/// Samples the GPUs `indices` (all when empty) once with `program` (`nvidia-smi`, or its path
/// where it is not on PATH); `None` where there is no such program.
pub fn sample<E: Exec + ?Sized>(
    exec: &E,
    program: &str,
    indices: &[u32],
) -> Result<Option<Vec<GpuReading>>, ExecError> {
    let smi = super::shell_quote(program);
    let select = if indices.is_empty() {
        String::new()
    } else {
        let list: Vec<String> = indices.iter().map(u32::to_string).collect();
        format!(" -i {}", list.join(","))
    };
    let out = exec.run(&format!(
        "command -v {smi} >/dev/null 2>&1 || exit 99; \
         {smi} --query-gpu={TELEMETRY_QUERY} --format=csv,noheader,nounits{select}"
    ))?;
    if out.status != 0 {
        return Ok(None);
    }
    Ok(Some(
        out.stdout_text()
            .lines()
            .filter_map(parse_telemetry_line)
            .collect(),
    ))
}

/// One line of [`TELEMETRY_QUERY`]'s CSV.
pub fn parse_telemetry_line(line: &str) -> Option<GpuReading> {
    let cols: Vec<&str> = line.split(',').map(str::trim).collect();
    if cols.len() < 7 {
        return None;
    }
    let num = |s: &str| s.parse::<f64>().ok().filter(|v| v.is_finite());
    Some(GpuReading {
        index: cols[0].parse().ok()?,
        name: Some(cols[1].to_string()).filter(|n| !n.is_empty()),
        util_pct: num(cols[2]),
        mem_used_mib: num(cols[3]),
        power_w: num(cols[4]),
        sm_clock_mhz: num(cols[5]),
        temp_c: num(cols[6]),
        ..GpuReading::default()
    })
}

/// The host's GPUs as srv-launch records them: names of `indices` (all when empty), the driver
/// and the CUDA version the driver supports; `None` where there is no nvidia-smi.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Inventory {
    pub names: Vec<String>,
    pub driver_version: Option<String>,
    pub cuda_version: Option<String>,
}

pub fn inventory<E: Exec + ?Sized>(
    exec: &E,
    indices: &[u32],
) -> Result<Option<Inventory>, ExecError> {
    // The CUDA version is only in nvidia-smi's banner ("CUDA Version: 12.4").
    let out = exec.run(
        "command -v nvidia-smi >/dev/null 2>&1 || exit 99; \
         nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader; \
         nvidia-smi | grep -o 'CUDA Version: *[0-9.]*'",
    )?;
    if out.status == 99 {
        return Ok(None);
    }
    let mut inv = Inventory::default();
    for line in out.stdout_text().lines() {
        if let Some(v) = line.strip_prefix("CUDA Version:") {
            inv.cuda_version = Some(v.trim().to_string()).filter(|v| !v.is_empty());
            continue;
        }
        let cols: Vec<&str> = line.split(',').map(str::trim).collect();
        let [index, name, driver] = cols[..] else {
            continue;
        };
        let Ok(index) = index.parse::<u32>() else {
            continue;
        };
        if indices.is_empty() || indices.contains(&index) {
            inv.names.push(name.to_string());
            inv.driver_version.get_or_insert_with(|| driver.to_string());
        }
    }
    Ok(Some(inv))
}

/// The GPU indices of a `CUDA_VISIBLE_DEVICES`-style list (`0,1`); UUIDs and other forms are
/// not indices, so they select every GPU.
pub fn indices_of(list: Option<&str>) -> Vec<u32> {
    let Some(list) = list else { return Vec::new() };
    let parsed: Option<Vec<u32>> = list.split(',').map(|s| s.trim().parse().ok()).collect();
    parsed.unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn telemetry_lines_with_missing_fields() {
        let g =
            parse_telemetry_line("1, NVIDIA H100 80GB HBM3, 87, 71234, 512.33, 1980, 61").unwrap();
        assert_eq!(g.index, 1);
        assert_eq!(g.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(g.power_w, Some(512.33));
        let g = parse_telemetry_line("0, Tesla T4, 3, 100, [N/A], 300, 40").unwrap();
        assert_eq!(g.power_w, None);
        assert!(parse_telemetry_line("garbage").is_none());
    }

    #[test]
    fn visible_devices_as_indices() {
        assert_eq!(indices_of(Some("0,2")), vec![0, 2]);
        assert!(indices_of(Some("GPU-1234")).is_empty());
        assert!(indices_of(None).is_empty());
    }
}
