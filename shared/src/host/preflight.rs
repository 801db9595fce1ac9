//! The pre-flight verdict: what in the host record is known to cost throughput, one warning
//! each, saying what it costs and where to look. srv-launch prints them before the server
//! starts (and `--strict-preflight` refuses to launch on any); summarize prints them for each
//! server it reads. A clean host gives none; a field the host could not give warns of nothing.

use super::topo::crosses_sockets;
use crate::record::{HostEnv, HostGpu};

/// One finding: a stable name (README "Pre-flight warnings") and the sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub kind: &'static str,
    pub text: String,
}

/// Throttle reasons that hold clocks down for reasons other than being idle or set by hand.
pub const COSTLY_THROTTLE: [&str; 5] = [
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
];

/// The GPUs an engine runs on: the `--gpus` list when given, else the host's first `tp x pp`.
pub fn engine_gpus(host: &HostEnv, given: &[u32], tp: u32, pp: u32) -> Vec<u32> {
    if !given.is_empty() {
        return given.to_vec();
    }
    let mut all: Vec<u32> = host.gpus.iter().map(|g| g.index).collect();
    all.sort_unstable();
    all.truncate((tp.max(1) * pp.max(1)) as usize);
    all
}

fn list(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// The warnings for an engine on `gpus` of `host` with TP degree `tp`.
pub fn check(host: &HostEnv, gpus: &[u32], tp: u32) -> Vec<Warning> {
    let mut out = Vec::new();
    let mine: Vec<&HostGpu> = gpus
        .iter()
        .filter_map(|i| host.gpus.iter().find(|g| g.index == *i))
        .collect();
    for g in &mine {
        link_below_max(g, &mut out);
        if let Some(reasons) = &g.throttle_reasons {
            let costly: Vec<&str> = reasons
                .iter()
                .map(String::as_str)
                .filter(|r| COSTLY_THROTTLE.contains(r))
                .collect();
            if !costly.is_empty() {
                out.push(Warning {
                    kind: "throttled_at_idle",
                    text: format!(
                        "GPU {} is throttled before any load ({}): its clocks stay below their maximum, so every step is slower; look at nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE (power cables, power limit, cooling)",
                        g.index,
                        costly.join(", ")
                    ),
                });
            }
        }
        foreign_processes(g, &mut out);
    }
    p2p_unsupported(host, gpus, &mut out);
    split_across_sockets(host, gpus, tp, &mut out);
    if host.cpu_governors.iter().any(|g| g == "powersave") {
        out.push(Warning {
            kind: "powersave_governor",
            text: "the CPU governor is powersave: the engine's scheduler, tokenizer and kernel launches run at low clocks, which shows in TTFT and small-batch step time; look at /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor (cpupower frequency-set -g performance)".into(),
        });
    }
    if host.numa_balancing == Some(true) {
        out.push(Warning {
            kind: "numa_balancing_on",
            text: "kernel.numa_balancing is on: the kernel unmaps and migrates the engine's pages between sockets while it runs, adding latency spikes to host-side work; look at sysctl kernel.numa_balancing (set 0)".into(),
        });
    }
    out
}

/// The most foreign processes a warning lists by pid; the rest are counted.
pub const LISTED_PROCESSES: usize = 4;

/// One warning per GPU for the processes already on it, listing the first few.
fn foreign_processes(g: &HostGpu, out: &mut Vec<Warning>) {
    let procs = &g.foreign_processes;
    if procs.is_empty() {
        return;
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let named = |p: &crate::record::GpuProcess| {
        format!("pid {} ({})", p.pid, p.name.as_deref().unwrap_or("unnamed"))
    };
    let what = if let [p] = procs.as_slice() {
        let mem = p
            .used_bytes
            .map(|b| format!(" holding {:.1} GiB", gib(b)))
            .unwrap_or_default();
        format!("{}{mem}", named(p))
    } else {
        let listed: Vec<String> = procs.iter().take(LISTED_PROCESSES).map(named).collect();
        let more = procs.len().saturating_sub(LISTED_PROCESSES);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        let held = procs
            .iter()
            .filter_map(|p| p.used_bytes)
            .fold(0u64, u64::saturating_add);
        format!(
            "{} processes: {}{more}, holding {:.1} GiB in all",
            procs.len(),
            listed.join(", "),
            gib(held)
        )
    };
    out.push(Warning {
        kind: "foreign_gpu_process",
        text: format!(
            "GPU {} already runs {what}: the engine gets less memory for its KV cache (or fails to start) and shares the GPU's time; look at nvidia-smi --query-compute-apps=pid,process_name,used_memory, stop it (srv-kill --gpu {}) or give other --gpus",
            g.index, g.index
        ),
    });
}

fn link_below_max(g: &HostGpu, out: &mut Vec<Warning>) {
    let gen_low = matches!((g.pcie_gen_current, g.pcie_gen_max), (Some(c), Some(m)) if c < m);
    let width_low = matches!((g.pcie_width_current, g.pcie_width_max), (Some(c), Some(m)) if c < m);
    if !gen_low && !width_low {
        return;
    }
    let show = |generation: Option<u32>, width: Option<u32>| {
        format!(
            "Gen{} x{}",
            generation.map_or("?".into(), |v| v.to_string()),
            width.map_or("?".into(), |v| v.to_string())
        )
    };
    // Each generation doubles the rate of the last (Gen1 2.5 GT/s ... Gen5 32 GT/s).
    let share = |c: Option<u32>, m: Option<u32>| match (c, m) {
        (Some(c), Some(m)) if c < m => 1.0 / f64::from(1u32 << (m - c).min(16)),
        _ => 1.0,
    };
    let width_share = match (g.pcie_width_current, g.pcie_width_max) {
        (Some(c), Some(m)) if c < m && m > 0 => f64::from(c) / f64::from(m),
        _ => 1.0,
    };
    let fraction = share(g.pcie_gen_current, g.pcie_gen_max) * width_share;
    out.push(Warning {
        kind: "pcie_link_below_max",
        text: format!(
            "GPU {}'s PCIe link runs at {}, below its maximum {}: host-to-GPU copies and PCIe P2P get about {:.0}% of the bandwidth (weight loading, KV offload, allreduce over PCIe); an idle GPU may lower its link speed to save power, so check again under load; look at nvidia-smi -q -d PCIE and lspci -vv (the slot, riser, BIOS link setting)",
            g.index,
            show(g.pcie_gen_current, g.pcie_width_current),
            show(g.pcie_gen_max, g.pcie_width_max),
            fraction * 100.0
        ),
    });
}

fn p2p_unsupported(host: &HostEnv, gpus: &[u32], out: &mut Vec<Warning>) {
    let Some(t) = &host.topology else { return };
    let mut pairs = Vec::new();
    for (k, &a) in gpus.iter().enumerate() {
        for &b in &gpus[k + 1..] {
            match t.p2p_read(a, b) {
                Some(s) if s != "OK" && s != "X" => pairs.push(format!("{a}-{b} ({s})")),
                _ => {}
            }
        }
    }
    if !pairs.is_empty() {
        out.push(Warning {
            kind: "p2p_unsupported",
            text: format!(
                "P2P is not supported between GPUs {}: NCCL copies through host memory there, so allreduce bandwidth drops and its latency rises; look at nvidia-smi topo -p2p r, the IOMMU (iommu=pt) and ACS on the PCIe switches",
                pairs.join(", ")
            ),
        });
    }
}

fn split_across_sockets(host: &HostEnv, gpus: &[u32], tp: u32, out: &mut Vec<Warning>) {
    let Some(t) = &host.topology else { return };
    let size = tp as usize;
    if size < 2 {
        return;
    }
    let better = t.best_group(size).filter(|g| !crosses_sockets(host, g));
    let Some(better) = better else { return };
    let cost = |g: &[u32]| t.worst_link(g).map_or(0, |l| l.cost());
    for group in gpus.chunks(size).filter(|g| g.len() == size) {
        // On NVLink the sockets do not carry the allreduce: only a slower link counts.
        if crosses_sockets(host, group) && cost(group) > cost(&better) {
            out.push(Warning {
                kind: "tp_group_across_sockets",
                text: format!(
                    "the TP-{size} group on GPUs {} spans sockets while GPUs {} share one: every allreduce crosses the inter-socket link (nvidia-smi topo -m shows SYS), several times slower per hop than within a socket; give --gpus {}",
                    list(group),
                    list(&better),
                    list(&better)
                ),
            });
        }
    }
}
