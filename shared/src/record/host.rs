//! The box a server ran on, as srv-launch found it just before starting the server (`env.host`
//! of the `server` record): what people tune by hand (CPU governor and boost, C-state limits,
//! NUMA balancing, huge pages) and, per GPU, its PCIe link, clocks, throttle reasons, power
//! limit and who else holds its memory; and the GPUs' topology and P2P matrices. Every field is
//! absent where the box could not say (no GPU, not root, nvidia-smi's `[N/A]`): never guessed.

use super::ThpMode;
use serde::{Deserialize, Serialize};

/// The host's tunables and GPUs (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostEnv {
    /// Logical CPUs (`processor` lines of /proc/cpuinfo).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_count: Option<u32>,
    /// CPU sockets (distinct `physical id`s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_sockets: Option<u32>,
    /// The cpufreq scaling driver (`intel_pstate`, `amd-pstate-epp`, `acpi-cpufreq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpufreq_driver: Option<String>,
    /// The CPUs' scaling governors, each once (`performance`; two where CPUs differ).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cpu_governors: Vec<String>,
    /// Whether CPU boost (turbo) is allowed: cpufreq/boost, or intel_pstate's no_turbo inverted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_boost: Option<bool>,
    /// C-state limits: `processor.max_cstate=`/`intel_idle.max_cstate=` of the kernel command
    /// line and intel_idle's `max_cstate` parameter, as `name=value` words.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cstate_limits: Vec<String>,
    /// /proc/cmdline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_cmdline: Option<String>,
    /// NUMA nodes (/sys/devices/system/node/nodeN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_nodes: Option<u32>,
    /// `kernel.numa_balancing` is on (non-zero).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_balancing: Option<bool>,
    /// Transparent huge pages mode: the bracketed word of .../transparent_hugepage/enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thp: Option<ThpMode>,
    /// MemTotal of /proc/meminfo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_total_bytes: Option<u64>,
    /// Every GPU of the host (not only those given to the server), by index.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<HostGpu>,
    /// `nvidia-smi topo -m` and `topo -p2p r`/`w`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<GpuTopology>,
    /// What could not be read and why (nvidia-smi failed, timed out): one line each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unreadable: Vec<String>,
}

/// One GPU as nvidia-smi and `topo -m` describe it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HostGpu {
    pub index: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen_current: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_gen_max: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width_current: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pcie_width_max: Option<u32>,
    /// The NUMA node nearest the GPU (`topo -m`'s NUMA Affinity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// The CPUs nearest the GPU (`topo -m`'s CPU Affinity, e.g. `0-31,64-95`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_affinity: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistence_mode: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_max_mhz: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<f64>,
    /// The active clock throttle reasons, by name (`gpu_idle`, `sw_power_cap`,
    /// `hw_thermal_slowdown`, ...); empty with a reading of none; absent where unreadable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_used_bytes: Option<u64>,
    /// Compute processes already on this GPU before the server started (so not ours).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign_processes: Vec<GpuProcess>,
}

/// A compute process on a GPU (`nvidia-smi --query-compute-apps`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used_bytes: Option<u64>,
}

/// The GPUs' link matrix: `links[i][j]` is `topo -m`'s cell between GPU `gpus[i]` and GPU
/// `gpus[j]` (`X`, `PIX`, `PXB`, `PHB`, `NODE`, `SYS`, `NV12`); `p2p_read`/`p2p_write` are
/// `topo -p2p r`/`w`'s cells (`OK`, `CNS`, `GNS`, `TNS`, `NS`, `U`) where given.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GpuTopology {
    pub gpus: Vec<u32>,
    pub links: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p_read: Vec<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub p2p_write: Vec<Vec<String>>,
}
