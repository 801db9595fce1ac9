//! The box itself: what srv-launch records of the host before a server starts
//! ([`crate::record::HostEnv`]), and the checks made of it.
//!
//! - this file: [`capture`], one bounded shell script reading /proc and /sys (through a root
//!   prefix, so tests and containers can point it at samples) and nvidia-smi's queries;
//! - [`smi`]: nvidia-smi's per-GPU query, compute processes and `topo -m`/`-p2p` matrices;
//! - [`topo`]: what the matrix says: sockets, the best-connected group of each size, the link
//!   class a group's allreduce crosses;
//! - [`preflight`]: the warnings for what is known to cost throughput.
//!
//! Layering: uses `record` (the types) and `exec` (every program run through [`Bounds`]).

pub mod preflight;
pub mod smi;
pub mod topo;

use crate::exec::{Bounds, Exec, shell_quote};
use crate::record::{HostEnv, ThpMode};

/// The environment variable naming the root prefix /proc and /sys are read under (for tests
/// and containers whose host files are mounted elsewhere); srv-launch's `--host-root` sets it.
pub const ROOT_VAR: &str = "SERVBENCH_HOST_ROOT";

/// What the sysfs script may print.
const SYSFS_OUTPUT_CAP: usize = 256 << 10;

/// How long one file (or one group of files, the CPU governors) may take to read: a file
/// that does not answer (a FIFO, a hung mount) is named, the others are still read.
pub const FILE_READ_SECS: u32 = 2;

/// The most of `/proc/cpuinfo` and `/proc/meminfo` read (4,096 CPUs take about 6 MiB).
const TABLE_READ_BYTES: u32 = 32 << 20;

/// The script that prints `key=value` lines of the host's tunables, files read under `$R`.
/// Every file is read with a byte bound (`head -c`) and a time bound (`timeout`); a missing one
/// prints an empty value, one that did not answer in time an `unreadable=` line naming it.
const SYSFS_SCRIPT: &str = r#"
b() { timeout $T head -c "$1" "$R$2" 2>/dev/null; [ $? -ne 124 ] || echo "unreadable=$2: no answer within $T s" >&2; }
r() { b 8192 "$1" | head -n 1; }
cpuinfo=$(b $C /proc/cpuinfo | tr -d '\000')
meminfo=$(b $C /proc/meminfo | tr -d '\000')
echo "cpu_count=$(printf '%s\n' "$cpuinfo" | grep -c '^processor')"
echo "cpu_sockets=$(printf '%s\n' "$cpuinfo" | grep '^physical id' | sort -u | wc -l)"
echo "cpu_model=$(printf '%s\n' "$cpuinfo" | grep -m1 'model name' | cut -d: -f2-)"
echo "cpufreq_driver=$(r /sys/devices/system/cpu/cpu0/cpufreq/scaling_driver)"
g=$(timeout $T sh -c 'for f in "$1"/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor; do head -c 64 "$f" 2>/dev/null; echo; done' sh "$R")
[ $? -ne 124 ] || echo "unreadable=/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor: no answer within $T s" >&2
echo "governors=$(printf '%s\n' "$g" | sort -u | tr '\n' ' ')"
echo "boost=$(r /sys/devices/system/cpu/cpufreq/boost)"
echo "no_turbo=$(r /sys/devices/system/cpu/intel_pstate/no_turbo)"
echo "intel_idle_max_cstate=$(r /sys/module/intel_idle/parameters/max_cstate)"
echo "cmdline=$(r /proc/cmdline)"
echo "numa_nodes=$(ls -d "$R"/sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
echo "numa_balancing=$(r /proc/sys/kernel/numa_balancing)"
echo "thp=$(r /sys/kernel/mm/transparent_hugepage/enabled)"
echo "mem_total_kb=$(printf '%s\n' "$meminfo" | grep -m1 '^MemTotal:' | tr -s ' ' | cut -d' ' -f2)"
"#;

