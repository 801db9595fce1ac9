//! nvidia-smi's view of each GPU for the host record: one `--query-gpu` of the tunables, the
//! compute processes, and the `topo -m` / `topo -p2p r|w` matrices, each parsed from the
//! shape nvidia-smi prints. A field printed as `[N/A]`/`[Not Supported]` is left absent.

use crate::exec::{Bounds, Exec, gpu};
use crate::record::{GpuProcess, GpuTopology, HostEnv, HostGpu};

/// The per-GPU query, in order (csv, noheader, nounits). The clocks-event reasons by the
/// driver's current name; a driver too old to know it is asked by [`OLD_REASONS_FIELD`].
pub const HOST_QUERY: &str = "index,pci.bus_id,pcie.link.gen.current,pcie.link.gen.max,\
pcie.link.width.current,pcie.link.width.max,persistence_mode,ecc.mode.current,clocks.sm,\
clocks.max.sm,clocks.mem,clocks_event_reasons.active,power.limit,mig.mode.current,memory.used";

/// The clocks-event reasons' field before drivers renamed it (both answer on driver 580).
pub const REASONS_FIELD: &str = "clocks_event_reasons.active";
pub const OLD_REASONS_FIELD: &str = "clocks_throttle_reasons.active";

/// Every `--query-gpu` field list servbench gives nvidia-smi: each field must be one the driver
/// lists in `nvidia-smi --help-query-gpu` (a field it does not know fails the whole query with
/// exit 2; testkit holds these to driver 580's list).
pub const NVIDIA_SMI_QUERIES: [&str; 4] = [
    gpu::TELEMETRY_QUERY,
    gpu::MEMORY_QUERY,
    gpu::INVENTORY_QUERY,
    HOST_QUERY,
];

/// The compute-process query.
pub const APPS_QUERY: &str = "gpu_bus_id,pid,used_memory,process_name";

/// NVML's clocks-event (formerly throttle) reason bits, by name.
pub const CLOCKS_EVENT_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// What nvidia-smi prints as a value; `None` for `[N/A]`, `N/A`, `[Not Supported]` and empty.
fn given(v: &str) -> Option<&str> {
    let v = v.trim();
    (!v.is_empty() && !v.starts_with('[') && v != "N/A").then_some(v)
}

fn number(v: &str) -> Option<f64> {
    given(v)?
        .parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0)
}

fn small(v: &str) -> Option<u32> {
    given(v)?.parse::<u32>().ok()
}

fn enabled(v: &str) -> Option<bool> {
    match given(v)? {
        "Enabled" => Some(true),
        "Disabled" => Some(false),
        _ => None,
    }
}

/// The clocks-event reasons of a bitmask (`0x0000000000000004`); `None` where unreadable.
pub fn event_reason_names(v: &str) -> Option<Vec<String>> {
    let hex = given(v)?.trim_start_matches("0x");
    Some(reason_names(u64::from_str_radix(hex, 16).ok()?))
}

/// The names of the reason bits set in `bits`.
pub fn reason_names(bits: u64) -> Vec<String> {
    CLOCKS_EVENT_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| name.to_string())
        .collect()
}

/// One line of [`HOST_QUERY`]'s CSV.
pub fn parse_gpu_line(line: &str) -> Option<HostGpu> {
    let c: Vec<&str> = line.split(',').map(str::trim).collect();
    if c.len() < 15 {
        return None;
    }
    Some(HostGpu {
        index: c[0].parse().ok()?,
        pci_bus_id: given(c[1]).map(String::from),
        pcie_gen_current: small(c[2]),
        pcie_gen_max: small(c[3]),
        pcie_width_current: small(c[4]),
        pcie_width_max: small(c[5]),
        persistence_mode: enabled(c[6]),
        ecc_enabled: enabled(c[7]),
        sm_clock_mhz: number(c[8]),
        sm_clock_max_mhz: number(c[9]),
        mem_clock_mhz: number(c[10]),
        throttle_reasons: event_reason_names(c[11]),
        power_limit_w: number(c[12]),
        mig_enabled: enabled(c[13]),
        mem_used_bytes: number(c[14]).map(|mib| (mib * 1048576.0) as u64),
        ..HostGpu::default()
    })
}

/// The most GPU memory taken as a reading (1 PiB): more is a broken answer.
pub const MAX_GPU_MEM_BYTES: u64 = 1 << 50;

/// The highest PCIe generation taken as a reading.
pub const MAX_PCIE_GEN: u32 = 7;

