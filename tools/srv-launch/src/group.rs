//! `--pd xPyD`: a disaggregated prefill/decode group launched as one unit. The prefill and
//! decode servers start together (each exactly as one server would: its own port, GPUs, log
//! and readiness), then the engine's proxy in front of them, ready only once a completion
//! went through it (so through both sides). One `server` record per member, each with its
//! `pd`; a member that fails takes the started ones down and the error names it.

use crate::{INTERRUPTED, Launch, Plan, Server, kill_unannounced, launch_and_wait, resolve};
use anyhow::Result;
use servbench::cli::{self, Exit};
use servbench::engines::{self, EnginePreset, PdRecipe};
use servbench::exec::{self, Exec, shell_join};
use servbench::jsonl::{BackgroundPassThrough, RecordWriter};
use servbench::procs::{self, ProcId};
use servbench::record::{Engine, PdLayout, PdMember, PdRole, ServerRecord, label};
use std::sync::atomic::Ordering;

/// One member: which it is, its plan and what it runs.
struct Member {
    role: PdRole,
    index: u32,
    /// Its bootstrap port where the recipe gives it one (SGLang's prefill servers), else 0.
    bootstrap: u16,
    cfg: Plan,
    launch: Launch,
}

impl Member {
    fn name(&self) -> String {
        format!("{}{}", self.role, self.index)
    }
}

