//! From a target (a server record, a pid, a port, a pattern, the GPU) to the process set to
//! kill on its host.

use crate::{Args, Target};
use servbench::cli;
use servbench::exec::{Bounds, Exec, ExecError, gpu};
use servbench::procs::{self, LAUNCH_ID_VAR, ProcId, TargetSpec};
use servbench::record::KillRecord;

/// Resolves `target` into a process set on `exec`'s host.
pub(crate) fn resolve(
    exec: &dyn Exec,
    target: &Target,
    cfg: &Args,
    rec: &mut KillRecord,
) -> Result<Option<TargetSpec>, ExecError> {
    let name = target.name();
    Ok(match target {
        Target::Server(r) => {
            let marker = r
                .launch_id
                .as_ref()
                .map(|id| format!("{LAUNCH_ID_VAR}={id}"));
            let table = exec.processes(marker.as_deref())?;
            let mut spec = TargetSpec {
                name,
                marker,
                min_start_ticks: r.start_ticks,
                ..Default::default()
            };
            // A record is input like any other: one naming init, a kernel thread or srv-kill's
            // callers (as its pid or its group) is refused as `--pid 1` is, before any walk.
            let protected = [("pid", r.pid), ("pgid", r.pgid)]
                .into_iter()
                .find_map(|(what, id)| table.why_protected(id).map(|why| (what, id, why)));
            if let Some((what, id, why)) = protected {
                rec.refused = Some(format!(
                    "the server record's {what} {id} is {why}: not signalled"
                ));
                return Ok(None);
            }
            match table.get(r.pid) {
                Some(p) if p.start_ticks != r.start_ticks => {
                    // The pid was reused: the group and session ids cannot be ours either (Linux
                    // frees an id only once no process uses it as pid, pgid or sid).
                    rec.refused = Some(format!(
                        "pid {} is another process now ({}; started at tick {}, the record says {}): not signalled",
                        r.pid,
                        p.shown_command(),
                        p.start_ticks,
                        r.start_ticks
                    ));
                }
                _ => {
                    // The group and session count only through a member that proves they are
                    // still this launch's (TargetSpec::members): the leader, or the marker.
                    spec.roots = vec![ProcId {
                        pid: r.pid,
                        start_ticks: r.start_ticks,
                    }];
                    spec.pgids = vec![r.pgid];
                    spec.sids = vec![r.pgid];
                }
            }
            Some(spec)
        }
        Target::Pid(pid) => {
            let table = exec.processes(None)?;
            if let Some(why) = table.why_protected(*pid) {
                rec.refused = Some(format!("pid {pid} is {why}: not signalled"));
                None
            } else {
                procs::target_for_pid(&table, *pid, &name)
            }
        }
        Target::Port(port) => {
            let holders = exec.listeners(*port)?;
            let table = exec.processes(None)?;
            merge(&table, &holders.pids, &name)
        }
        Target::Match(re) => {
            let table = exec.processes(None)?;
            let mut protected = table.protected();
            protected.extend(table.own_descendants());
            let roots: Vec<ProcId> = table
                .procs
                .iter()
                .filter(|p| !p.is_gone() && !protected.contains(&p.pid) && !p.argv.is_empty())
                .filter(|p| re.is_match(&p.command()))
                .map(|p| p.id())
                .collect();
            (!roots.is_empty()).then(|| TargetSpec {
                name,
                roots,
                ..Default::default()
            })
        }
        Target::Gpu => {
            let program = &cfg.nvidia_smi;
            let Some(answer) = gpu::compute_pids(exec, program, Bounds::QUERY)? else {
                return Err(ExecError::Command(format!(
                    "--gpu needs {program}, which {} does not have",
                    exec.host()
                )));
            };
            if let Some(why) = &answer.failure {
                if answer.rows.is_empty() {
                    return Err(ExecError::Command(format!("--gpu: {why}")));
                }
                // One GPU lost, the others listed: their processes are still the target.
                cli::warn(format!("--gpu: {why}; killing the processes it listed"));
            }
            let table = exec.processes(None)?;
            merge(&table, &answer.rows, &name)
        }
    })
}

/// One target covering several pids (each with the groups it leads).
fn merge(table: &procs::ProcTable, pids: &[u32], name: &str) -> Option<TargetSpec> {
    let protected = table.protected();
    let mut spec = TargetSpec {
        name: name.to_string(),
        min_start_ticks: u64::MAX,
        ..Default::default()
    };
    for pid in pids.iter().filter(|p| !protected.contains(p)) {
        if let Some(t) = procs::target_for_pid(table, *pid, name) {
            spec.roots.extend(t.roots);
            spec.pgids.extend(t.pgids);
            spec.sids.extend(t.sids);
            spec.min_start_ticks = spec.min_start_ticks.min(t.min_start_ticks);
        }
    }
    (!spec.roots.is_empty()).then_some(spec)
}