/// The host's tunables as the sysfs script printed them, plus the CPU model (which the
/// `server` record keeps beside the kernel, outside [`HostEnv`]).
pub fn parse_sysfs(text: &str) -> (HostEnv, Option<String>) {
    let mut h = HostEnv::default();
    let mut cpu_model = None;
    let mut no_turbo = None;
    let mut boost = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        let count = || v.parse::<u32>().ok().filter(|n| *n > 0);
        match k {
            "cpu_count" => h.cpu_count = count(),
            "cpu_sockets" => h.cpu_sockets = count(),
            "cpu_model" => cpu_model = Some(v.to_string()),
            "cpufreq_driver" => h.cpufreq_driver = Some(v.to_string()),
            "governors" => h.cpu_governors = v.split_whitespace().map(String::from).collect(),
            "boost" => boost = flag(v),
            "no_turbo" => no_turbo = flag(v),
            "intel_idle_max_cstate" => {
                if let Ok(n) = v.parse::<u32>() {
                    h.cstate_limits.push(format!("intel_idle max_cstate={n}"));
                }
            }
            "cmdline" => {
                h.kernel_cmdline = Some(v.to_string());
                h.cstate_limits.extend(
                    v.split_whitespace()
                        .filter(|w| w.contains("max_cstate="))
                        .map(String::from),
                );
            }
            "numa_nodes" => h.numa_nodes = count(),
            "numa_balancing" => h.numa_balancing = v.parse::<u32>().ok().map(|n| n != 0),
            "thp" => {
                h.thp = v
                    .split_once('[')
                    .and_then(|(_, rest)| rest.split_once(']'))
                    .map(|(mode, _)| ThpMode::parse(mode))
            }
            "mem_total_kb" => {
                h.mem_total_bytes = v
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n > 0)
                    .map(|kb| kb.saturating_mul(1024))
            }
            _ => {}
        }
    }
    h.cpu_boost = boost.or(no_turbo.map(|off| !off));
    (h, cpu_model)
}

fn flag(v: &str) -> Option<bool> {
    match v {
        "1" => Some(true),
        "0" => Some(false),
        _ => None,
    }
}

/// Reads the host: the sysfs script under `root` (empty: `/`), then nvidia-smi's per-GPU
/// query, compute processes and matrices. `bounds` gives the bounds of each next run, `None`
/// once the caller's overall bound is spent (what is left unread stays absent). Returns the
/// host and the CPU model.
pub fn capture(
    exec: &dyn Exec,
    nvidia_smi: &str,
    root: &str,
    bounds: &dyn Fn(usize) -> Option<Bounds>,
) -> (HostEnv, Option<String>) {
    let script = format!(
        "R={}\nT={FILE_READ_SECS}\nC={TABLE_READ_BYTES}\n{SYSFS_SCRIPT}",
        shell_quote(root)
    );
    let mut unreadable = Vec::new();
    let text = match bounds(SYSFS_OUTPUT_CAP).map(|b| exec.run(&script, b)) {
        Some(Ok(o)) if !o.cut => {
            unreadable.extend(o.stderr_text().lines().filter_map(|l| {
                let file = l.strip_prefix("unreadable=")?;
                Some(format!("host file {root}{file}"))
            }));
            o.stdout_text()
        }
        Some(Ok(_)) => {
            unreadable.push(format!(
                "host files under {}: more than {} KiB of answers",
                root_name(root),
                SYSFS_OUTPUT_CAP >> 10
            ));
            String::new()
        }
        Some(Err(e)) => {
            unreadable.push(format!("host files under {}: {e}", root_name(root)));
            String::new()
        }
        None => String::new(),
    };
    let (mut host, cpu_model) = parse_sysfs(&text);
    host.unreadable = unreadable;
    smi::read_gpus(exec, nvidia_smi, bounds, &mut host);
    (host, cpu_model)
}

fn root_name(root: &str) -> &str {
    if root.is_empty() { "/" } else { root }
}
