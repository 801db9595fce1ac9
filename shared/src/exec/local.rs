//! This machine: syscalls and /proc directly.

use super::{Bounds, Detached, Exec, ExecError, Listeners, NOT_A_FILE, Output, Signal};
use crate::procs::{
    PORT_TABLES, ProcId, ProcTable, parse_listen_inodes, parse_stat, pick_free_port, task_lives,
};
use std::io::Read;
use std::net::TcpListener;
use std::path::Path;

/// The pids in /proc, as they are listed.
fn proc_pids() -> std::io::Result<impl Iterator<Item = u32>> {
    Ok(std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok())))
}

/// Whether a thread of `pid` other than a dead one is left (its leader being a zombie).
fn live_threads(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks
        .flatten()
        .any(|t| std::fs::read_to_string(t.path().join("stat")).is_ok_and(|stat| task_lives(&stat)))
}

/// This machine: syscalls and /proc directly.
#[derive(Debug, Default)]
pub struct Local;

impl Exec for Local {
    fn host(&self) -> &str {
        "localhost"
    }

    fn is_local(&self) -> bool {
        true
    }

    fn run(&self, script: &str, bounds: Bounds) -> Result<Output, ExecError> {
        super::bounded::run_local(script, bounds)
    }

    fn spawn_detached(&self, spec: &Detached) -> Result<u32, ExecError> {
        use std::os::unix::fs::OpenOptionsExt;
        use std::os::unix::process::CommandExt;
        let Some((program, args)) = spec.argv.split_first() else {
            return Err(ExecError::Command("empty command".into()));
        };
        if let Some(dir) = Path::new(&spec.log).parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| ExecError::io(format!("cannot create {}", dir.display()), e))?;
        }
        // Non-blocking: a FIFO without a reader fails (ENXIO) instead of blocking open(2)
        // forever; whatever opened, only a regular file is a log the tools can read back.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&spec.log);
        let not_a_file = || ExecError::Command(format!("the log {} {NOT_A_FILE}", spec.log));
        let log = match log {
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => return Err(not_a_file()),
            Err(e) => return Err(ExecError::io(format!("cannot open log {}", spec.log), e)),
            Ok(f) if !f.metadata().is_ok_and(|m| m.is_file()) => return Err(not_a_file()),
            Ok(f) => f,
        };
        let log2 = log
            .try_clone()
            .map_err(|e| ExecError::io("cannot duplicate the log handle", e))?;
        let mut cmd = std::process::Command::new(program);
        cmd.args(args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(std::process::Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(dir) = &spec.cwd {
            cmd.current_dir(dir);
        }
        // SAFETY: setsid(2) is async-signal-safe and touches nothing of the parent.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| ExecError::io(format!("cannot start {program}"), e))?;
        // The child is reaped by nobody while we run (a dead one shows as a zombie, which every
        // check treats as gone); once we exit, init adopts it.
        let pid = child.id();
        std::mem::forget(child);
        Ok(pid)
    }

    fn read_tail(&self, path: &str, max_bytes: u64) -> Result<Option<Vec<u8>>, ExecError> {
        use std::io::{Seek, SeekFrom};
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(ExecError::io(format!("cannot read {path}"), e)),
        };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if len > max_bytes {
            let _ = f.seek(SeekFrom::Start(len - max_bytes));
        }
        let mut buf = Vec::new();
        match f.take(max_bytes).read_to_end(&mut buf) {
            Ok(_) => Ok(Some(buf)),
            // A process that exits between open and read.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => Ok(None),
            Err(e) => Err(ExecError::io(format!("cannot read {path}"), e)),
        }
    }

    fn file_len(&self, path: &str) -> Result<Option<u64>, ExecError> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ExecError::io(format!("cannot read {path}"), e)),
        }
    }

    fn file_stat(&self, path: &str) -> Result<Option<super::FileStat>, ExecError> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(super::FileStat {
                len: m.len(),
                regular: m.is_file(),
                id: format!("{}:{}", m.dev(), m.ino()),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ExecError::io(format!("cannot read {path}"), e)),
        }
    }

    fn read_from(
        &self,
        path: &str,
        offset: u64,
        max_bytes: u64,
    ) -> Result<Option<Vec<u8>>, ExecError> {
        use std::io::{Seek, SeekFrom};
        let mut f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(ExecError::io(format!("cannot read {path}"), e)),
        };
        f.seek(SeekFrom::Start(offset))
            .map_err(|e| ExecError::io(format!("cannot read {path}"), e))?;
        let mut buf = Vec::new();
        f.take(max_bytes)
            .read_to_end(&mut buf)
            .map_err(|e| ExecError::io(format!("cannot read {path}"), e))?;
        Ok(Some(buf))
    }

    fn processes(&self, marker: Option<&str>) -> Result<ProcTable, ExecError> {
        let needle = marker.map(|m| m.as_bytes().to_vec());
        let mut procs = Vec::new();
        for pid in proc_pids().map_err(|e| ExecError::io("cannot read /proc", e))? {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            let Some(mut p) = parse_stat(pid, &stat) else {
                continue;
            };
            if let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) {
                p.argv = cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
            }
            if let Some(needle) = &needle
                && let Ok(env) = std::fs::read(format!("/proc/{pid}/environ"))
            {
                p.marked = env.split(|b| *b == 0).any(|e| e == needle.as_slice());
            }
            if p.is_gone() {
                p.live_threads = live_threads(pid);
            }
            procs.push(p);
        }
        procs.sort_by_key(|p| p.pid);
        Ok(ProcTable {
            self_pid: std::process::id(),
            also_self: Vec::new(),
            procs,
        })
    }

    fn signal(&self, targets: &[ProcId], sig: Signal) -> Result<Vec<u32>, ExecError> {
        let mut sent = Vec::new();
        for t in targets {
            // Checked just before the signal: a pid whose start time changed is a stranger.
            if self.start_ticks(t.pid)? != Some(t.start_ticks) {
                continue;
            }
            // SAFETY: plain kill(2) on a positive pid we just verified.
            if unsafe { libc::kill(t.pid as i32, sig.number()) } == 0 {
                sent.push(t.pid);
            }
        }
        Ok(sent)
    }

    fn listeners(&self, port: u16) -> Result<Listeners, ExecError> {
        let mut inodes = Vec::new();
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            if let Ok(text) = std::fs::read_to_string(table) {
                inodes.extend(parse_listen_inodes(&text, port));
            }
        }
        let mut pids = Vec::new();
        if !inodes.is_empty() {
            let wanted: Vec<String> = inodes.iter().map(|i| format!("socket:[{i}]")).collect();
            for pid in proc_pids().into_iter().flatten() {
                let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
                    continue;
                };
                let holds = fds.flatten().any(|fd| {
                    std::fs::read_link(fd.path())
                        .map(|t| wanted.iter().any(|w| t.as_os_str() == w.as_str()))
                        .unwrap_or(false)
                });
                if holds {
                    pids.push(pid);
                }
            }
        }
        Ok(Listeners { inodes, pids })
    }

    fn free_port(&self) -> Result<u16, ExecError> {
        let mut text = String::new();
        for path in PORT_TABLES.split(' ') {
            text.push_str(&std::fs::read_to_string(path).unwrap_or_default());
        }
        match pick_free_port(&text) {
            Some(port) => Ok(port),
            None => TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map(|a| a.port())
                .map_err(|e| ExecError::io("cannot find a free port", e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BROKE 7 (LAUNCH-FIFO), below srv-launch's own check: whatever path reaches the exec
    /// layer, a FIFO as a detached process's log fails at once instead of blocking open(2)
    /// forever, here and in the script a remote host runs.
    #[test]
    fn a_fifo_as_the_log_fails_at_once_here_and_in_the_remote_script() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("log");
        let path = fifo.to_str().unwrap().to_string();
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let spec = Detached {
            argv: vec!["sleep".into(), "30".into()],
            log: path.clone(),
            ..Default::default()
        };
        let err = Local.spawn_detached(&spec).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{path} exists and is not a regular file")),
            "{err}"
        );
        let out = Local
            .run(&super::super::detached_script(&spec), Bounds::QUERY)
            .unwrap();
        assert_eq!(out.status, super::super::LOG_NOT_A_FILE_STATUS);
        assert!(
            out.stdout.is_empty(),
            "nothing started: {}",
            out.stdout_text()
        );
    }

    #[test]
    fn a_free_port_here_can_be_bound() {
        let local = Local.free_port().unwrap();
        assert!(std::net::TcpListener::bind(("127.0.0.1", local)).is_ok());
    }
}
