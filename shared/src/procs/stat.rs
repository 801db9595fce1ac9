//! Parsers of /proc process text: one /proc/PID/stat line, and the snapshot of a whole table a
//! remote host sends back.

use super::{ProcInfo, ProcTable};
use std::collections::BTreeMap;

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
        live_threads: false,
    })
}

/// Field 22 of /proc/PID/stat, the start time in clock ticks since boot.
pub fn start_ticks_of(pid: u32, stat: &str) -> Option<u64> {
    parse_stat(pid, stat).map(|p| p.start_ticks)
}

/// Whether a task's stat line (`/proc/PID/task/TID/stat`) is of a thread not yet dead.
pub fn task_lives(stat: &str) -> bool {
    parse_stat(0, stat).is_some_and(|t| !matches!(t.state, 'Z' | 'X' | 'x'))
}

/// Parses the output of the script a remote host runs to snapshot its process table
/// (`exec::Ssh::processes`): its own pid and boot id, every stat line, every command
/// line (NUL-separated `/proc/PID/cmdline:arg` items), the pids carrying the marker, and the
/// task stat lines of zombie leaders (`/proc/PID/task/TID/stat:LINE`).
pub fn parse_snapshot(out: &[u8]) -> ProcTable {
    let find = |needle: &[u8], from: usize| {
        out[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|i| i + from)
    };
    let cmd_sep = b"\n--cmdline--\n";
    let mark_sep = b"\n--marker--\n";
    let task_sep = b"\n--tasks--\n";
    let cmd_at = find(cmd_sep, 0).unwrap_or(out.len());
    let mark_at = find(mark_sep, cmd_at).unwrap_or(out.len());
    let task_at = find(task_sep, mark_at).unwrap_or(out.len());
    let head = String::from_utf8_lossy(&out[..cmd_at]);
    let mut self_pid = 0;
    let mut also_self = Vec::new();
    let mut procs: BTreeMap<u32, ProcInfo> = BTreeMap::new();
    for line in head.lines() {
        if let Some(pid) = line.strip_prefix("self ") {
            self_pid = pid.trim().parse().unwrap_or(0);
            continue;
        }
        if let Some(boot) = line.strip_prefix("boot ") {
            // The same kernel as ours (an SSH session to this machine): protect us too.
            if std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .is_ok_and(|b| b.trim() == boot.trim())
            {
                also_self.push(std::process::id());
            }
            continue;
        }
        let pid = line
            .split_whitespace()
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(p) = pid.and_then(|pid| parse_stat(pid, line)) {
            procs.insert(p.pid, p);
        }
    }
    let cmd_part = &out[(cmd_at + cmd_sep.len()).min(out.len())..mark_at];
    for item in cmd_part.split(|b| *b == 0) {
        let item = String::from_utf8_lossy(item);
        let item = item.trim_start_matches('\n');
        let Some(rest) = item.strip_prefix("/proc/") else {
            continue;
        };
        let Some((pid, arg)) = rest.split_once("/cmdline:") else {
            continue;
        };
        if let Some(p) = pid.parse::<u32>().ok().and_then(|pid| procs.get_mut(&pid)) {
            p.argv.push(arg.to_string());
        }
    }
    let mark_part = String::from_utf8_lossy(&out[(mark_at + mark_sep.len()).min(task_at)..task_at]);
    for line in mark_part.lines() {
        let pid = line
            .strip_prefix("/proc/")
            .and_then(|r| r.strip_suffix("/environ"))
            .and_then(|p| p.parse::<u32>().ok());
        if let Some(p) = pid.and_then(|pid| procs.get_mut(&pid)) {
            p.marked = true;
        }
    }
    let task_part = String::from_utf8_lossy(&out[(task_at + task_sep.len()).min(out.len())..]);
    for line in task_part.lines() {
        let Some((path, stat)) = line.split_once("/stat:") else {
            continue;
        };
        let pid = path
            .strip_prefix("/proc/")
            .and_then(|r| r.split_once("/task/"))
            .and_then(|(p, _)| p.parse::<u32>().ok());
        if let Some(p) = pid.and_then(|pid| procs.get_mut(&pid))
            && task_lives(stat)
        {
            p.live_threads = true;
        }
    }
    ProcTable {
        self_pid,
        also_self,
        procs: procs.into_values().collect(),
    }
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

    #[test]
    fn a_zombie_leader_with_a_live_task_in_a_snapshot_is_not_gone() {
        let stat = |pid: u32, state: char| {
            format!(
                "{pid} (python3) {state} 1 {pid} {pid} 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 987654 1000 10 1844"
            )
        };
        let out = format!(
            "self 1\n{}\n{}\n\n--cmdline--\n\n--marker--\n\n--tasks--\n/proc/70/task/70/stat:{}\n/proc/70/task/71/stat:{}\n/proc/80/task/80/stat:{}\n",
            stat(70, 'Z'),
            stat(80, 'Z'),
            stat(70, 'Z'),
            stat(71, 'S'),
            stat(80, 'Z'),
        );
        let t = parse_snapshot(out.as_bytes());
        let (a, b) = (t.get(70).unwrap(), t.get(80).unwrap());
        assert!(a.live_threads && !a.is_gone(), "{a:?}");
        assert!(!b.live_threads && b.is_gone(), "{b:?}");
    }
}
