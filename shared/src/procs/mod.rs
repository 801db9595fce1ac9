//! Process tables and kill targets, as data: what a host's processes are (pid, start time,
//! group, session, parent, command line, launch marker) and which of them a target covers.
//! Nothing here touches a host: `exec` fills tables on one (through the /proc text
//! parsers in [`stat`] and [`net`]) and `kill` ends targets there.
//!
//! Inference servers leave workers behind: tensor-parallel ranks get reparented to init, some
//! call setsid, and a pid can be reused by a stranger between launch and kill. So a target is
//! resolved, on every poll, to the union of: its recorded leader (only while the start time
//! matches), every process in its process group or session (only while a member proves the id
//! is still the launch's: ids are reused), every process carrying its launch marker in the
//! environment, and every descendant of any of those (through ppid). Init, kernel threads, the
//! caller itself and its ancestors are never members and never start the walk to descendants;
//! the caller's descendants are never matched by command line. Command lines are shown with
//! secret-looking values redacted ([`redact_secrets`]).

pub mod net;
pub mod stat;

pub use net::{PORT_TABLES, parse_listen_inodes, pick_free_port, used_local_ports};
pub use stat::{parse_snapshot, parse_stat, start_ticks_of, task_lives};

use std::collections::{BTreeMap, BTreeSet};

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
    /// A zombie leader whose thread group still runs: another of its threads is not dead yet
    /// (the process is still exiting, and holds its memory, GPU and sockets until it is).
    pub live_threads: bool,
}

impl ProcInfo {
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start_ticks: self.start_ticks,
        }
    }

    /// Zombies and dead tasks count as gone: they hold no memory, GPU or port. A zombie
    /// leader with [`ProcInfo::live_threads`] does not: its process has not ended.
    pub fn is_gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x') && !self.live_threads
    }

    /// The command line, or `[comm]` for kernel threads and processes without one.
    pub fn command(&self) -> String {
        if self.argv.is_empty() {
            format!("[{}]", self.comm)
        } else {
            self.argv.join(" ")
        }
    }

    /// The command line to show or record: [`redact_secrets`] of [`ProcInfo::command`].
    pub fn shown_command(&self) -> String {
        redact_secrets(&self.command()).into_owned()
    }
}

/// What a secret's value is replaced by.
pub const REDACTED: &str = "***";

/// Words that make a flag or variable name a secret's (`--api-key`, `--hf-token`,
/// `OPENAI_API_KEY=`): compared with the name's `-`/`_`-separated parts, so `--max-tokens`
/// and `--ssl-keyfile` are not secrets.
const SECRET_WORDS: [&str; 8] = [
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "credentials",
];

fn is_secret_name(name: &str) -> bool {
    name.to_ascii_lowercase()
        .split(['-', '_'])
        .any(|part| SECRET_WORDS.contains(&part))
}

/// A command line with the values of secret-looking arguments replaced by [`REDACTED`]:
/// `--api-key X`, `--token=X`, `HF_TOKEN=X`. Server records and kill records carry command
/// lines, and an engine's own `--api-key` after `--` must not travel with them. Words are
/// whitespace-separated, so a `sh -c` script's words are covered too.
pub fn redact_secrets(command: &str) -> std::borrow::Cow<'_, str> {
    let words: Vec<(usize, &str)> = command
        .split_ascii_whitespace()
        .map(|w| (w.as_ptr() as usize - command.as_ptr() as usize, w))
        .collect();
    // Byte ranges of `command` to replace.
    let mut masked: Vec<(usize, usize)> = Vec::new();
    let mut mask_next = false;
    for &(at, word) in &words {
        if std::mem::take(&mut mask_next) {
            masked.push((at, at + word.len()));
            continue;
        }
        // A quoted word (`'--token=x'` in a shell-quoted command) keeps its quotes.
        let bare = word.trim_start_matches(['\'', '"']);
        let lead = word.len() - bare.len();
        let bare = if lead > 0 {
            bare.trim_end_matches(['\'', '"'])
        } else {
            bare
        };
        let end = at + lead + bare.len();
        if let Some(flag) = bare.strip_prefix('-') {
            let flag = flag.trim_start_matches('-');
            match flag.split_once('=') {
                Some((name, value)) if is_secret_name(name) && !value.is_empty() => {
                    masked.push((end - value.len(), end));
                }
                None if is_secret_name(flag) => mask_next = true,
                _ => {}
            }
        } else if let Some((name, value)) = bare.split_once('=')
            && !value.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && is_secret_name(name)
        {
            masked.push((end - value.len(), end));
        }
    }
    if masked.is_empty() {
        return std::borrow::Cow::Borrowed(command);
    }
    let mut out = String::with_capacity(command.len());
    let mut last = 0;
    for (start, end) in masked {
        out.push_str(&command[last..start]);
        out.push_str(REDACTED);
        last = end;
    }
    out.push_str(&command[last..]);
    std::borrow::Cow::Owned(out)
}

