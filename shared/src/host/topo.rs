//! What the GPU topology matrix says: the class of each link (`topo -m`'s words), which GPUs
//! share a socket, the best-connected group of each size, and the interconnect level a group's
//! allreduce crosses (the comm model's input, so TP4 on one socket costs less than across two).

use crate::presets::{Interconnect, Level};
use crate::record::{GpuTopology, HostEnv};

/// One link of `topo -m`, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkClass {
    /// A bonded set of this many NVLinks (`NV12`); more is better.
    Nvlink(u32),
    /// At most one PCIe bridge (`PIX`).
    Pix,
    /// Several PCIe bridges, no host bridge (`PXB`).
    Pxb,
    /// Through a PCIe host bridge (`PHB`).
    Phb,
    /// Between host bridges within one NUMA node (`NODE`).
    Node,
    /// Across the inter-socket link (`SYS`).
    Sys,
    /// A word nvidia-smi did not document.
    Unknown,
}

impl LinkClass {
    pub fn of(cell: &str) -> LinkClass {
        match cell.trim() {
            "PIX" => LinkClass::Pix,
            "PXB" => LinkClass::Pxb,
            "PHB" => LinkClass::Phb,
            "NODE" => LinkClass::Node,
            "SYS" => LinkClass::Sys,
            c => match c.strip_prefix("NV").and_then(|n| n.parse::<u32>().ok()) {
                Some(n) => LinkClass::Nvlink(n),
                None => LinkClass::Unknown,
            },
        }
    }

    /// Lower is better: NVLink by link count, then the PCIe classes in `topo -m`'s order.
    pub fn cost(self) -> u32 {
        match self {
            LinkClass::Nvlink(n) => 100 - n.min(99),
            LinkClass::Pix => 200,
            LinkClass::Pxb => 300,
            LinkClass::Phb => 400,
            LinkClass::Node => 500,
            LinkClass::Sys => 600,
            LinkClass::Unknown => 700,
        }
    }

    /// In words, for the matrix's topology row (`same switch`, `across sockets`).
    pub fn words(self) -> String {
        match self {
            LinkClass::Nvlink(n) => format!("{n} NVLinks"),
            LinkClass::Pix => "same PCIe switch".into(),
            LinkClass::Pxb => "PCIe switches".into(),
            LinkClass::Phb => "host bridge".into(),
            LinkClass::Node => "host bridges, one socket".into(),
            LinkClass::Sys => "across sockets".into(),
            LinkClass::Unknown => "unknown".into(),
        }
    }
}

impl GpuTopology {
    fn position(&self, gpu: u32) -> Option<usize> {
        self.gpus.iter().position(|g| *g == gpu)
    }

    /// The link between two GPUs; `None` where either is not in the matrix.
    pub fn link(&self, a: u32, b: u32) -> Option<LinkClass> {
        let (i, j) = (self.position(a)?, self.position(b)?);
        self.links.get(i)?.get(j).map(|c| LinkClass::of(c))
    }

    /// The P2P read status between two GPUs (`OK`, `CNS`, ...), where given.
    pub fn p2p_read(&self, a: u32, b: u32) -> Option<&str> {
        let (i, j) = (self.position(a)?, self.position(b)?);
        self.p2p_read.get(i)?.get(j).map(String::as_str)
    }

    /// The slowest link within `group` (`None` for fewer than two GPUs or a GPU not listed).
    pub fn worst_link(&self, group: &[u32]) -> Option<LinkClass> {
        let mut worst: Option<LinkClass> = None;
        for (k, &a) in group.iter().enumerate() {
            for &b in &group[k + 1..] {
                let l = self.link(a, b)?;
                worst = Some(worst.map_or(l, |w| if l.cost() > w.cost() { l } else { w }));
            }
        }
        worst
    }

    fn score(&self, group: &[u32]) -> Option<(u32, u32)> {
        let worst = self.worst_link(group)?.cost();
        let mut sum = 0;
        for (k, &a) in group.iter().enumerate() {
            for &b in &group[k + 1..] {
                sum += self.link(a, b)?.cost();
            }
        }
        Some((worst, sum))
    }

    /// The best-connected group of `size` GPUs: the smallest slowest link, then the smallest
    /// sum of links, then the lowest indices. `None` for a size beyond the GPUs, below 2, or a
    /// matrix of more than 16 GPUs (not searched).
    pub fn best_group(&self, size: usize) -> Option<Vec<u32>> {
        let n = self.gpus.len();
        if size < 2 || size > n || n > 16 {
            return None;
        }
        let mut best: Option<((u32, u32), Vec<u32>)> = None;
        for mask in 0u32..(1 << n) {
            if mask.count_ones() as usize != size {
                continue;
            }
            let group: Vec<u32> = (0..n)
                .filter(|i| mask & (1 << i) != 0)
                .map(|i| self.gpus[i])
                .collect();
            let Some(score) = self.score(&group) else {
                continue;
            };
            let better = best
                .as_ref()
                .is_none_or(|(s, g)| score < *s || (score == *s && group < *g));
            if better {
                best = Some((score, group));
            }
        }
        best.map(|(_, g)| g)
    }
}