/// Launches the group and writes its records.
pub(crate) fn run(
    cfg: &Plan,
    exec: &dyn Exec,
    layout: PdLayout,
    forwarder: Option<BackgroundPassThrough>,
) -> Result<Exit> {
    let preset = cfg
        .preset()
        .ok_or_else(|| cli::usage("--pd needs an engine preset, not --cmd"))?;
    let recipe = preset.pd.ok_or_else(|| {
        let with: Vec<&str> = engines::ENGINES
            .iter()
            .filter(|e| e.pd.is_some())
            .map(|e| e.name)
            .collect();
        cli::usage(format!(
            "{} has no disaggregated prefill/decode mode: --pd takes {}",
            preset.name,
            with.join(", ")
        ))
    })?;
    let group = format!("pd-{}", crate::launch_id());
    let mut members = plan_members(cfg, exec, &preset, recipe, layout, &group)?;
    if cfg.dry_run {
        for m in &members {
            println!(
                "{}",
                serde_json::to_string(&procs::redact_argv(&m.launch.argv))?
            );
        }
        if let Some(f) = forwarder {
            f.finish()?;
        }
        return Ok(Exit::Ok);
    }
    cli::info(format!(
        "--pd {layout}: {} prefill, {} decode and a proxy (group {group}); {}",
        layout.prefill, layout.decode, recipe.note
    ));
    make_kv_dir(exec, &members)?;
    crate::catch_interrupts();

    // The servers together (each waits out its own startup), then the proxy in front.
    let proxy = members.pop().expect("a proxy last");
    let results: Vec<Result<ServerRecord>> = std::thread::scope(|scope| {
        let handles: Vec<_> = members
            .iter()
            .map(|m| scope.spawn(move || launch_and_wait(&m.cfg, exec, &m.launch)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a member's launch thread panicked"))
            .collect()
    });
    let mut started: Vec<(&Member, ServerRecord)> = Vec::new();
    let mut failed = None;
    for (m, result) in members.iter().zip(results) {
        match result {
            Ok(record) => started.push((m, record)),
            Err(e) if failed.is_none() => failed = Some((m.name(), e)),
            // A second failure (an interrupt reaches every member) says nothing new.
            Err(_) => {}
        }
    }
    if let Some((name, err)) = failed {
        return Err(group_failed(exec, &started, &name, err));
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(interrupted(exec, &started));
    }
    match launch_and_wait(&proxy.cfg, exec, &proxy.launch) {
        Ok(record) => started.push((&proxy, record)),
        Err(err) => return Err(group_failed(exec, &started, &proxy.name(), err)),
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(interrupted(exec, &started));
    }

    let mut out = RecordWriter::stdout();
    for (m, record) in &mut started {
        mark(record, layout, &group, m);
    }
    for i in 0..started.len() {
        if let Err(err) = out.emit(&started[i].1) {
            // The records are the only handle on the group: with one lost, stop it all.
            let stopped = stop(exec, &started);
            if err.is_closed() {
                cli::info(format!(
                    "the next tool exited before reading the group's records, so the group was stopped: {stopped}"
                ));
                return Ok(Exit::Ok);
            }
            return Err(cli::failure(format!(
                "{err}: the group's records are lost, so the group was stopped: {stopped}"
            )));
        }
    }
    cli::info(format!(
        "--pd {layout} ready: load {} (the proxy)",
        started.last().map_or("", |(_, r)| r.url.as_str())
    ));
    if let Some(f) = forwarder {
        f.finish()?;
    }
    Ok(Exit::Ok)
}

/// Each member's plan and launch, in start order (prefill, decode, then the proxy): its own
/// ports, its share of the GPUs, its name and log, the recipe's flags before the user's.
fn plan_members(
    cfg: &Plan,
    exec: &dyn Exec,
    preset: &EnginePreset,
    recipe: &PdRecipe,
    layout: PdLayout,
    group: &str,
) -> Result<Vec<Member>> {
    let gpus = split_gpus(cfg, layout)?;
    let mut taken: Vec<u16> = cfg.port.into_iter().collect();
    let base = cfg.name.clone().unwrap_or_else(|| preset.name.to_string());
    let kv_dir = match &cfg.log {
        Some(log) => format!("{}/{group}-kv", parent_dir(log)),
        None => format!("/tmp/srv-launch/{group}-kv"),
    };
    let mut members: Vec<Member> = Vec::new();
    for (role, index) in layout.members().filter(|(r, _)| *r != PdRole::Proxy) {
        let port = fresh_port(exec, &mut taken)?;
        let bootstrap = if recipe.needs_bootstrap_port(role) {
            fresh_port(exec, &mut taken)?
        } else {
            0
        };
        let mut m = member_plan(cfg, &base, role, index);
        m.port = Some(port);
        m.gpus = gpus.as_ref().map(|g| g[members.len()].clone());
        m.extra = recipe.member_flags(role, &kv_dir, bootstrap);
        m.extra.extend(cfg.extra.iter().cloned());
        m.pd = None;
        let launch = resolve(&m, exec)?;
        members.push(Member {
            role,
            index,
            bootstrap,
            cfg: m,
            launch,
        });
    }
    // The proxy: told every member, on --port if given.
    let port = match cfg.port {
        Some(p) => p,
        None => fresh_port(exec, &mut taken)?,
    };
    let urls = |role: PdRole| members.iter().filter(move |m| m.role == role);
    let prefill: Vec<(String, u16)> = urls(PdRole::Prefill)
        .map(|m| (m.launch.url.clone(), m.bootstrap))
        .collect();
    let decode: Vec<String> = urls(PdRole::Decode).map(|m| m.launch.url.clone()).collect();
    let bind = cfg.bind.clone().unwrap_or_else(|| {
        if exec.is_local() {
            "127.0.0.1"
        } else {
            "0.0.0.0"
        }
        .to_string()
    });
    let program = match recipe.proxy.program[0] {
        engines::pd::SRV_SIM => crate::sibling_or_path("srv-sim", exec),
        p => p.to_string(),
    };
    let mut argv = vec![program];
    argv.extend(recipe.proxy_args(&bind, port, &prefill, &decode));
    // Where clients reach it: as the members, on its own port.
    let reach = members[0]
        .launch
        .url
        .rsplit_once(':')
        .map_or("", |(h, _)| h);
    let mut p = member_plan(cfg, &base, PdRole::Proxy, 0);
    p.server = Server::Cmd {
        // `exec`: the proxy is the process the record names, not a shell above it.
        cmd: format!("exec {}", shell_join(&argv)),
        ready_url: format!("{reach}:{port}{}", recipe.proxy.health_path),
    };
    p.port = Some(port);
    p.gpus = None;
    p.extra = Vec::new();
    p.probe = true;
    p.self_report = false;
    p.pd = None;
    let mut launch = resolve(&p, exec)?;
    // It fronts the group's engine: its messages and record say that engine, its argv what ran.
    launch.engine = Engine::parse(preset.name);
    members.push(Member {
        role: PdRole::Proxy,
        index: 0,
        bootstrap: 0,
        cfg: p,
        launch,
    });
    Ok(members)
}

/// A member's plan: the group's, named for the member (`vllm-prefill0`), its log beside the
/// group's `--log` when one is given.
fn member_plan(cfg: &Plan, base: &str, role: PdRole, index: u32) -> Plan {
    let mut m = cfg.clone();
    m.name = Some(format!("{base}-{role}{index}"));
    m.log = cfg.log.as_ref().map(|l| format!("{l}.{role}{index}"));
    m
}

/// A free port on the host that no other member has.
fn fresh_port(exec: &dyn Exec, taken: &mut Vec<u16>) -> Result<u16> {
    for _ in 0..64 {
        let p = exec.free_port()?;
        if !taken.contains(&p) {
            taken.push(p);
            return Ok(p);
        }
    }
    Err(cli::failure(format!(
        "no free port on {} for the group's members",
        exec.host()
    )))
}

/// Each server's `CUDA_VISIBLE_DEVICES`, in start order: `--gpus` split into runs of tp x pp
/// by the layout's one placement rule (it must name exactly as many). Without it, none: each
/// server sees every GPU (its engine's default), as one server launched alone would.
fn split_gpus(cfg: &Plan, layout: PdLayout) -> Result<Option<Vec<String>>> {
    let Some(gpus) = &cfg.gpus else {
        return Ok(None);
    };
    let (per, servers) = (cfg.tp * cfg.pp, layout.servers());
    let list: Vec<&str> = gpus.split(',').map(str::trim).collect();
    if list.len() != (per * servers) as usize || list.iter().any(|g| g.is_empty()) {
        return Err(cli::usage(format!(
            "--gpus {gpus}: --pd {layout} with --tp {} --pp {} needs {} GPUs ({servers} servers of {per}), each listed once",
            cfg.tp,
            cfg.pp,
            per * servers
        )));
    }
    Ok(Some(
        layout
            .server_gpus(per)
            .map(|(_, _, g)| list[g.start as usize..g.end as usize].join(","))
            .collect(),
    ))
}

fn parent_dir(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) => "/",
        Some((dir, _)) => dir,
        None => ".",
    }
}

