//! srv-kill: stop exactly the servers named (by server records, pid, port, command line or GPU),
//! their whole process trees included, and say truthfully what happened, one `kill` record
//! per target. The process logic lives in `servbench::procs`, shared with srv-launch
//! `--replace`; this crate resolves targets, runs the kills and writes the records.

use anyhow::Result;
use servbench::cli::{self, Exit};
use servbench::exec::{self, Exec, ExecError, SshOptions};
use servbench::jsonl::{self, Disposition, RecordWriter, Source};
use servbench::procs::{self, KillOptions, LAUNCH_ID_VAR, ProcId, TargetSpec};
use servbench::record::{
    KillRecord, KilledProcess, Labels, Record, ServerRecord, inherit_labels, now_ts,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What to kill and how, from the command line.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub from: Vec<String>,
    pub pids: Vec<u32>,
    pub ports: Vec<u16>,
    pub matches: Vec<String>,
    pub gpu: bool,
    pub host: Option<String>,
    pub ssh: SshOptions,
    pub grace: Duration,
    pub gpu_wait: Duration,
    pub dry_run: bool,
    pub missing_ok: bool,
    pub labels: Labels,
    pub strict: bool,
}

/// One thing to kill, before it is resolved on its host.
#[derive(Debug, Clone)]
enum Target {
    Server(Box<ServerRecord>),
    Pid(u32),
    Port(u16),
    Match(regex::Regex),
    Gpu,
}

impl Target {
    fn name(&self) -> String {
        match self {
            Target::Server(r) => format!("server {} pid {} port {}", r.engine, r.pid, r.port),
            Target::Pid(p) => format!("pid {p}"),
            Target::Port(p) => format!("port {p}"),
            Target::Match(re) => format!("match '{}'", re.as_str()),
            Target::Gpu => "gpu".to_string(),
        }
    }
}

