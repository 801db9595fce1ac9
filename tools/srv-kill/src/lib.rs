//! srv-kill: stop exactly the servers named (by server records, pid, port, command line or GPU),
//! their whole process trees included, and say truthfully what happened, one `kill` record
//! per target. The process logic lives in `servbench::procs`, shared with srv-launch
//! `--replace`; this crate resolves targets, runs the kills and writes the records. `main.rs`
//! parses [`Args`] and calls [`run`].

use anyhow::Result;
use clap::Parser;
use servbench::cli::{self, CommonArgs, DrainArgs, Exit, SshArgs, parse_duration};
use servbench::exec::{self, Bounds, Exec, ExecError, gpu};
use servbench::interrupt;
use servbench::jsonl::{self, Disposition, OutputError, RecordWriter, Source};
use servbench::kill::{self, KillOptions, KillOutcome};
use servbench::record::{
    KillRecord, KilledProcess, Labels, Record, ServerRecord, inherit_labels, now_ts,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

mod resolve;
use resolve::resolve;

const EXAMPLES: &str = "\
Examples:
  srv-launch sim | loadgen -c 1,8 | srv-kill | summarize      # nothing left running
  srv-kill --from server.jsonl                                # the records srv-launch wrote
  srv-kill --port 8000 --grace 30s
  srv-kill --match 'sglang::scheduler' --dry-run              # list, signal nothing
  srv-kill --host gpu1 --match 'VLLM::Worker' --gpu

Kills whole trees: the process group and session, descendants found through /proc and every
process carrying the server's launch id, each checked against its start time (a reused pid is
never signalled). SIGTERM, --grace, SIGKILL, then waits until all are gone and the port is free.
Exit 0 only when every target was found and is gone; 1 on survivors or nothing matched; 2 on bad
usage or an SSH host that cannot be reached or trusted.";

/// Stop exactly the servers named, their whole process trees included; one `kill` record each.
#[derive(Debug, Clone, Parser)]
#[command(name = "srv-kill", version, after_help = EXAMPLES)]
pub struct Args {
    /// Read server records from FILE (repeatable; `-` is stdin). Piped stdin is always read.
    #[arg(long, value_name = "FILE")]
    pub from: Vec<String>,
    /// Kill this pid and its tree (repeatable)
    #[arg(long = "pid", value_name = "N")]
    pub pids: Vec<u32>,
    /// Kill whoever listens on this TCP port, with their trees (repeatable)
    #[arg(long = "port", value_name = "N")]
    pub ports: Vec<u16>,
    /// Kill processes whose command line matches REGEX, with their trees (never srv-kill, its
    /// callers or the SSH session running it); repeatable
    #[arg(long = "match", value_name = "REGEX")]
    pub matches: Vec<String>,
    /// Kill every GPU compute process nvidia-smi lists
    #[arg(long)]
    pub gpu: bool,
    /// Run on this host over SSH: [user@]addr[:port] (server records carry their own host)
    #[arg(long, value_name = "[USER@]ADDR[:PORT]")]
    pub host: Option<String>,
    #[command(flatten)]
    pub ssh: SshArgs,
    /// Time between SIGTERM and SIGKILL
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,
    /// How long the GPU check after the kill may take: killed processes releasing GPU memory,
    /// each nvidia-smi run within it (where nvidia-smi exists)
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration)]
    pub gpu_wait: Duration,
    /// nvidia-smi to run for --gpu and the GPU check (a path where it is not on PATH)
    #[arg(long, value_name = "PROGRAM", default_value = "nvidia-smi")]
    pub nvidia_smi: String,
    /// List what would be killed; signal nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Exit 0 when a target matched nothing
    #[arg(long)]
    pub missing_ok: bool,
    #[command(flatten)]
    pub drain: DrainArgs,
    #[command(flatten)]
    pub common: CommonArgs,
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
            // A P/D group's member says which (`server vllm decode0 pid ...`).
            Target::Server(r) => match &r.pd {
                Some(pd) => format!(
                    "server {} {}{} pid {} port {}",
                    r.engine, pd.role, pd.index, r.pid, r.port
                ),
                None => format!("server {} pid {} port {}", r.engine, r.pid, r.port),
            },
            Target::Pid(p) => format!("pid {p}"),
            Target::Port(p) => format!("port {p}"),
            Target::Match(re) => format!("match '{}'", re.as_str()),
            Target::Gpu => "gpu".to_string(),
        }
    }
}