/// Clears the readings of `g` no GPU can have (a PCIe link of width 0, or running above its
/// maximum, or of a generation past [`MAX_PCIE_GEN`]; more memory used than
/// [`MAX_GPU_MEM_BYTES`]), and names each: such a reading is unreadable, not a finding.
pub fn implausible(g: &mut HostGpu) -> Vec<String> {
    let mut out = Vec::new();
    let generation_ok = |v: Option<u32>| v.is_none_or(|v| (1..=MAX_PCIE_GEN).contains(&v));
    let width_ok = |v: Option<u32>| v.is_none_or(|v| (1..=32).contains(&v));
    let above = |c: Option<u32>, m: Option<u32>| matches!((c, m), (Some(c), Some(m)) if c > m);
    let (gc, gm, wc, wm) = (
        g.pcie_gen_current,
        g.pcie_gen_max,
        g.pcie_width_current,
        g.pcie_width_max,
    );
    if !(generation_ok(gc) && generation_ok(gm) && width_ok(wc) && width_ok(wm))
        || above(gc, gm)
        || above(wc, wm)
    {
        let show = |v: Option<u32>| v.map_or("?".into(), |v| v.to_string());
        out.push(format!(
            "GPU {}: nvidia-smi gave a PCIe link of Gen{} x{} against a maximum of Gen{} x{}, which no link is; left out",
            g.index,
            show(gc),
            show(wc),
            show(gm),
            show(wm)
        ));
        g.pcie_gen_current = None;
        g.pcie_gen_max = None;
        g.pcie_width_current = None;
        g.pcie_width_max = None;
    }
    if g.mem_used_bytes.is_some_and(|b| b > MAX_GPU_MEM_BYTES) {
        out.push(format!(
            "GPU {}: nvidia-smi gave more than {} PiB of memory used; left out",
            g.index,
            MAX_GPU_MEM_BYTES >> 50
        ));
        g.mem_used_bytes = None;
    }
    out
}

/// One line of [`APPS_QUERY`]'s CSV: (bus id, process).
pub fn parse_app_line(line: &str) -> Option<(String, GpuProcess)> {
    let mut c = line.splitn(4, ',').map(str::trim);
    let bus = given(c.next()?)?.to_string();
    let pid = c.next()?.parse().ok()?;
    let used = c
        .next()
        .and_then(number)
        .map(|mib| mib * 1048576.0)
        .filter(|b| *b <= MAX_GPU_MEM_BYTES as f64)
        .map(|b| b as u64);
    let name = c.next().and_then(given).map(String::from);
    Some((
        bus,
        GpuProcess {
            pid,
            name,
            used_bytes: used,
        },
    ))
}

/// Without terminal colour codes (some nvidia-smi builds colour `topo -m`).
fn plain(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(ch) = chars.next() {
        if ch == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(ch);
        }
    }
    out
}

/// A `topo -m` or `topo -p2p` matrix as printed. NIC rows and columns are left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// The GPU index of each row.
    pub gpus: Vec<u32>,
    /// Each row's cells towards every GPU column.
    pub cells: Vec<Vec<String>>,
    /// Each row's words after the device columns (`topo -m`'s CPU and NUMA affinity).
    pub trailing: Vec<Vec<String>>,
}