/// Runs srv-kill: reads server records (stdin, --from), passes other records through, then kills.
pub fn run(cfg: &Config) -> Result<Exit> {
    let mut out = RecordWriter::stdout();
    let mut targets: Vec<(Option<String>, Target, Labels)> = Vec::new();
    let flag_host = cfg.host.clone();

    let sources: Vec<Source> = cfg.from.iter().map(|f| Source::parse(f)).collect();
    jsonl::read_all(&sources, cfg.strict, |line| {
        if let Record::Server(r) = line.record {
            targets.push((
                Some(r.host.clone()),
                Target::Server(Box::new(r)),
                Labels::new(),
            ));
        }
        Ok(())
    })?;
    let stdin_piped = jsonl::stdin_is_piped() && !cfg.from.iter().any(|f| f == "-");
    if stdin_piped {
        jsonl::pass_through(cfg.strict, &mut out, |line| match &line.record {
            Record::Server(r) => {
                targets.push((
                    Some(r.host.clone()),
                    Target::Server(Box::new(r.clone())),
                    Labels::new(),
                ));
                Disposition::Consume
            }
            _ => Disposition::Forward,
        })?;
    }
    for pid in &cfg.pids {
        targets.push((flag_host.clone(), Target::Pid(*pid), Labels::new()));
    }
    for port in &cfg.ports {
        targets.push((flag_host.clone(), Target::Port(*port), Labels::new()));
    }
    for m in &cfg.matches {
        let re = regex::Regex::new(m)
            .map_err(|e| cli::usage(format!("--match '{m}' is not a regular expression: {e}")))?;
        targets.push((flag_host.clone(), Target::Match(re), Labels::new()));
    }
    if cfg.gpu {
        targets.push((flag_host.clone(), Target::Gpu, Labels::new()));
    }

    if targets.is_empty() {
        if !stdin_piped && cfg.from.is_empty() {
            return Err(cli::usage(
                "no targets: pipe server records in (srv-launch ... | srv-kill), or give --from FILE, --pid, --port, --match or --gpu",
            ));
        }
        if cfg.missing_ok {
            cli::info("nothing matched (no server records in the input)");
            return Ok(Exit::Ok);
        }
        return Err(cli::failure(
            "nothing matched: the input held no server records (--missing-ok makes this exit 0)",
        ));
    }

    // One connection per host, made before any kill so a bad host fails fast.
    let mut hosts: BTreeMap<String, std::result::Result<Box<dyn Exec>, String>> = BTreeMap::new();
    let mut connect_errors = Vec::new();
    for (host, _, _) in &targets {
        let key = host_key(host.as_deref());
        if let std::collections::btree_map::Entry::Vacant(slot) = hosts.entry(key.clone()) {
            let conn = exec::connect(Some(&key), &cfg.ssh).map_err(|e| {
                let msg = e.to_string();
                if matches!(e, ExecError::Connect(_)) {
                    connect_errors.push(msg.clone());
                }
                msg
            });
            slot.insert(conn);
        }
    }

    let opts = KillOptions {
        grace: cfg.grace,
        dry_run: cfg.dry_run,
        ..KillOptions::default()
    };
    // Targets are killed in parallel (each may wait out its grace period); records keep input order.
    let records: Vec<KillRecord> = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .map(|(host, target, labels)| {
                let key = host_key(host.as_deref());
                let conn = &hosts[&key];
                let opts = &opts;
                scope.spawn(move || match conn {
                    Ok(exec) => kill_target(exec.as_ref(), target, labels, cfg, opts),
                    Err(msg) => failed_record(&key, target, labels, cfg, msg.clone()),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("kill thread panicked"))
            .collect()
    });

    let mut exit = Exit::Ok;
    for rec in &records {
        out.emit(rec)?;
        let missing = rec.matched.is_empty() && rec.error.as_deref() == Some(NOTHING_MATCHED);
        if rec.ok || (missing && cfg.missing_ok) {
            continue;
        }
        exit = Exit::Failed;
        cli::warn(format!(
            "{} on {}: {}",
            rec.target,
            rec.host,
            rec.error.as_deref().unwrap_or("failed")
        ));
    }
    if !connect_errors.is_empty() {
        return Err(cli::usage(connect_errors.join("; ")));
    }
    Ok(exit)
}

const NOTHING_MATCHED: &str = "nothing matched";

fn host_key(host: Option<&str>) -> String {
    match host {
        None | Some("") | Some("localhost") => "localhost".to_string(),
        Some(h) => h.to_string(),
    }
}

fn base_record(host: &str, target: &Target, labels: &Labels, cfg: &Config) -> KillRecord {
    let upstream = match target {
        Target::Server(r) => r.labels.clone(),
        _ => labels.clone(),
    };
    KillRecord {
        v: servbench::record::SCHEMA_VERSION,
        ts: now_ts(),
        labels: inherit_labels(&upstream, &cfg.labels),
        target: target.name(),
        host: host.to_string(),
        matched: Vec::new(),
        signals: Vec::new(),
        survivors: Vec::new(),
        port: match target {
            Target::Server(r) if r.port > 0 => Some(r.port),
            Target::Port(p) => Some(*p),
            _ => None,
        },
        port_free: None,
        gpu_used_before_bytes: None,
        gpu_used_after_bytes: None,
        gpu_released: None,
        refused: None,
        dry_run: false,
        elapsed_s: 0.0,
        ok: false,
        error: None,
        extra: Default::default(),
    }
}

fn failed_record(
    host: &str,
    target: &Target,
    labels: &Labels,
    cfg: &Config,
    msg: String,
) -> KillRecord {
    let mut rec = base_record(host, target, labels, cfg);
    rec.error = Some(msg);
    rec
}

fn kill_target(
    exec: &dyn Exec,
    target: &Target,
    labels: &Labels,
    cfg: &Config,
    opts: &KillOptions,
) -> KillRecord {
    let started = Instant::now();
    let mut rec = base_record(exec.host(), target, labels, cfg);
    match kill_target_inner(exec, target, cfg, opts, &mut rec) {
        Ok(()) => {}
        Err(e) => rec.error = Some(e.to_string()),
    }
    rec.elapsed_s = started.elapsed().as_secs_f64();
    rec.ts = now_ts();
    rec
}

/// Resolves `target` into a process set on `exec`'s host.
fn resolve(
    exec: &dyn Exec,
    target: &Target,
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
            match table.get(r.pid) {
                Some(p) if p.start_ticks != r.start_ticks => {
                    // The pid was reused: the group and session ids cannot be ours either (Linux
                    // frees an id only once no process uses it as pid, pgid or sid).
                    rec.refused = Some(format!(
                        "pid {} is another process now ({}; started at tick {}, the record says {}): not signalled",
                        r.pid,
                        p.command(),
                        p.start_ticks,
                        r.start_ticks
                    ));
                }
                _ => {
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
            if table.protected().contains(pid) {
                rec.refused = Some(format!(
                    "pid {pid} is srv-kill itself or one of its callers: not signalled"
                ));
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
            let Some(pids) = exec.gpu_pids()? else {
                return Err(ExecError::Command(format!(
                    "--gpu needs nvidia-smi, which {} does not have",
                    exec.host()
                )));
            };
            let table = exec.processes(None)?;
            merge(&table, &pids, &name)
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

fn kill_target_inner(
    exec: &dyn Exec,
    target: &Target,
    cfg: &Config,
    opts: &KillOptions,
    rec: &mut KillRecord,
) -> Result<(), ExecError> {
    let spec = resolve(exec, target, rec)?;
    let gpu_before = if opts.dry_run {
        None
    } else {
        exec.gpu_used_bytes()?
    };
    let outcome = match &spec {
        Some(spec) => procs::kill(exec, spec, opts)?,
        None => procs::KillOutcome::default(),
    };
    rec.matched = outcome
        .matched
        .iter()
        .map(|(pid, command)| KilledProcess {
            pid: *pid,
            command: command.clone(),
        })
        .collect();
    rec.signals = outcome.signals.clone();
    rec.survivors = outcome.survivors.clone();

    if rec.matched.is_empty() {
        rec.error = Some(match &rec.refused {
            Some(why) => format!("refused: {why}"),
            None => NOTHING_MATCHED.to_string(),
        });
        if let Some(port) = rec.port {
            rec.port_free = Some(exec.listeners(port)?.is_free());
        }
        return Ok(());
    }
    if opts.dry_run {
        for m in &rec.matched {
            cli::info(format!(
                "would kill {} on {}: {}",
                m.pid,
                exec.host(),
                m.command
            ));
        }
        rec.ok = true;
        rec.dry_run = true;
        return Ok(());
    }

    let mut problems = Vec::new();
    if !rec.survivors.is_empty() {
        problems.push(format!(
            "{} process(es) survived SIGKILL: {:?}",
            rec.survivors.len(),
            rec.survivors
        ));
    }
    if let Some(port) = rec.port {
        let free = procs::wait_port_free(exec, port, Duration::from_secs(3))?;
        rec.port_free = Some(free);
        if !free {
            let holders = exec.listeners(port)?;
            problems.push(format!(
                "port {port} is still in use (pids {:?})",
                holders.pids
            ));
        }
    }
    if let Some(before) = gpu_before {
        // Teardown lags exit: wait until no killed pid holds GPU memory any more.
        let killed: Vec<u32> = rec.matched.iter().map(|m| m.pid).collect();
        let end = Instant::now() + cfg.gpu_wait;
        let mut released = false;
        loop {
            let holders = exec.gpu_pids()?.unwrap_or_default();
            if !holders.iter().any(|p| killed.contains(p)) {
                released = true;
                break;
            }
            if Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        rec.gpu_used_before_bytes = Some(before);
        rec.gpu_used_after_bytes = exec.gpu_used_bytes()?;
        rec.gpu_released = Some(released);
        if !released {
            problems.push(format!(
                "GPU memory still held by killed pids after {:?}",
                cfg.gpu_wait
            ));
        }
    }
    if let Some(why) = &rec.refused {
        cli::warn(format!("{}: {why}", rec.target));
    }
    rec.ok = problems.is_empty();
    if !problems.is_empty() {
        rec.error = Some(problems.join("; "));
    }
    Ok(())
}
