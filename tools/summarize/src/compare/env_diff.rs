//! `--compare`'s first table: what differs between the environments of the two runs' servers
//! (srv-launch's `server` records: engine version, GPUs, driver, CUDA, kernel, CPU, host, and
//! the flags the engine was launched with, and the host record's tunables and GPUs), so a difference in the figures below can be
//! traced to what changed. Nothing when neither side carries a server record.

use crate::render::{Cell, Column, Table};
use servbench::presets::Layout;
use servbench::record::{ServerRecord, ThpMode};
use std::collections::BTreeSet;

/// Flags whose value differs on every launch and says nothing about the setup.
const IGNORED_FLAGS: [&str; 2] = ["--port", "--host"];

/// The differences between the first server record of each side, as a table; `None` when
/// either side has none or nothing differs.
pub fn table(base: &[ServerRecord], new: &[ServerRecord]) -> Option<Table> {
    let (b, n) = (base.first()?, new.first()?);
    let (be, ne) = (
        b.env.clone().unwrap_or_default(),
        n.env.clone().unwrap_or_default(),
    );
    let fields: [(&str, Option<String>, Option<String>); 10] = [
        (
            "engine",
            Some(b.engine.to_string()),
            Some(n.engine.to_string()),
        ),
        ("engine version", be.engine_version, ne.engine_version),
        ("model", b.model.clone(), n.model.clone()),
        ("GPU model", be.gpu_model, ne.gpu_model),
        (
            "GPUs",
            be.gpu_count.map(|c| c.to_string()),
            ne.gpu_count.map(|c| c.to_string()),
        ),
        ("driver", be.driver_version, ne.driver_version),
        ("CUDA", be.cuda_version, ne.cuda_version),
        ("kernel", be.kernel, ne.kernel),
        ("CPU", be.cpu_model, ne.cpu_model),
        ("host", be.hostname, ne.hostname),
    ];
    let mut t = Table::new(
        "environment differences",
        vec![
            Column {
                name: "what".into(),
                header: "what".into(),
            },
            Column {
                name: "base".into(),
                header: "base".into(),
            },
            Column {
                name: "new".into(),
                header: "new".into(),
            },
        ],
    );
    let text = |v: &Option<String>| Cell::Text(v.clone().unwrap_or_else(|| "-".into()));
    for (what, x, y) in &fields {
        if x != y {
            t.push(vec![Cell::Text(what.to_string()), text(x), text(y)], 0);
        }
    }
    let (hb, hn) = (host_fields(b), host_fields(n));
    let mut names: Vec<&String> = hb.iter().map(|(k, _)| k).collect();
    names.extend(
        hn.iter()
            .map(|(k, _)| k)
            .filter(|k| !hb.iter().any(|(x, _)| x == *k)),
    );
    for name in names {
        let value =
            |f: &[(String, String)]| f.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let (x, y) = (value(&hb), value(&hn));
        if x != y {
            t.push(vec![Cell::Text(name.clone()), text(&x), text(&y)], 0);
        }
    }
    let (fb, fnew) = (flags(&b.argv), flags(&n.argv));
    let only = |a: &BTreeSet<String>, b: &BTreeSet<String>| -> Option<String> {
        let d: Vec<&str> = a.difference(b).map(String::as_str).collect();
        (!d.is_empty()).then(|| d.join(" "))
    };
    let (ob, on) = (only(&fb, &fnew), only(&fnew, &fb));
    if ob.is_some() || on.is_some() {
        t.push(vec![Cell::Text("flags".into()), text(&ob), text(&on)], 0);
    }
    (!t.rows.is_empty()).then_some(t)
}

