//! Ending a process tree completely, on any host (through [`crate::exec::Exec`]): the kill
//! loop srv-kill runs and srv-launch `--replace` reuses. The target is resolved afresh on every
//! poll ([`crate::procs::TargetSpec::members`]); members once seen stay targets until gone, so a
//! worker reparented mid-kill is still followed. Signals go to single pids, each checked
//! against its start time right before the signal.

use crate::exec::{Exec, ExecError, Signal};
use crate::procs::{ProcId, TargetSpec};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How long after a walk that found no member the second walk looks again.
pub const CONFIRM_WAIT: Duration = Duration::from_millis(500);

/// How to kill.
#[derive(Debug, Clone)]
pub struct KillOptions {
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// How long to wait for processes to vanish after SIGKILL.
    pub kill_wait: Duration,
    pub poll: Duration,
    /// List what would be killed, signal nothing.
    pub dry_run: bool,
}

impl Default for KillOptions {
    fn default() -> Self {
        KillOptions {
            grace: Duration::from_secs(10),
            kill_wait: Duration::from_secs(10),
            poll: Duration::from_millis(100),
            dry_run: false,
        }
    }
}

/// What happened to one target.
#[derive(Debug, Clone, Default)]
pub struct KillOutcome {
    /// Every process that was a member at some point: pid and command line.
    pub matched: Vec<(u32, String)>,
    /// Signals sent, in order, once each (`TERM`, `KILL`).
    pub signals: Vec<String>,
    /// Members still alive at the end.
    pub survivors: Vec<u32>,
    pub elapsed: Duration,
}

/// Kills every member of `target`: TERM, wait up to the grace period (following members that
/// appear meanwhile), KILL to survivors, wait until all are gone.
pub fn kill(
    exec: &dyn Exec,
    target: &TargetSpec,
    opts: &KillOptions,
) -> Result<KillOutcome, ExecError> {
    let started = Instant::now();
    let mut out = KillOutcome::default();
    let mut known: BTreeSet<ProcId> = BTreeSet::new();
    let mut seen: BTreeMap<ProcId, String> = BTreeMap::new();
    let marker = target.marker.as_deref();

    // The members in a fresh table: the target's, and every process ever seen that still
    // lives (by pid and start time), so none found once drops out of the verdict.
    let scan = |known: &mut BTreeSet<ProcId>,
                seen: &mut BTreeMap<ProcId, String>|
     -> Result<BTreeSet<ProcId>, ExecError> {
        let table = exec.processes(marker)?;
        let mut members = target.members(&table, known);
        members.extend(seen.keys().filter(|id| {
            table
                .get(id.pid)
                .is_some_and(|p| p.id() == **id && !p.is_gone())
        }));
        for id in &members {
            if let Some(p) = table.get(id.pid) {
                seen.entry(*id).or_insert_with(|| p.shown_command());
            }
        }
        *known = members.clone();
        Ok(members)
    };
    // Gone is said only after a second walk, [`CONFIRM_WAIT`] later, finds nothing either: a
    // process the last members started as they exited (or one a walk passed over while /proc
    // changed under it) is found by its group, session, launch id or parent, and killed.
    let confirm = |known: &mut BTreeSet<ProcId>, seen: &mut BTreeMap<ProcId, String>| {
        std::thread::sleep(CONFIRM_WAIT);
        scan(known, seen)
    };

    let members = scan(&mut known, &mut seen)?;
    if opts.dry_run || members.is_empty() {
        out.matched = seen.iter().map(|(id, c)| (id.pid, c.clone())).collect();
        out.elapsed = started.elapsed();
        return Ok(out);
    }

    let mut termed: BTreeSet<ProcId> = BTreeSet::new();
    let grace_end = Instant::now() + opts.grace;
    let mut alive = members;
    loop {
        let fresh: Vec<ProcId> = alive.difference(&termed).copied().collect();
        if !fresh.is_empty() {
            exec.signal(&fresh, Signal::Term)?;
            termed.extend(fresh);
            if out.signals.is_empty() {
                out.signals.push(Signal::Term.name().into());
            }
        }
        if Instant::now() >= grace_end {
            break;
        }
        std::thread::sleep(opts.poll);
        alive = scan(&mut known, &mut seen)?;
        if alive.is_empty() {
            alive = confirm(&mut known, &mut seen)?;
            if alive.is_empty() {
                break;
            }
        }
    }
    if !alive.is_empty() {
        let kill_end = Instant::now() + opts.kill_wait;
        loop {
            let list: Vec<ProcId> = alive.iter().copied().collect();
            exec.signal(&list, Signal::Kill)?;
            if !out.signals.iter().any(|s| s == "KILL") {
                out.signals.push(Signal::Kill.name().into());
            }
            std::thread::sleep(opts.poll);
            alive = scan(&mut known, &mut seen)?;
            if alive.is_empty() {
                alive = confirm(&mut known, &mut seen)?;
            }
            if alive.is_empty() || Instant::now() >= kill_end {
                break;
            }
        }
    }
    out.survivors = alive.iter().map(|id| id.pid).collect();
    out.matched = seen.iter().map(|(id, c)| (id.pid, c.clone())).collect();
    out.elapsed = started.elapsed();
    Ok(out)
}

/// Waits until nothing listens on `port`, up to `timeout`; returns whether it is free.
pub fn wait_port_free(exec: &dyn Exec, port: u16, timeout: Duration) -> Result<bool, ExecError> {
    let end = Instant::now() + timeout;
    loop {
        if exec.listeners(port)?.is_free() {
            return Ok(true);
        }
        if Instant::now() >= end {
            return Ok(false);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
