//! Stand-in hosts for the host record and the pre-flight checks (this machine has no GPU and
//! its /sys is its own): a root directory of /proc and /sys samples in the kernel's shapes,
//! and a stand-in nvidia-smi that answers the host queries with samples in nvidia-smi's own
//! output shapes (`--query-gpu` CSV with `[N/A]` fields, `--query-compute-apps`, `topo -m` of
//! an 8-GPU dual-socket PCIe box with a NIC column or of an NVSwitch box, `topo -p2p r|w`).
//!
//! A clean box warns of nothing; a dirty one has one of each thing the pre-flight warns of:
//! GPU 3's link trained at Gen1 (of Gen4), GPU 5 power-capped at idle, pid 4242 holding 20 GiB
//! on GPU 2, P2P `CNS` across the sockets, the powersave governor and NUMA balancing on.

use crate::StandIn;
use std::path::Path;

/// Which box.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fabric {
    /// 8 PCIe GPUs, 0-3 on socket 0 (two switches), 4-7 on socket 1.
    DualSocketPcie,
    /// 8 GPUs on NVSwitch (NV18 between every pair), two sockets.
    NvSwitch,
}

pub const TOPO_DUAL_SOCKET: &str = "\t\u{1b}[4mGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\u{1b}[0m
\u{1b}[4mGPU0\u{1b}[0m\t X \tPIX\tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A
\u{1b}[4mGPU1\u{1b}[0m\tPIX\t X \tNODE\tNODE\tSYS\tSYS\tSYS\tSYS\tNODE\t0-31,64-95\t0\t\tN/A
\u{1b}[4mGPU2\u{1b}[0m\tNODE\tNODE\t X \tPIX\tSYS\tSYS\tSYS\tSYS\tPIX\t0-31,64-95\t0\t\tN/A
\u{1b}[4mGPU3\u{1b}[0m\tNODE\tNODE\tPIX\t X \tSYS\tSYS\tSYS\tSYS\tPIX\t0-31,64-95\t0\t\tN/A
\u{1b}[4mGPU4\u{1b}[0m\tSYS\tSYS\tSYS\tSYS\t X \tPIX\tNODE\tNODE\tSYS\t32-63,96-127\t1\t\tN/A
\u{1b}[4mGPU5\u{1b}[0m\tSYS\tSYS\tSYS\tSYS\tPIX\t X \tNODE\tNODE\tSYS\t32-63,96-127\t1\t\tN/A
\u{1b}[4mGPU6\u{1b}[0m\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\t X \tPIX\tSYS\t32-63,96-127\t1\t\tN/A
\u{1b}[4mGPU7\u{1b}[0m\tSYS\tSYS\tSYS\tSYS\tNODE\tNODE\tPIX\t X \tSYS\t32-63,96-127\t1\t\tN/A
\u{1b}[4mNIC0\u{1b}[0m\tNODE\tNODE\tPIX\tPIX\tSYS\tSYS\tSYS\tSYS\t X \t\t\t\t

Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks

NIC Legend:

  NIC0: mlx5_0
";

/// `topo -m` of an 8-GPU NVSwitch box (HGX H100).
pub fn topo_nvswitch() -> String {
    let mut s = String::from(
        "\tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n",
    );
    for i in 0..8 {
        s.push_str(&format!("GPU{i}"));
        for j in 0..8 {
            s.push_str(if i == j { "\t X " } else { "\tNV18" });
        }
        let (cpus, node) = if i < 4 {
            ("0-55,112-167", 0)
        } else {
            ("56-111,168-223", 1)
        };
        s.push_str(&format!("\t{cpus}\t{node}\t\tN/A\n"));
    }
    s.push_str(
        "\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n",
    );
    s
}

/// `topo -p2p r` (or `w`): `OK` everywhere, or `CNS` across the sockets where `cross_ok` is
/// false.
pub fn p2p(cross_ok: bool) -> String {
    let mut s = String::from(" \tGPU0\tGPU1\tGPU2\tGPU3\tGPU4\tGPU5\tGPU6\tGPU7\t\n");
    for i in 0..8 {
        s.push_str(&format!(" GPU{i}"));
        for j in 0..8 {
            let cell = if i == j {
                "X"
            } else if cross_ok || (i < 4) == (j < 4) {
                "OK"
            } else {
                "CNS"
            };
            s.push_str(&format!("\t{cell}"));
        }
        s.push_str("\t\n");
    }
    s.push_str("\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n  U    = Unknown\n");
    s
}

/// `--query-gpu=` [`servbench::host::smi::HOST_QUERY`] rows.
pub fn gpu_rows(fabric: Fabric, dirty: bool) -> String {
    let mut s = String::new();
    for i in 0..8 {
        let bus = format!("00000000:{:02X}:00.0", 0x17 + 0x10 * i);
        let (link_gen, gen_max) = if fabric == Fabric::NvSwitch {
            (5, 5)
        } else {
            (4, 4)
        };
        let link_gen = if dirty && i == 3 { 1 } else { link_gen };
        let throttle = if dirty && i == 5 {
            "0x0000000000000005"
        } else {
            "0x0000000000000001"
        };
        let ecc = if i == 6 { "[N/A]" } else { "Enabled" };
        let mem = if dirty && i == 2 { 20480 } else { 0 };
        s.push_str(&format!(
            "{i}, {bus}, {link_gen}, {gen_max}, 16, 16, Enabled, {ecc}, 345, 2520, 9001, {throttle}, 350.00, [N/A], {mem}\n"
        ));
    }
    s
}

/// A stand-in host: its root of /proc and /sys samples and its nvidia-smi.
pub struct HostBox(pub StandIn);

impl std::ops::Deref for HostBox {
    type Target = StandIn;
    fn deref(&self) -> &StandIn {
        &self.0
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
    std::fs::write(path, text).expect("write a sample");
}

impl HostBox {
    pub fn new(fabric: Fabric, dirty: bool) -> HostBox {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let root = d.join("root");
        let mut cpuinfo = String::new();
        for p in 0..4 {
            cpuinfo.push_str(&format!(
                "processor\t: {p}\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core Processor\nphysical id\t: {}\n\n",
                p / 2
            ));
        }
        write(&root.join("proc/cpuinfo"), &cpuinfo);
        let cmdline = if dirty {
            "BOOT_IMAGE=/vmlinuz-6.8.0 root=/dev/sda1 ro amd_pstate=active processor.max_cstate=1\n"
        } else {
            "BOOT_IMAGE=/vmlinuz-6.8.0 root=/dev/sda1 ro amd_pstate=active iommu=pt\n"
        };
        write(&root.join("proc/cmdline"), cmdline);
        write(
            &root.join("proc/meminfo"),
            "MemTotal:       1584839424 kB\nMemFree:        1500000000 kB\n",
        );
        write(
            &root.join("proc/sys/kernel/numa_balancing"),
            if dirty { "1\n" } else { "0\n" },
        );
        for c in 0..4 {
            let gov = if dirty && c == 3 {
                "powersave"
            } else {
                "performance"
            };
            let cpu = root.join(format!("sys/devices/system/cpu/cpu{c}/cpufreq"));
            write(&cpu.join("scaling_governor"), &format!("{gov}\n"));
            write(&cpu.join("scaling_driver"), "amd-pstate-epp\n");
        }
        write(&root.join("sys/devices/system/cpu/cpufreq/boost"), "1\n");
        for n in 0..2 {
            write(
                &root.join(format!("sys/devices/system/node/node{n}/cpulist")),
                "0-1\n",
            );
        }
        write(
            &root.join("sys/kernel/mm/transparent_hugepage/enabled"),
            "always [madvise] never\n",
        );
        let smi = d.join("smi");
        let topo = match fabric {
            Fabric::DualSocketPcie => TOPO_DUAL_SOCKET.to_string(),
            Fabric::NvSwitch => topo_nvswitch(),
        };
        write(&smi.join("topo.txt"), &topo);
        let cross_ok = !(dirty && fabric == Fabric::DualSocketPcie);
        write(&smi.join("p2p_r.txt"), &p2p(cross_ok));
        write(&smi.join("p2p_w.txt"), &p2p(cross_ok));
        write(&smi.join("gpus.csv"), &gpu_rows(fabric, dirty));
        let apps = if dirty {
            "00000000:37:00.0, 4242, 20480, python3\n"
        } else {
            ""
        };
        write(&smi.join("apps.csv"), apps);
        let name = match fabric {
            Fabric::DualSocketPcie => "NVIDIA L40S",
            Fabric::NvSwitch => "NVIDIA H100 80GB HBM3",
        };
        let script = format!(
            r#"#!/bin/sh
D='{smi}'
case "$*" in
  *--query-gpu=index,pci.bus_id,pcie.link.gen.current*) cat "$D/gpus.csv" ;;
  *--query-compute-apps=gpu_bus_id,pid,used_memory,process_name*) cat "$D/apps.csv" ;;
  *--query-gpu=index,name,driver_version*)
    for i in 0 1 2 3 4 5 6 7; do echo "$i, {name}, 550.54.15"; done ;;
  "topo -m") cat "$D/topo.txt" ;;
  "topo -p2p r") cat "$D/p2p_r.txt" ;;
  "topo -p2p w") cat "$D/p2p_w.txt" ;;
  "") echo "| NVIDIA-SMI 550.54.15      Driver Version: 550.54.15      CUDA Version: 12.4     |" ;;
  *) echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"#,
            smi = smi.display()
        );
        HostBox(StandIn::in_dir(dir, "nvidia-smi", &script))
    }

    /// The root the /proc and /sys samples are under (srv-launch's `--host-root`).
    pub fn root(&self) -> String {
        self.0.dir.path().join("root").display().to_string()
    }
}
