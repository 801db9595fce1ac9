//! GPU queries through nvidia-smi, on any host: which GPU memory is used and which processes
//! compute there (srv-kill's `--gpu` and its check that a killed server released its memory).

use super::{Bounds, Exec, ExecError, Output};

/// What an nvidia-smi query gave: the rows it printed, and what went wrong, in words, when
/// something did (it exited non-zero, as it does when one GPU is lost while the others still
/// answer; it printed more than its cap; it printed nothing readable). Rows come even with a
/// failure (the healthy GPUs are still read), except from a cut answer, which has none.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer<T> {
    pub rows: Vec<T>,
    pub failure: Option<String>,
    /// It printed more than the cap (and was stopped there).
    pub cut: bool,
}

/// Runs `program` (nvidia-smi, or its path) with `args` on `exec`'s host within `bounds`;
/// `None` where there is no such program. A run past the deadline is an error
/// ([`ExecError::TimedOut`]).
pub(crate) fn query<T, E: Exec + ?Sized>(
    exec: &E,
    program: &str,
    args: &str,
    bounds: Bounds,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<Option<Answer<T>>, ExecError> {
    let smi = super::shell_quote(program);
    let out = exec
        .run(
            &format!("command -v {smi} >/dev/null 2>&1 || exit 99; exec {smi} {args}"),
            bounds,
        )
        .map_err(|e| match e {
            ExecError::TimedOut(_) => bounds.timed_out(&format!("{program} on {}", exec.host())),
            e => e,
        })?;
    if out.status == 99 && !out.cut {
        return Ok(None);
    }
    let text = out.stdout_text();
    // A cut answer is not trusted at all: the program was not well, and its last line is torn.
    let rows: Vec<T> = match out.cut {
        true => Vec::new(),
        false => text.lines().filter_map(|l| parse(l.trim())).collect(),
    };
    let failure = failure_of(&out, &text, rows.is_empty(), bounds)
        .map(|why| format!("{program} on {}: {why}", exec.host()));
    Ok(Some(Answer {
        rows,
        failure,
        cut: out.cut,
    }))
}

/// What went wrong with an nvidia-smi run, in words; `None` when nothing did.
fn failure_of(out: &Output, text: &str, no_rows: bool, bounds: Bounds) -> Option<String> {
    if out.cut {
        return Some(format!(
            "printed more than {} KiB (cut, and stopped)",
            bounds.output_cap >> 10
        ));
    }
    // Its own words: stderr's first line, else the first stdout line that is no row.
    let said = out
        .stderr_text()
        .lines()
        .chain(text.lines())
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| crate::diag::printable(&l.chars().take(200).collect::<String>()).into_owned());
    if out.status != 0 {
        return Some(match said {
            Some(s) => format!("exited {}: {s}", out.status),
            None => format!("exited {}", out.status),
        });
    }
    // Nothing at all is an answer (no compute process); text without a row is not.
    match said {
        Some(s) if no_rows => Some(format!("printed no readable rows ({s})")),
        _ => None,
    }
}

/// One GPU's used memory: (index, bytes), `None` bytes where it reports no value (`[N/A]`).
pub type MemoryRow = (u32, Option<u64>);

/// Used memory per GPU in bytes; `None` where there is no such program.
pub fn used_bytes<E: Exec + ?Sized>(
    exec: &E,
    program: &str,
    bounds: Bounds,
) -> Result<Option<Answer<MemoryRow>>, ExecError> {
    query(
        exec,
        program,
        &format!("--query-gpu={MEMORY_QUERY} --format=csv,noheader,nounits"),
        bounds,
        |line| {
            let (index, mib) = line.split_once(',')?;
            let mib = mib.trim().parse::<u64>().ok();
            Some((
                index.trim().parse().ok()?,
                mib.map(|m| m.saturating_mul(1 << 20)),
            ))
        },
    )
}

/// Per-GPU values as a list whose position is the GPU index (`null` where a GPU gave none),
/// so two lists taken at different times line up even when one GPU stops answering.
pub fn by_index(rows: &[MemoryRow]) -> Vec<Option<u64>> {
    // Indices are small; one far beyond the GPUs a host can hold is not a row.
    let rows: Vec<_> = rows.iter().filter(|(i, _)| *i < 1024).collect();
    let len = rows.iter().map(|(i, _)| *i as usize + 1).max().unwrap_or(0);
    let mut list = vec![None; len];
    for (i, v) in rows {
        list[*i as usize] = *v;
    }
    list
}