/// Whether `group` spans sockets: its GPUs' NUMA nodes differ, or (NUMA nodes unknown) a link
/// within it is `SYS`.
pub fn crosses_sockets(host: &HostEnv, group: &[u32]) -> bool {
    let nodes: Vec<Option<u32>> = group
        .iter()
        .map(|i| {
            host.gpus
                .iter()
                .find(|g| g.index == *i)
                .and_then(|g| g.numa_node)
        })
        .collect();
    if nodes.iter().all(Option::is_some) && !nodes.is_empty() {
        return nodes.windows(2).any(|w| w[0] != w[1]);
    }
    host.topology
        .as_ref()
        .and_then(|t| t.worst_link(group))
        .is_some_and(|l| l == LinkClass::Sys)
}

/// The interconnect a `group` of GPUs sees on a card: one level, the card's outermost where
/// the group crosses sockets, its innermost otherwise, named after the group, so the modelled
/// allreduce follows the GPUs actually given.
pub fn group_interconnect(card: &Interconnect, group: &[u32], across: bool) -> Interconnect {
    let pick = if across {
        card.levels.last()
    } else {
        card.levels.first()
    };
    let level = pick.cloned().unwrap_or(Level {
        name: "node".into(),
        gpus: 1,
        hop_us: 0.0,
        busbw_gbps: 1.0,
    });
    let list: Vec<String> = group.iter().map(u32::to_string).collect();
    let place = if across {
        "across sockets"
    } else {
        "one socket"
    };
    Interconnect {
        name: format!("{} (GPUs {}: {place})", card.name, list.join(",")),
        kind: card.kind,
        levels: vec![Level {
            name: format!("{} (GPUs {}, {place})", level.name, list.join(",")),
            gpus: level.gpus.max(group.len() as u32),
            ..level
        }],
        nvls_busbw_gbps: card.nvls_busbw_gbps,
    }
}

/// The host record of the first `server` record in `path` whose host has a topology matrix,
/// with the GPUs that server was given (`gpus`, as indices); `None` where none has one.
pub fn host_from_records(path: &str) -> anyhow::Result<Option<(HostEnv, Vec<u32>)>> {
    use crate::jsonl::{self, Source};
    let mut found = None;
    jsonl::read_all(&[Source::parse(path)], true, |line| {
        if found.is_none()
            && let crate::record::Record::Server(s) = line.record
            && let Some(h) = s.env.and_then(|e| e.host)
            && h.topology.is_some()
        {
            found = Some((*h, crate::exec::gpu::indices_of(s.gpus.as_deref())));
        }
        Ok(())
    })?;
    Ok(found)
}

/// The TP group a topology-aware cost is for: `given` when it names `tp` GPUs of the matrix,
/// else the best-connected group of `tp` GPUs; an error naming what is wrong.
pub fn tp_group(host: &HostEnv, given: &[u32], tp: u32) -> Result<Vec<u32>, String> {
    let t = host
        .topology
        .as_ref()
        .ok_or("the host record has no topology matrix")?;
    if !given.is_empty() {
        if given.len() != tp as usize {
            return Err(format!(
                "{} GPUs given for a TP-{tp} group: give {tp}",
                given.len()
            ));
        }
        if let Some(g) = given.iter().find(|g| !t.gpus.contains(g)) {
            return Err(format!(
                "GPU {g} is not in the host's topology matrix (GPUs {:?})",
                t.gpus
            ));
        }
        return Ok(given.to_vec());
    }
    t.best_group(tp as usize).ok_or_else(|| {
        format!(
            "no group of {tp} GPUs in the host's topology matrix ({} GPUs)",
            t.gpus.len()
        )
    })
}

/// The card's interconnect as `group` on `host` sees it ([`group_interconnect`]), and whether
/// the group crosses sockets: by NUMA node, or a `SYS` link within it.
pub fn interconnect_for(
    card: &Interconnect,
    host: &HostEnv,
    group: &[u32],
) -> (Interconnect, bool) {
    let sys = host
        .topology
        .as_ref()
        .and_then(|t| t.worst_link(group))
        .is_some_and(|l| l == LinkClass::Sys);
    let across = sys || crosses_sockets(host, group);
    (group_interconnect(card, group, across), across)
}
