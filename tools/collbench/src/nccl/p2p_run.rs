//! `collbench p2p --backend nccl`, wired: the libraries it needs (or one line saying which is
//! missing, exit 2), this process's GPUs (`-g N`, at least 2), each pair's `nvidia-smi topo -m`
//! link (matched by PCI bus id, bounded like every nvidia-smi run), then one `p2p` record per
//! ordered pair and method and the matrices on stderr.

use super::p2p::{Bench, Methods, bus_key};
use crate::culibs::Lib;
use crate::launch::Role;
use crate::p2p::{self as tcp_p2p, Cell, P2pConfig, pairs};
use crate::{Backend, Job};
use servbench::cli::{self, Exit};
use servbench::exec::{self, Bounds, SshOptions};
use servbench::jsonl::{self, Disposition, RecordWriter};
use servbench::record::{HostEnv, P2pMethod};
use std::time::Duration;

/// The flag every line of this path is led by.
const WHO: &str = "collbench p2p --backend nccl";

pub fn run(pc: &P2pConfig, job: &Job) -> anyhow::Result<Exit> {
    let methods = Methods {
        copy_engine: pc.only != Some(P2pMethod::Nccl),
        nccl: pc.only != Some(P2pMethod::CopyEngine),
    };
    let libs: &[Lib] = match methods.nccl {
        true => &[Lib::Driver, Lib::Nccl],
        false => &[Lib::Driver],
    };
    // Where there is no driver or NCCL: one line naming what is missing, exit 2.
    cli::info(super::check_libraries_for(WHO, libs)?);
    if !matches!(job.role, Role::Alone) {
        return Err(cli::usage(format!(
            "{WHO} measures the GPUs of one process (-g N); -np, --hosts and launcher ranks \
             are for --backend tcp"
        )));
    }
    let mut out = RecordWriter::stdout();
    jsonl::pass_through(job.strict_input, &mut out, |_| Disposition::Forward)?;
    let bench = Bench::open(WHO, job.gpus, pc.bytes)?;
    let links = pair_links(&bench.bus_ids());
    let iters = pc.run.iters;
    let world = job.gpus;
    // Each pair's record is written as soon as it is measured: a later pair that fails keeps
    // the earlier ones' figures (the matrices need every pair and are printed at the end).
    let mut written = 0usize;
    let mut unwritable = None;
    let measured = bench.run(methods, iters.warmup, iters.timed, |f| {
        let mut r = tcp_p2p::record(pc, Backend::Nccl, world, (f.src, f.dst), &f.cell);
        r.method = f.method;
        r.peer_access = f.peer_access;
        r.link = link_of(&links, world, (f.src, f.dst));
        out.emit(&r).map_err(|e| {
            let why = e.to_string();
            unwritable = Some(e);
            why
        })?;
        written += 1;
        Ok(())
    });
    if let Some(e) = unwritable {
        return Err(e.into());
    }
    let figures = measured.map_err(|e| {
        cli::failure(format!(
            "{WHO}: {e} ({written} pair record(s) measured before it were written)"
        ))
    })?;
    for method in [P2pMethod::CopyEngine, P2pMethod::Nccl] {
        let mine: Vec<_> = figures.iter().filter(|f| f.method == method).collect();
        if mine.is_empty() {
            continue;
        }
        let cells: Vec<Cell> = mine.iter().map(|f| f.cell).collect();
        let how = match method {
            P2pMethod::CopyEngine => "copy engine (cuMemcpyPeerAsync)",
            _ => "NCCL send/recv",
        };
        let shown = (method == P2pMethod::CopyEngine).then_some(&links[..]);
        for line in tcp_p2p::matrices(pc, how, world, &cells, shown).lines() {
            cli::info(line);
        }
        if method == P2pMethod::CopyEngine {
            let off: Vec<String> = mine
                .iter()
                .filter(|f| f.peer_access == Some(false))
                .map(|f| format!("{}->{}", f.src, f.dst))
                .collect();
            if !off.is_empty() {
                cli::info(format!(
                    "note: no direct peer access between GPUs {} (cuDeviceCanAccessPeer): \
                     those copies went through host memory",
                    off.join(", ")
                ));
            }
        }
    }
    Ok(Exit::Ok)
}

/// Each pair's link in [`pairs`]' order.
fn link_of(links: &[Option<String>], world: usize, pair: (usize, usize)) -> Option<String> {
    let at = pairs(world).iter().position(|&p| p == pair)?;
    links.get(at).cloned().flatten()
}

/// Each ordered pair's `topo -m` cell, the CUDA devices matched to nvidia-smi's GPUs by PCI
/// bus id (CUDA's order and CUDA_VISIBLE_DEVICES need not be nvidia-smi's); `None` where
/// nvidia-smi, the matrix or a bus id is missing.
fn pair_links(bus_ids: &[Option<String>]) -> Vec<Option<String>> {
    let world = bus_ids.len();
    let none = vec![None; pairs(world).len()];
    let Ok(local) = exec::connect(None, &SshOptions::default()) else {
        return none;
    };
    let mut host = HostEnv::default();
    let bounds = |cap: usize| Some(Bounds::new(Duration::from_secs(10), cap));
    servbench::host::smi::read_gpus(&*local, "nvidia-smi", &bounds, &mut host);
    let Some(topo) = &host.topology else {
        return none;
    };
    let index_of = |d: usize| -> Option<u32> {
        let key = bus_key(bus_ids.get(d)?.as_deref()?)?;
        host.gpus
            .iter()
            .find(|g| g.pci_bus_id.as_deref().and_then(bus_key) == Some(key.clone()))
            .map(|g| g.index)
    };
    pairs(world)
        .into_iter()
        .map(|(s, d)| {
            let (a, b) = (index_of(s)?, index_of(d)?);
            let (i, j) = (
                topo.gpus.iter().position(|g| *g == a)?,
                topo.gpus.iter().position(|g| *g == b)?,
            );
            topo.links.get(i)?.get(j).cloned()
        })
        .collect()
}
