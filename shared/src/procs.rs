//! Process trees and how to end one completely, on any host (through [`crate::exec::Exec`]).
//!
//! Inference servers leave workers behind: tensor-parallel ranks get reparented to init, some
//! call setsid, and a pid can be reused by a stranger between launch and kill. So a target is
//! resolved, on every poll, to the union of: its recorded leader (only while the start time
//! matches), every process in its process group or session, every process carrying its launch
//! marker in the environment, and every descendant of any of those (through ppid). Members once
//! seen stay targets until gone, so a worker reparented mid-kill is still followed. The caller
//! itself, its ancestors and its descendants are never members. Signals go to single pids, each
//! checked against its start time right before the signal.

use crate::exec::{Exec, ExecError, Signal};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// The environment entry srv-launch gives every server it starts (inherited by every
/// descendant): srv-kill finds workers that left the process group and session by it.
pub const LAUNCH_ID_VAR: &str = "SERVBENCH_LAUNCH_ID";

/// A process named so that pid reuse cannot fool us: pid plus start time (clock ticks since boot).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcId {
    pub pid: u32,
    pub start_ticks: u64,
}

/// One line of the process table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcInfo {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    /// State letter from /proc/PID/stat (`R`, `S`, `Z`, ...).
    pub state: char,
    pub start_ticks: u64,
    /// The command name from stat (`comm`), used when argv is empty.
    pub comm: String,
    pub argv: Vec<String>,
    /// Carries the environment marker that was asked for.
    pub marked: bool,
}

impl ProcInfo {
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start_ticks: self.start_ticks,
        }
    }

    /// Zombies and dead tasks count as gone: they hold no memory, GPU or port.
    pub fn is_gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }

    /// The command line, or `[comm]` for kernel threads and processes without one.
    pub fn command(&self) -> String {
        if self.argv.is_empty() {
            format!("[{}]", self.comm)
        } else {
            self.argv.join(" ")
        }
    }
}

/// A snapshot of a host's processes, and which of them is the one that took it.
#[derive(Debug, Clone, Default)]
pub struct ProcTable {
    /// The process that read the table (srv-kill itself, or the remote shell over SSH).
    pub self_pid: u32,
    /// More processes to treat like the reader: over SSH to this same machine (loopback), the
    /// local srv-kill and its callers are in the remote table too.
    pub also_self: Vec<u32>,
    pub procs: Vec<ProcInfo>,
}

impl ProcTable {
    pub fn get(&self, pid: u32) -> Option<&ProcInfo> {
        self.procs
            .binary_search_by_key(&pid, |p| p.pid)
            .ok()
            .map(|i| &self.procs[i])
    }

    /// The reader and its ancestors up to init (and kernel threads): never signalled.
    pub fn protected(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::from([0, 1]);
        let selves: BTreeSet<u32> = std::iter::once(self.self_pid)
            .chain(self.also_self.iter().copied())
            .collect();
        for &me in &selves {
            let mut pid = me;
            while pid > 1 && out.insert(pid) {
                pid = self.get(pid).map(|p| p.ppid).unwrap_or(0);
            }
        }
        // Kernel threads (children of kthreadd, pid 2) are nobody's to kill.
        out.insert(2);
        out.extend(self.procs.iter().filter(|p| p.ppid == 2).map(|p| p.pid));
        out
    }

    /// The reader's own descendants (its helpers: the snapshot's `cat` and `grep` over SSH, a
    /// server srv-launch just started): never matched by command line, though a target named
    /// by pid, group or session may include them.
    pub fn own_descendants(&self) -> BTreeSet<u32> {
        let selves: BTreeSet<u32> = std::iter::once(self.self_pid)
            .chain(self.also_self.iter().copied())
            .collect();
        self.descendants_of(&selves)
    }

    /// Every process below `roots` through ppid links (roots excluded).
    pub fn descendants_of(&self, roots: &BTreeSet<u32>) -> BTreeSet<u32> {
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for p in &self.procs {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        let mut out = BTreeSet::new();
        let mut stack: Vec<u32> = roots.iter().copied().collect();
        while let Some(pid) = stack.pop() {
            for &c in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if !roots.contains(&c) && out.insert(c) {
                    stack.push(c);
                }
            }
        }
        out
    }
}

/// Parses /proc/PID/stat. The command name is in parentheses and may contain spaces or `)`,
/// so fields are counted from the last `)`.
pub fn parse_stat(pid: u32, stat: &str) -> Option<ProcInfo> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state); field N is rest[N - 3].
    let field = |n: usize| rest.get(n - 3).copied();
    Some(ProcInfo {
        pid,
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgid: field(5)?.parse().ok()?,
        sid: field(6)?.parse().ok()?,
        start_ticks: field(22)?.parse().ok()?,
        comm,
        argv: Vec::new(),
        marked: false,
    })
}

/// Field 22 of /proc/PID/stat, the start time in clock ticks since boot.
pub fn start_ticks_of(pid: u32, stat: &str) -> Option<u64> {
    parse_stat(pid, stat).map(|p| p.start_ticks)
}