/// Parses a `topo -m` or `topo -p2p` matrix; `None` where there is no whole one.
pub fn parse_matrix(text: &str) -> Option<Matrix> {
    let gpu_index = |w: &str| w.strip_prefix("GPU").and_then(|n| n.parse::<u32>().ok());
    let lines: Vec<String> = text.lines().map(plain).collect();
    let header_at = lines.iter().position(|l| {
        let w: Vec<&str> = l.split_whitespace().collect();
        w.first() == Some(&"GPU0") && w.get(1).is_none_or(|s| !is_cell(s))
    })?;
    let header: Vec<&str> = lines[header_at].split_whitespace().collect();
    let devices: Vec<&str> = header
        .iter()
        .copied()
        .take_while(|w| gpu_index(w).is_some() || w.starts_with("NIC"))
        .collect();
    let gpu_cols: Vec<usize> = (0..devices.len())
        .filter(|&i| gpu_index(devices[i]).is_some())
        .collect();
    let (mut gpus, mut cells, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for l in &lines[header_at + 1..] {
        let w: Vec<&str> = l.split_whitespace().collect();
        let Some(i) = w.first().and_then(|f| gpu_index(f)) else {
            if w.first().is_some_and(|f| f.starts_with("Legend")) {
                break;
            }
            continue;
        };
        if w.len() < 1 + devices.len() {
            continue;
        }
        gpus.push(i);
        cells.push(gpu_cols.iter().map(|&c| w[1 + c].to_string()).collect());
        rest.push(
            w[1 + devices.len()..]
                .iter()
                .map(|s| s.to_string())
                .collect(),
        );
    }
    // Each GPU of the header exactly once among the rows (a row printed twice and another
    // missing is not a matrix).
    let mut rows = gpus.clone();
    rows.sort_unstable();
    let mut columns: Vec<u32> = gpu_cols
        .iter()
        .filter_map(|&c| gpu_index(devices[c]))
        .collect();
    columns.sort_unstable();
    let whole = !gpus.is_empty() && rows == columns && rows.windows(2).all(|w| w[0] != w[1]);
    whole.then_some(Matrix {
        gpus,
        cells,
        trailing: rest,
    })
}

/// A matrix cell (`X`, a link class, a P2P status), as opposed to a column name.
fn is_cell(w: &str) -> bool {
    !(w.starts_with("GPU") || w.starts_with("NIC") || w == "CPU")
}

/// Fills `host`'s GPUs and topology from nvidia-smi; each run within `bounds`' next bounds.
/// No nvidia-smi leaves them absent; a failing one is named in `host.unreadable`.
pub fn read_gpus(
    exec: &dyn Exec,
    program: &str,
    bounds: &dyn Fn(usize) -> Option<Bounds>,
    host: &mut HostEnv,
) {
    let unreadable = std::cell::RefCell::new(Vec::new());
    read_into(exec, program, bounds, host, &unreadable);
    host.unreadable.extend(unreadable.into_inner());
}

fn read_into(
    exec: &dyn Exec,
    program: &str,
    bounds: &dyn Fn(usize) -> Option<Bounds>,
    host: &mut HostEnv,
    unreadable: &std::cell::RefCell<Vec<String>>,
) {
    let cap = Bounds::QUERY.output_cap;
    // One nvidia-smi that hung is not asked again: a wedged driver would hang each query.
    let mut hung = false;
    let mut ask = |args: &str| -> Option<Vec<String>> {
        let b = bounds(cap).filter(|_| !hung)?;
        match gpu::query(exec, program, args, b, |l| Some(l.to_string())) {
            Ok(Some(a)) => {
                if let Some(f) = a.failure {
                    unreadable.borrow_mut().push(f);
                }
                (!a.cut).then_some(a.rows)
            }
            Ok(None) => None,
            Err(e) => {
                hung |= matches!(e, crate::exec::ExecError::TimedOut(_));
                unreadable.borrow_mut().push(e.to_string());
                None
            }
        }
    };
    let query = |fields: &str| format!("--query-gpu={fields} --format=csv,noheader,nounits");
    let mut rows = ask(&query(HOST_QUERY));
    // A driver from before the rename refuses the whole query for the new name (exit 2, its
    // line on stdout and no row): ask again by the old one (and keep only the second
    // failure's line if that fails too).
    let refused = unreadable
        .borrow()
        .last()
        .is_some_and(|l| l.contains(REASONS_FIELD) && l.contains("not a valid field"));
    if refused {
        unreadable.borrow_mut().pop();
        rows = ask(&query(
            &HOST_QUERY.replace(REASONS_FIELD, OLD_REASONS_FIELD),
        ));
    }
    let Some(rows) = rows else {
        return;
    };
    let mut gpus: Vec<HostGpu> = rows.iter().filter_map(|l| parse_gpu_line(l)).collect();
    let odd: Vec<String> = gpus.iter_mut().flat_map(implausible).collect();
    if let Some(apps) = ask(&format!(
        "--query-compute-apps={APPS_QUERY} --format=csv,noheader,nounits"
    )) {
        for (bus, p) in apps.iter().filter_map(|l| parse_app_line(l)) {
            let on = gpus.iter_mut().find(|g| {
                g.pci_bus_id
                    .as_deref()
                    .is_some_and(|b| b.eq_ignore_ascii_case(&bus))
            });
            if let Some(g) = on {
                g.foreign_processes.push(p);
            }
        }
    }
    let topo = ask("topo -m").and_then(|l| parse_matrix(&l.join("\n")));
    if let Some(Matrix {
        gpus: order,
        cells: links,
        trailing: rest,
    }) = topo
    {
        for (i, words) in order.iter().zip(&rest) {
            if let Some(g) = gpus.iter_mut().find(|g| g.index == *i) {
                g.cpu_affinity = words.first().and_then(|w| given(w)).map(String::from);
                g.numa_node = words.get(1).and_then(|w| small(w));
            }
        }
        let mut t = GpuTopology {
            gpus: order.clone(),
            links,
            ..GpuTopology::default()
        };
        // P2P matrices in the same GPU order as the links (only when they list the same GPUs).
        let p2p = |m: Option<Matrix>| {
            m.filter(|m| m.gpus == order)
                .map(|m| m.cells)
                .unwrap_or_default()
        };
        t.p2p_read = p2p(ask("topo -p2p r").and_then(|l| parse_matrix(&l.join("\n"))));
        t.p2p_write = p2p(ask("topo -p2p w").and_then(|l| parse_matrix(&l.join("\n"))));
        host.topology = Some(t);
    }
    host.unreadable.extend(odd);
    host.gpus = gpus;
}