/// An argv with the values of secret-looking arguments replaced by [`REDACTED`], word by word
/// as [`redact_secrets`] does a command line (`--api-key X` masks the next word).
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut mask_next = false;
    argv.iter()
        .map(|a| {
            if std::mem::take(&mut mask_next) {
                return REDACTED.to_string();
            }
            if let Some(flag) = a.strip_prefix('-') {
                let flag = flag.trim_start_matches('-');
                if !flag.contains('=') && is_secret_name(flag) {
                    mask_next = true;
                }
            }
            redact_secrets(a).into_owned()
        })
        .collect()
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

    /// The reader and its ancestors up to init (and kernel threads): never signalled, and
    /// never the start of a walk to descendants (every process descends from init).
    pub fn protected(&self) -> BTreeSet<u32> {
        let mut out = BTreeSet::from([0, 1]);
        for &me in &self.selves() {
            let mut pid = me;
            while pid > 1 && out.insert(pid) {
                pid = self.get(pid).map(|p| p.ppid).unwrap_or(0);
            }
        }
        // Kernel threads (kthreadd, pid 2 with no parent, and its children) are nobody's to
        // kill. In a pid namespace, pid 2 is an ordinary process.
        if self.is_kthreadd(2) {
            out.insert(2);
            out.extend(self.procs.iter().filter(|p| p.ppid == 2).map(|p| p.pid));
        }
        out
    }

    fn is_kthreadd(&self, pid: u32) -> bool {
        pid == 2 && self.get(2).is_some_and(|p| p.ppid == 0)
    }

    /// Why `pid` must not be signalled, when it must not: init, a kernel thread, the reader or
    /// one of its callers (for refusals that say which).
    pub fn why_protected(&self, pid: u32) -> Option<&'static str> {
        if !self.protected().contains(&pid) {
            return None;
        }
        Some(match pid {
            0 => "not a process (0)",
            1 => "init",
            _ if self.selves().contains(&pid) => "srv-kill itself",
            _ if self.is_kthreadd(pid) || self.get(pid).is_some_and(|p| p.ppid == 2) => {
                "a kernel thread"
            }
            _ => "one of srv-kill's callers (its shell, terminal or SSH session)",
        })
    }

    fn selves(&self) -> BTreeSet<u32> {
        std::iter::once(self.self_pid)
            .chain(self.also_self.iter().copied())
            .collect()
    }

    /// The reader's own descendants (its helpers: the snapshot's `cat` and `grep` over SSH, a
    /// server srv-launch just started): never matched by command line, though a target named
    /// by pid, group or session may include them.
    pub fn own_descendants(&self) -> BTreeSet<u32> {
        self.descendants_of(&self.selves(), &BTreeSet::new())
    }

    /// Every process below `roots` through ppid links (roots excluded), not walking through
    /// `barrier` (nor including it).
    pub fn descendants_of(&self, roots: &BTreeSet<u32>, barrier: &BTreeSet<u32>) -> BTreeSet<u32> {
        let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for p in &self.procs {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        let mut out = BTreeSet::new();
        let mut stack: Vec<u32> = roots.iter().copied().collect();
        while let Some(pid) = stack.pop() {
            for &c in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if !roots.contains(&c) && !barrier.contains(&c) && out.insert(c) {
                    stack.push(c);
                }
            }
        }
        out
    }
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
    ///
    /// A group or session id is trusted only through a process in it that proves it belongs
    /// to the target: a root (pid and start time as recorded), a member already known, or a
    /// carrier of the launch marker. Linux frees an id for reuse only once nobody uses it, so
    /// a proven member means the group is still ours; without one, its id may be a stranger's
    /// now. Protected processes (init, kernel threads, srv-kill and its callers) prove
    /// nothing, never seed the walk to descendants, and the groups they lead (init's, the
    /// caller's shell's) are never taken whole.
    pub fn members(&self, table: &ProcTable, known: &BTreeSet<ProcId>) -> BTreeSet<ProcId> {
        let protected = table.protected();
        let proves = |p: &ProcInfo| {
            !protected.contains(&p.pid)
                && (self.roots.contains(&p.id())
                    || known.contains(&p.id())
                    || (self.marker.is_some() && p.marked))
        };
        let provers: Vec<&ProcInfo> = table.procs.iter().filter(|p| proves(p)).collect();
        let pgids: BTreeSet<u32> = self
            .pgids
            .iter()
            .copied()
            .filter(|g| !protected.contains(g) && provers.iter().any(|p| p.pgid == *g))
            .collect();
        let sids: BTreeSet<u32> = self
            .sids
            .iter()
            .copied()
            .filter(|s| !protected.contains(s) && provers.iter().any(|p| p.sid == *s))
            .collect();
        let seeds: BTreeSet<u32> = table
            .procs
            .iter()
            .filter(|p| !protected.contains(&p.pid))
            .filter(|p| {
                let in_group = (pgids.contains(&p.pgid) || sids.contains(&p.sid))
                    && p.start_ticks >= self.min_start_ticks;
                proves(p) || in_group
            })
            .map(|p| p.pid)
            .collect();
        let all = table.descendants_of(&seeds, &protected);
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

    fn pids(set: BTreeSet<ProcId>) -> Vec<u32> {
        set.iter().map(|p| p.pid).collect()
    }

    #[test]
    fn a_protected_root_never_seeds_the_walk_to_descendants() {
        let table = ProcTable {
            self_pid: 50,
            also_self: vec![],
            procs: vec![
                proc(1, 0, 1, 1, 1),
                proc(20, 1, 20, 20, 5),    // a stranger, child of init
                proc(21, 20, 20, 20, 6),   // its child
                proc(40, 1, 40, 40, 6),    // the caller's shell
                proc(45, 40, 45, 40, 7),   // another job of that shell
                proc(50, 40, 50, 40, 200), // the caller
            ],
        };
        for root in [(1, 1), (40, 6)] {
            let spec = TargetSpec {
                roots: vec![ProcId {
                    pid: root.0,
                    start_ticks: root.1,
                }],
                pgids: vec![root.0],
                sids: vec![root.0],
                ..Default::default()
            };
            assert!(
                spec.members(&table, &BTreeSet::new()).is_empty(),
                "root {root:?} took {:?}",
                pids(spec.members(&table, &BTreeSet::new()))
            );
        }
        assert_eq!(table.why_protected(1), Some("init"));
        // Kernel threads: kthreadd (pid 2, no parent) and its children; its group is 0.
        let mut host = table.clone();
        host.procs.insert(1, proc(2, 0, 0, 0, 1));
        host.procs.insert(2, proc(3, 2, 0, 0, 1));
        let kthreads = TargetSpec {
            roots: vec![ProcId {
                pid: 2,
                start_ticks: 1,
            }],
            pgids: vec![0],
            sids: vec![0],
            ..Default::default()
        };
        assert!(kthreads.members(&host, &BTreeSet::new()).is_empty());
        assert_eq!(host.why_protected(2), Some("a kernel thread"));
        assert_eq!(host.why_protected(3), Some("a kernel thread"));
        // In a pid namespace pid 2 is an ordinary process.
        let mut ns = table.clone();
        ns.procs.insert(1, proc(2, 1, 2, 2, 9));
        assert_eq!(ns.why_protected(2), None);
        assert_eq!(table.why_protected(50), Some("srv-kill itself"));
        assert!(table.why_protected(40).unwrap().contains("callers"));
        assert_eq!(table.why_protected(20), None);
    }

    #[test]
    fn a_reused_group_id_is_trusted_only_through_a_member_that_proves_it() {
        // The server (pid 10, group and session 10) is gone; a stranger now leads nothing but
        // its child sits in group 10 (the leader exited), started after the record's time.
        let table = ProcTable {
            self_pid: 50,
            also_self: vec![],
            procs: vec![
                proc(1, 0, 1, 1, 1),
                proc(11, 1, 10, 10, 500), // stranger in the reused group
                proc(50, 1, 50, 50, 600),
            ],
        };
        let mut spec = TargetSpec {
            roots: vec![ProcId {
                pid: 10,
                start_ticks: 100,
            }],
            pgids: vec![10],
            sids: vec![10],
            marker: Some(format!("{LAUNCH_ID_VAR}=abc")),
            min_start_ticks: 100,
            ..Default::default()
        };
        assert!(spec.members(&table, &BTreeSet::new()).is_empty());

        // A worker carrying the launch marker proves the group: the rest of it is ours too.
        let mut proven = table.clone();
        proven.procs.insert(2, proc(12, 1, 10, 10, 150));
        proven.procs[2].marked = true;
        assert_eq!(pids(spec.members(&proven, &BTreeSet::new())), vec![11, 12]);

        // A member seen on an earlier poll proves it too; without a marker, nothing does.
        spec.marker = None;
        assert!(spec.members(&proven, &BTreeSet::new()).is_empty());
        let known = BTreeSet::from([ProcId {
            pid: 12,
            start_ticks: 150,
        }]);
        assert_eq!(pids(spec.members(&proven, &known)), vec![11, 12]);
    }

    #[test]
    fn secrets_in_argv_are_redacted_word_by_word() {
        let argv: Vec<String> = [
            "vllm",
            "serve",
            "m",
            "--api-key",
            "k1",
            "--token=k2",
            "HF_TOKEN=k3",
            "--max-tokens",
            "9",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let r = redact_argv(&argv);
        assert!(
            !r.iter()
                .any(|w| w.contains("k1") || w.contains("k2") || w.contains("k3")),
            "{r:?}"
        );
        assert_eq!(r[8], "9");
        assert_eq!(r.len(), argv.len());
    }

    #[test]
    fn secrets_in_command_lines_are_redacted_and_look_alikes_are_not() {
        let cases = [
            (
                "vllm serve m --api-key sk-123 --max-tokens 16 --port 8000",
                "vllm serve m --api-key *** --max-tokens 16 --port 8000",
            ),
            (
                "x --hf-token=hf_abc --ssl-keyfile k.pem --admin_api_key  s3",
                "x --hf-token=*** --ssl-keyfile k.pem --admin_api_key  ***",
            ),
            (
                "sh -c python3 -m s; : --token t0k sh OPENAI_API_KEY=sk-9 HF_TOKEN= x",
                "sh -c python3 -m s; : --token *** sh OPENAI_API_KEY=*** HF_TOKEN= x",
            ),
            (
                "'--password=a' \"DB_PASSWORD=b\"",
                "'--password=***' \"DB_PASSWORD=***\"",
            ),
            (
                "llama-server -m tiny.gguf --max-num-batched-tokens 8",
                "llama-server -m tiny.gguf --max-num-batched-tokens 8",
            ),
            ("tail --api-key", "tail --api-key"),
        ];
        for (raw, shown) in cases {
            assert_eq!(redact_secrets(raw), shown, "{raw}");
        }
    }
}