/// Pids of GPU compute processes; `None` where there is no such program.
pub fn compute_pids<E: Exec + ?Sized>(
    exec: &E,
    program: &str,
    bounds: Bounds,
) -> Result<Option<Answer<u32>>, ExecError> {
    query(
        exec,
        program,
        "--query-compute-apps=pid --format=csv,noheader,nounits",
        bounds,
        |line| line.parse().ok(),
    )
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
    /// The GPU's energy counter in millijoules since the driver loaded (DCGM's
    /// `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`; NVML's comes apart, [`CounterRow`]).
    pub energy_mj: Option<f64>,
    /// The clocks-event (formerly throttle) reasons active now, NVML's bitmask
    /// (`host::smi::CLOCKS_EVENT_REASONS`, a layer above, names the bits).
    pub clocks_event_reasons: Option<u64>,
}

/// One GPU's energy counter: (index, millijoules since the driver loaded), `None` where it
/// gives none. Read through NVML (`exec::nvml`, which builds on this module) or a DCGM exporter: nvidia-smi has no such
/// query field (driver 580 answers `Field "total_energy_consumption" is not a valid field to
/// query.`, exit 2).
pub type CounterRow = (u32, Option<f64>);

/// nvidia-smi's `-i` for `indices` (nothing: every GPU).
fn select(indices: &[u32]) -> String {
    if indices.is_empty() {
        return String::new();
    }
    let list: Vec<String> = indices.iter().map(u32::to_string).collect();
    format!(" -i {}", list.join(","))
}

/// The fields of [`GpuReading`] in nvidia-smi's `--query-gpu` terms, in order (each one that
/// driver 580's `--help-query-gpu` lists: a field it does not know fails the whole query).
pub const TELEMETRY_QUERY: &str = "index,name,utilization.gpu,memory.used,power.draw,clocks.sm,\
temperature.gpu,clocks_event_reasons.active";

/// Used memory per GPU (srv-kill's check that a killed server let go of it).
pub const MEMORY_QUERY: &str = "index,memory.used";

/// The GPUs' names and driver (srv-launch's server record).
pub const INVENTORY_QUERY: &str = "index,name,driver_version";

/// Samples the GPUs `indices` (all when empty) once with `program` (`nvidia-smi`, or its path
/// where it is not on PATH); `None` where there is no such program.
pub fn sample<E: Exec + ?Sized>(
    exec: &E,
    program: &str,
    indices: &[u32],
    bounds: Bounds,
) -> Result<Option<Answer<GpuReading>>, ExecError> {
    query(
        exec,
        program,
        &format!(
            "--query-gpu={TELEMETRY_QUERY} --format=csv,noheader,nounits{}",
            select(indices)
        ),
        bounds,
        parse_telemetry_line,
    )
}

/// One line of [`TELEMETRY_QUERY`]'s CSV (the clocks-event reasons, last, may be missing).
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
        clocks_event_reasons: cols
            .get(7)
            .and_then(|c| u64::from_str_radix(c.trim_start_matches("0x"), 16).ok()),
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
    program: &str,
    indices: &[u32],
    bounds: Bounds,
) -> Result<Option<Inventory>, ExecError> {
    let rows = query(
        exec,
        program,
        &format!("--query-gpu={INVENTORY_QUERY} --format=csv,noheader"),
        bounds,
        |line| {
            let cols: Vec<&str> = line.split(',').map(str::trim).collect();
            let [index, name, driver] = cols[..] else {
                return None;
            };
            Some((
                index.parse::<u32>().ok()?,
                name.to_string(),
                driver.to_string(),
            ))
        },
    )?;
    let Some(rows) = rows else { return Ok(None) };
    let mut inv = Inventory::default();
    for (index, name, driver) in rows.rows {
        if indices.is_empty() || indices.contains(&index) {
            inv.names.push(name);
            inv.driver_version.get_or_insert(driver);
        }
    }
    // The CUDA version is only in nvidia-smi's banner ("CUDA Version: 12.4").
    let banner = query(exec, program, "", bounds, |line| {
        let (_, v) = line.split_once("CUDA Version:")?;
        let v: String = v
            .trim()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        (!v.is_empty()).then_some(v)
    })?;
    inv.cuda_version = banner.and_then(|b| b.rows.into_iter().next());
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
        assert_eq!(g.clocks_event_reasons, None);
        // Driver 580's answer (gpu-h200/smi-formats.txt), the reasons last.
        let g =
            parse_telemetry_line("0, NVIDIA H200, 99, 1101, 669.40, 1515, 56, 0x0000000000000004")
                .unwrap();
        assert_eq!((g.power_w, g.clocks_event_reasons), (Some(669.4), Some(4)));
        assert!(parse_telemetry_line("garbage").is_none());
    }

    #[test]
    fn visible_devices_as_indices() {
        assert_eq!(indices_of(Some("0,2")), vec![0, 2]);
        assert!(indices_of(Some("GPU-1234")).is_empty());
        assert!(indices_of(None).is_empty());
    }
}
