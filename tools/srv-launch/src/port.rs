//! The port a server is to listen on: refused when taken, or with `--replace` freed by
//! killing its holder with srv-kill's logic.

use crate::Plan;
use anyhow::Result;
use servbench::cli;
use servbench::exec::Exec;
use servbench::kill::{self, KillOptions};
use servbench::procs;
use std::time::Duration;

/// Refuses a taken port, or with --replace kills whoever holds it (srv-kill's logic).
pub(crate) fn free_the_port(cfg: &Plan, exec: &dyn Exec, port: u16) -> Result<()> {
    let holders = exec.listeners(port)?;
    if holders.is_free() {
        return Ok(());
    }
    let table = exec.processes(None)?;
    let who: Vec<String> = holders
        .pids
        .iter()
        .map(|p| match table.get(*p) {
            Some(info) => format!("pid {p} ({})", info.shown_command()),
            None => format!("pid {p}"),
        })
        .collect();
    let who = if who.is_empty() {
        "a process we cannot see".to_string()
    } else {
        who.join(", ")
    };
    if !cfg.replace {
        return Err(cli::usage(format!(
            "port {port} on {} is already in use by {who}: pick another --port, or --replace to kill it first",
            exec.host()
        )));
    }
    cli::info(format!("--replace: killing {who} on port {port}"));
    let protected = table.protected();
    for pid in holders.pids.iter().filter(|p| !protected.contains(p)) {
        if let Some(spec) = procs::target_for_pid(&table, *pid, &format!("port {port}")) {
            let outcome = kill::kill(exec, &spec, &KillOptions::default())?;
            if !outcome.survivors.is_empty() {
                return Err(cli::failure(format!(
                    "--replace: pids {:?} on port {port} survived SIGKILL",
                    outcome.survivors
                )));
            }
        }
    }
    if !kill::wait_port_free(exec, port, Duration::from_secs(5))? {
        return Err(cli::failure(format!(
            "--replace: port {port} is still in use after the kill"
        )));
    }
    Ok(())
}