/// Creates the group's KV directory on its host where a member's flags name it.
fn make_kv_dir(exec: &dyn Exec, members: &[Member]) -> Result<()> {
    let Some(dir) = members.iter().find_map(|m| kv_dir_in(&m.cfg.extra)) else {
        return Ok(());
    };
    let out = exec.run(
        &format!("mkdir -p {}", exec::shell_quote(&dir)),
        exec::Bounds::QUERY,
    )?;
    if out.status != 0 {
        return Err(cli::failure(format!(
            "cannot make the group's KV directory {dir} on {}: {}",
            exec.host(),
            out.stderr_text().trim()
        )));
    }
    Ok(())
}

/// The KV directory a member's flags name (`shared_storage_path` in vLLM's connector config).
fn kv_dir_in(flags: &[String]) -> Option<String> {
    flags.iter().find_map(|f| {
        let v: serde_json::Value = serde_json::from_str(f).ok()?;
        v["kv_connector_extra_config"]["shared_storage_path"]
            .as_str()
            .map(str::to_string)
    })
}

/// The member's `pd` and labels on its record.
fn mark(record: &mut ServerRecord, layout: PdLayout, group: &str, m: &Member) {
    record.pd = Some(PdMember {
        group: group.to_string(),
        layout,
        role: m.role,
        index: m.index,
    });
    record.labels.insert(label::PD.into(), layout.to_string());
    record
        .labels
        .insert(label::PD_ROLE.into(), m.role.to_string());
}

/// Stops every started member; says how each went.
fn stop(exec: &dyn Exec, started: &[(&Member, ServerRecord)]) -> String {
    if started.is_empty() {
        return "no member was running".into();
    }
    started
        .iter()
        .map(|(m, r)| {
            let id = ProcId {
                pid: r.pid,
                start_ticks: r.start_ticks,
            };
            format!("{}: {}", m.name(), kill_unannounced(exec, &m.launch, id))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A member failed: the started ones are stopped, and the error names the member.
fn group_failed(
    exec: &dyn Exec,
    started: &[(&Member, ServerRecord)],
    name: &str,
    err: anyhow::Error,
) -> anyhow::Error {
    if err.downcast_ref::<cli::Interrupted>().is_some() {
        return interrupted(exec, started);
    }
    let stopped = stop(exec, started);
    err.context(format!(
        "the group's {name} failed, so the started members were stopped ({stopped})"
    ))
}

fn interrupted(exec: &dyn Exec, started: &[(&Member, ServerRecord)]) -> anyhow::Error {
    cli::info(format!(
        "interrupted while the group was starting: {}",
        stop(exec, started)
    ));
    cli::Interrupted.into()
}