/// Runs srv-kill: reads server records (stdin, --from), passes other records through, then kills.
pub fn run(cfg: &Args) -> Result<Exit> {
    if jsonl::stdin_is_piped() {
        catch_interrupts(cfg);
    }
    // Kill first, whatever happens downstream: a reader that is gone or a full disk must not
    // leave the server running. A failed write is reported after the kill.
    let mut out = RecordWriter::stdout().deferring_errors();
    // Interrupted and otherwise done as asked: 130. A kill that failed still says 1.
    let result = kill_all(cfg, &mut out).map(|exit| match exit {
        Exit::Ok if interrupt::interrupted() => Exit::Interrupted,
        other => other,
    });
    if let Err(err @ OutputError::Failed(_)) = out.finish() {
        // The records reached no one, so say here how the kill went.
        let how = match &result {
            Ok(Exit::Ok) => "every target ended as asked",
            Ok(_) => "not every target ended as asked (see above)",
            Err(_) => "see the next line",
        };
        cli::error(format!(
            "{err}: the kill records are lost; the kill itself was done ({how})"
        ));
        return result.map(|_| Exit::Failed);
    }
    result
}

/// A terminal's Ctrl-C reaches every tool of the pipeline at once, and srv-kill holds the one
/// handle on the servers upstream launched: the first means upstream is stopping (read on to
/// the end of stdin, kill every server it was given, exit 130); a second, or no end within
/// `--drain-wait`, stops the reading, and srv-kill kills what it holds before it leaves.
fn catch_interrupts(cfg: &Args) {
    interrupt::catch(cfg.drain.drain_wait);
    let wait = cfg.drain.drain_wait;
    interrupt::on_signal(move |seen| {
        if seen == 1 {
            cli::info(format!(
                "interrupted: reading on until upstream ends ({wait:?} at most; again to stop reading), then killing every server it was given"
            ));
        } else {
            cli::info("interrupted again: killing the servers it holds, then leaving");
        }
        true
    });
}