/// What a kill target consists of. Any mix of the parts may be given.
#[derive(Debug, Clone, Default)]
pub struct TargetSpec {
    /// How the target was named, for records and messages.
    pub name: String,
    /// Processes named by pid and start time (a server record's pid, a `--pid` resolved now).
    pub roots: Vec<ProcId>,
    /// Process groups whose members belong to the target.
    pub pgids: Vec<u32>,
    /// Sessions whose members belong to the target.
    pub sids: Vec<u32>,
    /// An environment entry (`SERVBENCH_LAUNCH_ID=...`) that marks the target's processes.
    pub marker: Option<String>,
    /// Group and session members must have started at or after this (a guard against a reused id).
    pub min_start_ticks: u64,
}

impl TargetSpec {
    /// The members of the target in `table`, plus `known` members still present.
    pub fn members(&self, table: &ProcTable, known: &BTreeSet<ProcId>) -> BTreeSet<ProcId> {
        let protected = table.protected();
        let mut seeds: BTreeSet<u32> = BTreeSet::new();
        for p in &table.procs {
            let in_root = self.roots.iter().any(|r| *r == p.id());
            let in_group = (self.pgids.contains(&p.pgid) || self.sids.contains(&p.sid))
                && p.start_ticks >= self.min_start_ticks;
            let is_known = known.contains(&p.id());
            if in_root || in_group || is_known || (self.marker.is_some() && p.marked) {
                seeds.insert(p.pid);
            }
        }
        let all = table.descendants_of(&seeds);
        seeds
            .into_iter()
            .chain(all)
            .filter(|pid| !protected.contains(pid))
            .filter_map(|pid| table.get(pid))
            .filter(|p| !p.is_gone())
            .map(ProcInfo::id)
            .collect()
    }
}

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

    let scan = |known: &mut BTreeSet<ProcId>,
                seen: &mut BTreeMap<ProcId, String>|
     -> Result<BTreeSet<ProcId>, ExecError> {
        let table = exec.processes(marker)?;
        let members = target.members(&table, known);
        for id in &members {
            if let Some(p) = table.get(id.pid) {
                seen.entry(*id).or_insert_with(|| p.command());
            }
        }
        *known = members.clone();
        Ok(members)
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
            break;
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

/// A target for one running pid: the process, its descendants, and its process group and
/// session when it leads them. `None` when there is no such (live) process.
pub fn target_for_pid(table: &ProcTable, pid: u32, name: &str) -> Option<TargetSpec> {
    let p = table.get(pid).filter(|p| !p.is_gone())?;
    Some(TargetSpec {
        name: name.to_string(),
        roots: vec![p.id()],
        pgids: if p.pgid == p.pid { vec![p.pid] } else { vec![] },
        sids: if p.sid == p.pid { vec![p.pid] } else { vec![] },
        marker: None,
        min_start_ticks: p.start_ticks,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_spaces_and_parens_in_the_name() {
        let stat = "4242 (my (odd) proc) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10 1844";
        let p = parse_stat(4242, stat).unwrap();
        assert_eq!(p.comm, "my (odd) proc");
        assert_eq!((p.state, p.ppid, p.pgid, p.sid), ('S', 1, 4242, 4242));
        assert_eq!(p.start_ticks, 987654);
        assert!(parse_stat(1, "garbage").is_none());
    }

    fn proc(pid: u32, ppid: u32, pgid: u32, sid: u32, start: u64) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            pgid,
            sid,
            state: 'S',
            start_ticks: start,
            comm: format!("p{pid}"),
            ..Default::default()
        }
    }

    #[test]
    fn members_follow_groups_sessions_descendants_and_spare_the_caller() {
        let table = ProcTable {
            self_pid: 50,
            also_self: vec![],
            procs: vec![
                proc(1, 0, 1, 1, 1),
                proc(10, 1, 10, 10, 100),  // server leader
                proc(11, 10, 10, 10, 110), // worker
                proc(12, 11, 12, 12, 120), // worker that called setsid
                proc(13, 1, 10, 10, 130),  // orphan still in the group
                proc(20, 1, 20, 20, 5),    // stranger
                proc(40, 1, 40, 40, 6),    // the caller's shell
                proc(50, 40, 10, 10, 200), // the caller, oddly in the same group
            ],
        };
        let spec = TargetSpec {
            roots: vec![ProcId {
                pid: 10,
                start_ticks: 100,
            }],
            pgids: vec![10],
            sids: vec![10],
            min_start_ticks: 100,
            ..Default::default()
        };
        let got: Vec<u32> = spec
            .members(&table, &BTreeSet::new())
            .iter()
            .map(|p| p.pid)
            .collect();
        assert_eq!(got, vec![10, 11, 12, 13]);

        // A stale record (start time differs) names nobody.
        let stale = TargetSpec {
            roots: vec![ProcId {
                pid: 20,
                start_ticks: 999,
            }],
            ..Default::default()
        };
        assert!(stale.members(&table, &BTreeSet::new()).is_empty());
    }
}