/// The host record of a server (`env.host`) as (what, value) rows: the box's tunables, and
/// for each GPU the server was given its link, clocks, throttle reasons, power limit, modes
/// and foreign processes, and the slowest link among them.
fn host_fields(s: &ServerRecord) -> Vec<(String, String)> {
    let Some(h) = s.env.as_ref().and_then(|e| e.host.as_ref()) else {
        return Vec::new();
    };
    let mut out: Vec<(String, String)> = Vec::new();
    let mut put = |k: String, v: Option<String>| {
        if let Some(v) = v {
            out.push((k, v));
        }
    };
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    put("CPUs".into(), h.cpu_count.map(|c| c.to_string()));
    put("CPU sockets".into(), h.cpu_sockets.map(|c| c.to_string()));
    put("cpufreq driver".into(), h.cpufreq_driver.clone());
    put(
        "CPU governor".into(),
        (!h.cpu_governors.is_empty()).then(|| h.cpu_governors.join(" ")),
    );
    put("CPU boost".into(), h.cpu_boost.map(on));
    put(
        "C-state limits".into(),
        Some(h.cstate_limits.join(" ")).filter(|s| !s.is_empty()),
    );
    put("kernel cmdline".into(), h.kernel_cmdline.clone());
    put("NUMA nodes".into(), h.numa_nodes.map(|c| c.to_string()));
    put("NUMA balancing".into(), h.numa_balancing.map(on));
    put("THP".into(), h.thp.as_ref().map(ThpMode::to_string));
    put(
        "memory".into(),
        h.mem_total_bytes
            .map(|b| format!("{:.0} GiB", b as f64 / (1u64 << 30) as f64)),
    );
    let given = servbench::exec::gpu::indices_of(s.gpus.as_deref());
    let Layout { tp, pp } = Layout::from_labels(&s.labels);
    let gpus = servbench::host::preflight::engine_gpus(h, &given, tp, pp);
    let n = |v: Option<u32>| v.map_or("?".into(), |v| v.to_string());
    for g in h.gpus.iter().filter(|g| gpus.contains(&g.index)) {
        let i = g.index;
        put(
            format!("GPU {i} PCIe"),
            (g.pcie_gen_current.is_some() || g.pcie_width_current.is_some()).then(|| {
                format!(
                    "Gen{} x{} (max Gen{} x{})",
                    n(g.pcie_gen_current),
                    n(g.pcie_width_current),
                    n(g.pcie_gen_max),
                    n(g.pcie_width_max)
                )
            }),
        );
        put(
            format!("GPU {i} NUMA node"),
            g.numa_node.map(|v| v.to_string()),
        );
        put(format!("GPU {i} persistence"), g.persistence_mode.map(on));
        put(format!("GPU {i} ECC"), g.ecc_enabled.map(on));
        put(format!("GPU {i} MIG"), g.mig_enabled.map(on));
        put(
            format!("GPU {i} max SM clock"),
            g.sm_clock_max_mhz.map(|v| format!("{v:.0} MHz")),
        );
        put(
            format!("GPU {i} throttle"),
            g.throttle_reasons.as_ref().map(|r| {
                if r.is_empty() {
                    "none".into()
                } else {
                    r.join(" ")
                }
            }),
        );
        put(
            format!("GPU {i} power limit"),
            g.power_limit_w.map(|v| format!("{v:.0} W")),
        );
        put(
            format!("GPU {i} other processes"),
            Some(g.foreign_processes.len().to_string()),
        );
    }
    if let Some(t) = &h.topology {
        put(
            "slowest GPU link".into(),
            t.worst_link(&gpus).map(|l| l.words()),
        );
    }
    out
}

/// The flags of an argv, each with its value (`--tp 4`, `--enforce-eager`), the program and
/// per-launch flags left out.
fn flags(argv: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut i = 1;
    while i < argv.len() {
        let a = &argv[i];
        if !a.starts_with('-') {
            out.insert(a.clone());
            i += 1;
            continue;
        }
        let name = a.split('=').next().unwrap_or(a);
        let takes_value = !a.contains('=') && argv.get(i + 1).is_some_and(|v| !v.starts_with('-'));
        let flag = if takes_value {
            format!("{a} {}", argv[i + 1])
        } else {
            a.clone()
        };
        if !IGNORED_FLAGS.contains(&name) {
            out.insert(flag);
        }
        i += if takes_value { 2 } else { 1 };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_pair_with_their_values() {
        let argv: Vec<String> = [
            "vllm",
            "serve",
            "m",
            "--tp",
            "4",
            "--enforce-eager",
            "--port",
            "8000",
            "--x=1",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let f = flags(&argv);
        assert!(f.contains("--tp 4") && f.contains("--enforce-eager") && f.contains("--x=1"));
        assert!(!f.iter().any(|s| s.starts_with("--port")));
    }
}