/// Reads the targets, kills them, and writes one record each (and every record passed on).
fn kill_all(cfg: &Args, out: &mut RecordWriter<std::io::Stdout>) -> Result<Exit> {
    let mut targets: Vec<(Option<String>, Target, Labels)> = Vec::new();
    // Server records from stdin, by target index: passed on (marked killed) beside their kill
    // records, so the one-line loop's downstream still knows what ran.
    let mut pass_on: BTreeMap<usize, ServerRecord> = BTreeMap::new();
    let flag_host = cfg.host.clone();

    let sources: Vec<Source> = cfg.from.iter().map(|f| Source::parse(f)).collect();
    jsonl::read_all(&sources, cfg.common.strict, |line| {
        // A record srv-kill passed on names a server already killed: never a target again.
        if let Record::Server(r) = line.record
            && !r.killed
        {
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
        jsonl::pass_through(cfg.common.strict, out, |line| match &line.record {
            Record::Server(r) if !r.killed => {
                pass_on.insert(targets.len(), r.clone());
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
        if interrupt::interrupted() {
            cli::info("interrupted before any server record arrived: nothing to kill");
            return Ok(Exit::Interrupted);
        }
        if !stdin_piped && cfg.from.is_empty() {
            return Err(cli::usage(
                "no targets: pipe server records in (srv-launch ... | srv-kill), or give --from FILE, --pid, --port, --match or --gpu",
            ));
        }
        if cfg.missing_ok {
            // Accepted silently, as a target that matched nothing is under --missing-ok.
            return Ok(Exit::Ok);
        }
        return Err(cli::failure(
            "nothing matched: the input held no server records (did the launch fail upstream? --missing-ok makes this exit 0)",
        ));
    }

    if interrupt::interrupted() {
        cli::info(format!(
            "interrupted: killing the {} target(s) it was given",
            targets.len()
        ));
    }
    // One connection per host, made before any kill so a bad host fails fast.
    let ssh = cfg.ssh.options();
    let mut hosts: BTreeMap<String, std::result::Result<Box<dyn Exec>, ExecError>> =
        BTreeMap::new();
    let mut connect_errors = Vec::new();
    for (host, _, _) in &targets {
        let key = host_key(host.as_deref());
        if let std::collections::btree_map::Entry::Vacant(slot) = hosts.entry(key.clone()) {
            let conn = slot.insert(exec::connect(Some(&key), &ssh));
            if let Err(e @ ExecError::Connect(_)) = conn {
                connect_errors.push(e.to_string());
            }
        }
    }

    let opts = KillOptions {
        grace: cfg.grace,
        dry_run: cfg.dry_run,
        ..KillOptions::default()
    };
    // Targets are killed in parallel (each may wait out its grace period); records keep input order.
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = targets
            .iter()
            .map(|(host, target, labels)| {
                let key = host_key(host.as_deref());
                let conn = &hosts[&key];
                let opts = &opts;
                scope.spawn(move || match conn {
                    Ok(exec) => kill_target(exec.as_ref(), target, labels, cfg, opts),
                    Err(e) => Outcome::new(
                        base_record(&key, target, labels, cfg),
                        Err(TargetError::Unreachable(e.to_string())),
                    ),
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("kill thread panicked"))
            .collect()
    });

    let mut exit = Exit::Ok;
    for (i, Outcome { record: rec, error }) in outcomes.iter().enumerate() {
        if let Some(mut server) = pass_on.remove(&i)
            && !cfg.dry_run
        {
            server.killed = true;
            out.emit(&server)?;
        }
        out.emit(rec)?;
        let missing = matches!(error, Some(TargetError::NothingMatched));
        if rec.ok || (missing && cfg.missing_ok) {
            continue;
        }
        exit = Exit::Failed;
        // A host that could not be reached is the one error line below, said once.
        if matches!(error, Some(TargetError::Unreachable(_))) && !connect_errors.is_empty() {
            continue;
        }
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

/// Why a target did not end as asked. Its text is the kill record's `error`; the variant is
/// what srv-kill decides on (`--missing-ok` accepts [`TargetError::NothingMatched`] only).
#[derive(Debug, thiserror::Error)]
enum TargetError {
    #[error("nothing matched")]
    NothingMatched,
    /// Only processes that must not be signalled matched (a reused pid, srv-kill's callers).
    #[error("refused: {0}")]
    Refused(String),
    /// The target's host could not be reached.
    #[error("{0}")]
    Unreachable(String),
    /// A primitive failed on the host mid-way.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// Killed, but something is left: survivors, a port still taken, GPU memory still held.
    #[error("{}", .0.join("; "))]
    Unfinished(Vec<String>),
}

/// One target's record, and why it failed (the typed form of the record's `error`).
struct Outcome {
    record: KillRecord,
    error: Option<TargetError>,
}

impl Outcome {
    fn new(mut record: KillRecord, result: std::result::Result<(), TargetError>) -> Outcome {
        let error = result.err();
        record.error = error.as_ref().map(ToString::to_string);
        Outcome { record, error }
    }
}

fn host_key(host: Option<&str>) -> String {
    match host {
        None | Some("") | Some("localhost") => "localhost".to_string(),
        Some(h) => h.to_string(),
    }
}

fn base_record(host: &str, target: &Target, labels: &Labels, cfg: &Args) -> KillRecord {
    let upstream = match target {
        Target::Server(r) => r.labels.clone(),
        _ => labels.clone(),
    };
    KillRecord {
        v: servbench::record::SCHEMA_VERSION,
        ts: now_ts(),
        labels: inherit_labels(&upstream, &cfg.common.labels()),
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
        gpu_warning: None,
        refused: None,
        dry_run: false,
        elapsed_s: 0.0,
        ok: false,
        error: None,
        extra: Default::default(),
    }
}

fn kill_target(
    exec: &dyn Exec,
    target: &Target,
    labels: &Labels,
    cfg: &Args,
    opts: &KillOptions,
) -> Outcome {
    let started = Instant::now();
    let mut rec = base_record(exec.host(), target, labels, cfg);
    let result = kill_target_inner(exec, target, cfg, opts, &mut rec);
    if let Some(w) = &rec.gpu_warning {
        cli::warn(format!("{} on {}: GPU check: {w}", rec.target, rec.host));
    }
    rec.elapsed_s = started.elapsed().as_secs_f64();
    rec.ts = now_ts();
    Outcome::new(rec, result)
}

fn kill_target_inner(
    exec: &dyn Exec,
    target: &Target,
    cfg: &Args,
    opts: &KillOptions,
    rec: &mut KillRecord,
) -> Result<(), TargetError> {
    let spec = resolve(exec, target, cfg, rec)?;
    let check_gpus = !opts.dry_run && spec.is_some();
    let before_bounds = Bounds::QUERY.with_deadline(gpu_call_deadline(cfg.gpu_wait));
    let kill = || match &spec {
        Some(spec) => kill::kill(exec, spec, opts),
        None => Ok(KillOutcome::default()),
    };
    let (outcome, gpu_before) = if !exec.is_local() {
        // One SSH connection carries both, and its channels are not to be used from two
        // threads at once: the reading goes first, within its deadline (--gpu-wait at most).
        let before = check_gpus.then(|| gpu::used_bytes(exec, &cfg.nvidia_smi, before_bounds));
        (kill(), before)
    } else {
        std::thread::scope(|scope| {
            // GPU memory is read beside the kill: a hung nvidia-smi (a wedged driver, the very
            // case a kill is for) holds the signals back by BEFORE_HEAD_START at most. Within it,
            // a healthy nvidia-smi answers before any signal, so "before" is before the kill.
            let before = check_gpus.then(|| {
                let (tx, rx) = std::sync::mpsc::channel();
                scope.spawn(move || {
                    let _ = tx.send(gpu::used_bytes(exec, &cfg.nvidia_smi, before_bounds));
                });
                rx
            });
            let early = before
                .as_ref()
                .and_then(|rx| rx.recv_timeout(BEFORE_HEAD_START.min(cfg.gpu_wait)).ok());
            let outcome = kill();
            let before = before.map(|rx| {
                early.unwrap_or_else(|| {
                    rx.recv().unwrap_or_else(|_| {
                        Err(ExecError::Command("the GPU reader panicked".into()))
                    })
                })
            });
            (outcome, before)
        })
    };
    let outcome = outcome?;
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
        if let Some(port) = rec.port {
            rec.port_free = Some(exec.listeners(port)?.is_free());
        }
        return Err(match &rec.refused {
            Some(why) => TargetError::Refused(why.clone()),
            None => TargetError::NothingMatched,
        });
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
        let named: Vec<String> = rec
            .survivors
            .iter()
            .map(|pid| {
                let command = rec.matched.iter().find(|m| m.pid == *pid);
                let command = command.map_or(String::new(), |m| jsonl::excerpt(&m.command, 80));
                format!("pid {pid} ({command})")
            })
            .collect();
        problems.push(format!(
            "{} process(es) survived SIGKILL: {}",
            rec.survivors.len(),
            named.join(", ")
        ));
    }
    if let Some(port) = rec.port {
        let free = kill::wait_port_free(exec, port, Duration::from_secs(3))?;
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
        check_gpu_release(exec, cfg, rec, before, &mut problems);
    }
    if let Some(why) = &rec.refused {
        cli::warn(format!("{}: {why}", rec.target));
    }
    rec.ok = problems.is_empty();
    if !problems.is_empty() {
        return Err(TargetError::Unfinished(problems));
    }
    Ok(())
}

/// How long the memory reading before the kill may hold the signals back.
const BEFORE_HEAD_START: Duration = Duration::from_secs(2);

/// How long one nvidia-smi run of the GPU check may take, with `left` of `--gpu-wait` to go.
fn gpu_call_deadline(left: Duration) -> Duration {
    left.clamp(Duration::from_secs(1), Bounds::QUERY.deadline)
}

/// After the kill: waits (within `--gpu-wait`) until no killed pid holds GPU memory, and reads
/// the memory again. nvidia-smi hanging, failing or printing without end is a warning in the
/// record (`gpu_warning`), and ends the check; memory still held is a problem.
fn check_gpu_release(
    exec: &dyn Exec,
    cfg: &Args,
    rec: &mut KillRecord,
    before: Result<Option<gpu::Answer<gpu::MemoryRow>>, ExecError>,
    problems: &mut Vec<String>,
) {
    let mut warnings: Vec<String> = Vec::new();
    let warn = |warnings: &mut Vec<String>, w: String| {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    };
    let before = match before {
        // No nvidia-smi there: no GPU check.
        Ok(None) => return,
        Ok(Some(a)) => {
            if let Some(w) = a.failure {
                warn(&mut warnings, w);
            }
            a.rows
        }
        Err(e) => {
            rec.gpu_warning = Some(e.to_string());
            return;
        }
    };
    if !before.is_empty() {
        rec.gpu_used_before_bytes = Some(gpu::by_index(&before));
    }
    // Teardown lags exit: wait until no killed pid holds GPU memory any more.
    let killed: Vec<u32> = rec.matched.iter().map(|m| m.pid).collect();
    let end = Instant::now() + cfg.gpu_wait;
    let left = || gpu_call_deadline(end.saturating_duration_since(Instant::now()));
    let program = &cfg.nvidia_smi;
    let mut released = None;
    loop {
        match gpu::compute_pids(exec, program, Bounds::QUERY.with_deadline(left())) {
            Ok(Some(a)) => {
                let blind = a.rows.is_empty() && a.failure.is_some();
                if let Some(w) = a.failure {
                    warn(&mut warnings, w);
                }
                if blind {
                    // It answered nothing readable: whether the memory was released is unknown.
                    break;
                }
                if !a.rows.iter().any(|p| killed.contains(p)) {
                    released = Some(true);
                    break;
                }
            }
            Ok(None) => break,
            Err(e) => {
                warn(&mut warnings, e.to_string());
                break;
            }
        }
        if Instant::now() >= end {
            released = Some(false);
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let timed_out = warnings.iter().any(|w| w.contains("did not finish within"));
    if !timed_out {
        match gpu::used_bytes(exec, program, Bounds::QUERY.with_deadline(left())) {
            Ok(Some(a)) => {
                if let Some(w) = a.failure {
                    warn(&mut warnings, w);
                }
                if !a.rows.is_empty() {
                    rec.gpu_used_after_bytes = Some(gpu::by_index(&a.rows));
                }
            }
            Ok(None) => {}
            Err(e) => warn(&mut warnings, e.to_string()),
        }
    }
    rec.gpu_released = released;
    if released == Some(false) {
        problems.push(format!(
            "GPU memory still held by killed pids after {:?}",
            cfg.gpu_wait
        ));
    }
    if !warnings.is_empty() {
        rec.gpu_warning = Some(warnings.join("; "));
    }
}
