//! srv-launch: start an inference server detached (here or over SSH), wait until it really
//! answers, and write one `server` record that loadgen and srv-kill use. Engine flag maps and
//! readiness endpoints are data in `servbench::engines`; process handling is `servbench::exec`,
//! `servbench::procs` and `servbench::kill`, the same code srv-kill runs. `main.rs` parses
//! [`Args`] and calls [`run`]; `Args::plan` (args.rs, the one module that reads the flags)
//! validates them once into the immutable [`Plan`] (plan.rs) that everything after reads.

mod args;
mod env;
mod group;
mod plan;
mod port;
mod preflight;
mod ready;
mod startup;
mod url;

use anyhow::Result;
use ready::{Check, check, model_matches};
use servbench::cli::{self, Exit};

pub use args::Args;
pub use plan::{Plan, Server};
use servbench::engines::{self, LaunchParams};
use servbench::exec::{self, Detached, Exec, shell_join};
use servbench::jsonl::{BackgroundPassThrough, RecordWriter};
use servbench::kill::{self, KillOptions};
use servbench::procs::{self, LAUNCH_ID_VAR, ProcId};
use servbench::record::{Engine, Labels, ServerRecord, inherit_labels, label, now_ts};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use url::{origin_of, port_of_url};

/// How many log lines to show when a server dies during startup.
const LOG_TAIL_LINES: usize = 30;

/// How often readiness is polled (after quicker first checks).
const POLL: Duration = Duration::from_millis(500);

/// Set by SIGINT/SIGTERM while a server is starting or its environment is being recorded: it
/// was never announced, so nobody else would stop it; srv-launch kills it and exits 130.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn catch_interrupts() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler = on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGINT, handler);
        libc::signal(libc::SIGTERM, handler);
    }
}

/// What is launched, resolved on the server's host: the command, port, URLs, log, env.
struct Launch {
    engine: Engine,
    argv: Vec<String>,
    command: String,
    port: u16,
    url: String,
    health_url: String,
    models_url: Option<String>,
    probe_url: Option<String>,
    log: String,
    env: Vec<(String, String)>,
    launch_id: String,
    /// The engine's options file to write before it starts (path, text): `--self-report` on
    /// TensorRT-LLM.
    options_file: Option<(String, &'static str)>,
}

/// Runs srv-launch on the flags given; upstream records on stdin are passed through while it
/// works.
pub fn run(args: &Args) -> Result<Exit> {
    run_plan(&args.plan()?)
}

/// Runs srv-launch on a validated plan.
pub fn run_plan(cfg: &Plan) -> Result<Exit> {
    let forwarder = BackgroundPassThrough::start(cfg.strict_input);

    let exec = exec::connect(cfg.host.as_deref(), &cfg.ssh)?;
    if let Some(layout) = cfg.pd {
        return group::run(cfg, exec.as_ref(), layout, forwarder);
    }
    let plan = resolve(cfg, exec.as_ref())?;
    if cfg.dry_run {
        println!(
            "{}",
            serde_json::to_string(&procs::redact_argv(&plan.argv))?
        );
        if let Some(forwarder) = forwarder {
            forwarder.finish()?;
        }
        return Ok(Exit::Ok);
    }
    catch_interrupts();
    let record = launch_and_wait(cfg, exec.as_ref(), &plan)?;

    if let Err(err) = RecordWriter::stdout().emit(&record) {
        // The record is the only handle anyone has on this server: with it lost, a server
        // left running would hold its GPUs unseen. Stop it, and say so.
        let id = ProcId {
            pid: record.pid,
            start_ticks: record.start_ticks,
        };
        let killed = kill_unannounced(exec.as_ref(), &plan, id);
        if err.is_closed() {
            // The next tool exited (its own error says why): a quiet success otherwise.
            cli::info(format!(
                "the next tool exited before reading the server record, so the server was stopped: {killed}"
            ));
            return Ok(Exit::Ok);
        }
        return Err(cli::failure(format!(
            "{err}: the server record is lost, so the server was stopped: {killed}"
        )));
    }
    if let Some(forwarder) = forwarder {
        forwarder.finish()?;
    }
    Ok(Exit::Ok)
}

fn launch_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}-{:x}", nanos, std::process::id())
}

/// The sibling binary (built together with srv-launch) when there is one, else the PATH name.
fn sibling_or_path(name: &str, exec: &dyn Exec) -> String {
    if exec.is_local()
        && let Some(p) = std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(|d| d.join(name)))
            .filter(|p| p.exists())
    {
        return p.display().to_string();
    }
    name.to_string()
}

fn resolve(cfg: &Plan, exec: &dyn Exec) -> Result<Launch> {
    let remote_addr = if exec.is_local() {
        None
    } else {
        Some(exec::HostSpec::parse(exec.host()).map_err(cli::usage)?.addr)
    };
    let bind = cfg.bind.clone().unwrap_or_else(|| {
        if exec.is_local() {
            "127.0.0.1"
        } else {
            "0.0.0.0"
        }
        .to_string()
    });
    // Where clients reach it: the bind address unless it is a wildcard.
    let reach = match bind.as_str() {
        "0.0.0.0" | "::" | "" => remote_addr.clone().unwrap_or_else(|| "127.0.0.1".into()),
        b => b.to_string(),
    };
    let reach_host = if reach.contains(':') {
        format!("[{reach}]")
    } else {
        reach
    };

    // The log's default path: /tmp/srv-launch/NAME-PORT-STAMP.log.
    let stamp = now_ts().replace([':', '-'], "").replace('.', "");
    let log_for = |engine: &str, port: u16| {
        cfg.log.clone().unwrap_or_else(|| {
            let name = cfg.name.as_deref().unwrap_or(engine);
            format!(
                "/tmp/srv-launch/{name}-{port}-{}.log",
                &stamp[..15.min(stamp.len())]
            )
        })
    };
    let mut options_file = None;
    let (engine, argv, command, port, health_url, models_url, probe_url, url) = match &cfg.server {
        Server::Preset(preset) => {
            let name = preset.name;
            let port = match cfg.port {
                Some(p) => p,
                None => exec.free_port()?,
            };
            // The engine's own options file --self-report writes (TensorRT-LLM's), beside the log.
            if let Some(o) = preset.self_report_options.filter(|_| cfg.self_report) {
                options_file = Some((
                    format!("{}.llm-api-options.yaml", log_for(name, port)),
                    o.text,
                ));
            }
            let program = cfg
                .bin
                .clone()
                .or_else(|| (preset.name == "sim").then(|| sibling_or_path("srv-sim", exec)));
            let argv = preset
                .argv(&LaunchParams {
                    model: cfg.model.clone(),
                    tp: cfg.tp,
                    pp: cfg.pp,
                    bind: bind.clone(),
                    port,
                    program,
                    self_report: cfg.self_report,
                    options_file: options_file.as_ref().map(|o| o.0.clone()),
                    extra: cfg.extra.clone(),
                })
                .map_err(|e| cli::usage(format!("{e} (srv-launch {name})")))?;
            let url = format!("http://{reach_host}:{port}");
            let command = shell_join(&argv);
            (
                Engine::parse(preset.name),
                argv,
                command,
                port,
                format!("{url}{}", preset.health_path),
                Some(format!("{url}{}", preset.models_path)),
                cfg.probe.then(|| format!("{url}/v1/completions")),
                url,
            )
        }
        Server::Cmd { cmd, ready_url } => {
            let ready = ready_url.as_str();
            let port = match cfg.port {
                Some(p) => p,
                None => match port_of_url(ready) {
                    Some(p) => p,
                    None => exec.free_port()?,
                },
            };
            let subst = |s: &str| s.replace("{port}", &port.to_string());
            let command = subst(cmd);
            let ready = subst(ready);
            let origin = origin_of(&ready).ok_or_else(|| {
                cli::usage(format!("--ready-url '{ready}' is not an http:// URL"))
            })?;
            let mut argv = vec!["sh".to_string(), "-c".to_string(), command.clone()];
            if !cfg.extra.is_empty() {
                // `sh -c CMD sh ARGS...`: the extra arguments become "$@" of the command.
                argv.push("sh".into());
                argv.extend(cfg.extra.iter().cloned());
            }
            (
                Engine::Cmd,
                argv,
                command,
                port,
                ready,
                cfg.probe.then(|| format!("{origin}/v1/models")),
                cfg.probe.then(|| format!("{origin}/v1/completions")),
                origin,
            )
        }
    };

    let log = log_for(&engine.to_string(), port);
    let launch_id = launch_id();
    let mut env = Vec::new();
    if let Some(g) = &cfg.gpus {
        env.push(("CUDA_VISIBLE_DEVICES".to_string(), g.clone()));
    }
    env.extend(cfg.env.iter().cloned());
    env.push((LAUNCH_ID_VAR.to_string(), launch_id.clone()));

    Ok(Launch {
        engine,
        argv,
        command,
        port,
        url,
        health_url,
        models_url,
        probe_url,
        log,
        env,
        launch_id,
        options_file,
    })
}

/// A `--log` that exists and is not a regular file is refused before anything starts: a FIFO
/// blocks the open (or the server's first write) forever, `/dev/full` loses every line, and
/// none can be read back for the startup phases, the step log or the tail of a dying server.
fn refuse_a_log_that_is_not_a_file(cfg: &Plan, exec: &dyn Exec, log: &str) -> Result<()> {
    let q = exec::shell_quote(log);
    let out = exec.run(
        &format!(
            "[ ! -e {q} ] || [ -f {q} ] || {{ stat -L -c %F {q} 2>/dev/null || echo special; exit 3; }}"
        ),
        exec::Bounds::QUERY,
    )?;
    if out.status != 3 {
        return Ok(());
    }
    let flag = if cfg.log.is_some() {
        "--log "
    } else {
        "the log "
    };
    Err(cli::usage(format!(
        "{flag}{log} {} ({} on {}): the server's log must be a file that can be read back (startup phases, the step log, the tail of a server that died); give a file's path",
        exec::NOT_A_FILE,
        out.stdout_text().trim(),
        exec.host(),
    )))
}

/// The last `n` lines of the server's log (on its host).
fn log_tail(exec: &dyn Exec, log: &str, n: usize) -> Vec<String> {
    let Ok(Some(bytes)) = exec.read_tail(log, 64 * 1024) else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..]
        .iter()
        .map(|l| l.to_string())
        .collect()
}

fn launch_and_wait(cfg: &Plan, exec: &dyn Exec, plan: &Launch) -> Result<ServerRecord> {
    let host = exec.host().to_string();
    if !exec.has_program(&plan.argv[0])? {
        return Err(cli::usage(format!(
            "'{}' not found on {host} (PATH of a non-interactive shell): install it, or pass --bin PATH",
            plan.argv[0]
        )));
    }
    refuse_a_log_that_is_not_a_file(cfg, exec, &plan.log)?;
    port::free_the_port(cfg, exec, plan.port)?;
    let host_env = preflight::check(cfg, exec, &INTERRUPTED)?;

    if cfg.verbose {
        cli::info(format!(
            "running on {host}: {} (log: {})",
            procs::redact_secrets(&plan.command),
            plan.log
        ));
    }
    if let Some((path, text)) = &plan.options_file {
        write_options(exec, path, text)?;
    }
    let markers = cfg.preset().map_or(&[][..], |p| p.startup);
    let mut watch = startup::LogWatch::new(exec, &plan.log, markers);
    let started = Instant::now();
    let pid = exec
        .spawn_detached(&Detached {
            argv: plan.argv.clone(),
            env: plan.env.clone(),
            cwd: cfg.cwd.clone(),
            log: plan.log.clone(),
        })
        .map_err(|e| spawn_failed(exec, plan, e))?;
    let stat = exec
        .read_tail(&format!("/proc/{pid}/stat"), 4096)?
        .and_then(|s| procs::parse_stat(pid, &String::from_utf8_lossy(&s)));
    let Some(stat) = stat.filter(|p| !p.is_gone()) else {
        return Err(died(exec, plan, started));
    };
    let id = ProcId {
        pid,
        start_ticks: stat.start_ticks,
    };

    let served = wait_ready(cfg, exec, plan, id, started, &mut watch)?;
    // After the last read of the log: every phase seen is at or before it.
    let ready_s = started.elapsed().as_secs_f64();
    let startup = watch.finish(ready_s);
    cli::info(format!(
        "{} ready at {} after {ready_s:.1}s (pid {pid} on {host}, log {})",
        plan.engine, plan.url, plan.log
    ));

    // The environment, bounded (env::CAPTURE_BOUND) and stopped by a signal like the wait.
    let env = env::gather(
        exec,
        &env::Capture {
            url: &plan.url,
            version_at: engines::engine(plan.engine.as_str())
                .map_or(engines::CMD_VERSION, |e| e.version),
            program: cfg.preset().is_some().then_some(plan.argv[0].as_str()),
            gpus: cfg.gpus.as_deref(),
            nvidia_smi: &cfg.nvidia_smi,
            stop: &INTERRUPTED,
            host: host_env,
        },
    );
    if INTERRUPTED.load(Ordering::SeqCst) {
        let result = kill_unannounced(exec, plan, id);
        cli::info(format!(
            "interrupted while recording {}'s environment: {result}",
            plan.engine
        ));
        return Err(cli::Interrupted.into());
    }

    let mut labels = Labels::new();
    labels.insert(label::ENGINE.into(), plan.engine.to_string());
    if let Some(m) = cfg.model.clone().or_else(|| served.clone()) {
        labels.insert(label::MODEL.into(), m);
    }
    labels.insert(label::TP.into(), cfg.tp.to_string());
    labels.insert(label::PP.into(), cfg.pp.to_string());
    if !exec.is_local() {
        labels.insert(label::HOST.into(), host.clone());
    }
    Ok(ServerRecord {
        v: servbench::record::SCHEMA_VERSION,
        ts: now_ts(),
        labels: inherit_labels(&labels, &cfg.labels),
        engine: plan.engine.clone(),
        model: cfg.model.clone(),
        host,
        pid,
        pgid: stat.pgid,
        start_ticks: stat.start_ticks,
        port: plan.port,
        url: plan.url.clone(),
        command: procs::redact_secrets(&plan.command).into_owned(),
        log: plan.log.clone(),
        ready_s,
        launch_id: Some(plan.launch_id.clone()),
        served_model: served,
        gpus: cfg.gpus.clone(),
        name: cfg.name.clone(),
        argv: procs::redact_argv(&plan.argv),
        env: Some(env),
        self_report: cfg.self_report,
        self_report_flags: self_report_flags(cfg, plan),
        startup: Some(startup),
        killed: false,
        pd: None,
        extra: servbench::record::Extra::new(),
    })
}

/// The self-report flags srv-launch gave the engine: the preset's default ones (measured free)
/// and, with `--self-report`, the ones it adds, said once on stderr with what the engine cannot
/// report.
fn self_report_flags(cfg: &Plan, plan: &Launch) -> Vec<String> {
    let Some(preset) = cfg.preset() else {
        return Vec::new();
    };
    let mut flags: Vec<String> = preset
        .self_report_default
        .iter()
        .map(|f| f.to_string())
        .collect();
    if !cfg.self_report {
        return flags;
    }
    if let Some(note) = preset.self_report_note {
        cli::info(format!("--self-report on {}: {note}", preset.name));
    }
    flags.extend(preset.self_report.iter().map(|f| f.to_string()));
    if let (Some(o), Some((path, _))) = (preset.self_report_options, &plan.options_file) {
        flags.extend([o.flag.to_string(), path.clone()]);
    }
    flags
}

/// Writes the engine's options file on its host (bounded, like every command there).
fn write_options(exec: &dyn Exec, path: &str, text: &str) -> Result<()> {
    let q = servbench::exec::shell_quote(path);
    let script = format!(
        "mkdir -p \"$(dirname {q})\" && cat > {q} <<'SERVBENCH_OPTIONS_END'\n{text}SERVBENCH_OPTIONS_END\n"
    );
    let out = exec.run(&script, servbench::exec::Bounds::QUERY)?;
    if out.status != 0 {
        return Err(cli::failure(format!(
            "cannot write the engine's options file {path} on {}: {}",
            exec.host(),
            servbench::jsonl::excerpt(out.stderr_text().trim(), 200)
        )));
    }
    Ok(())
}

/// The error for a server that exited before it was ready, with its log's tail on stderr.
fn died(exec: &dyn Exec, plan: &Launch, started: Instant) -> anyhow::Error {
    let tail = log_tail(exec, &plan.log, LOG_TAIL_LINES);
    eprintln!(
        "srv-launch: --- last {} lines of {} ---",
        tail.len(),
        plan.log
    );
    for line in &tail {
        // The server's own text: escaped, so a log cannot drive the terminal.
        eprintln!("{}", cli::printable(line));
    }
    eprintln!("srv-launch: --- end of log ---");
    cli::failure(format!(
        "{} exited during startup after {:.1}s (command: {}; log: {} on {})",
        plan.engine,
        started.elapsed().as_secs_f64(),
        procs::redact_secrets(&plan.command),
        plan.log,
        exec.host()
    ))
}

/// Polls until ready, reading the log's startup phases into `watch` at each poll; returns the
/// served model name when the server lists one.
fn wait_ready(
    cfg: &Plan,
    exec: &dyn Exec,
    plan: &Launch,
    id: ProcId,
    started: Instant,
    watch: &mut startup::LogWatch,
) -> Result<Option<String>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(2))
        .no_proxy()
        .build()?;
    let tty = std::io::stderr().is_terminal();
    // Not a terminal: a first line after a second, then one every 10 s.
    let mut next_print = Instant::now() + Duration::from_secs(1);
    let mut polls = 0u32;
    loop {
        if INTERRUPTED.load(Ordering::SeqCst) {
            if tty {
                eprintln!();
            }
            let result = kill_unannounced(exec, plan, id);
            cli::info(format!(
                "interrupted while {} was starting: {result}",
                plan.engine
            ));
            return Err(cli::Interrupted.into());
        }
        if !exec.alive(id)? {
            if tty {
                eprintln!();
            }
            return Err(died(exec, plan, started));
        }
        let state = rt.block_on(check(&client, plan));
        // After the check: a server found ready has its last lines read before it is timed.
        watch.poll(started);
        match state {
            Check::Ready(served) => {
                if tty {
                    eprint!("\r\x1b[K");
                }
                if let (Some(m), Some(s)) = (&cfg.model, &served)
                    && !model_matches(m, s)
                {
                    cli::warn(format!("the server lists model '{s}', not '{m}'"));
                }
                return Ok(served);
            }
            Check::NotYet(why) => {
                let elapsed = started.elapsed();
                if elapsed >= cfg.timeout {
                    if tty {
                        eprintln!();
                    }
                    return Err(timed_out(cfg, exec, plan, id, &why));
                }
                if tty || Instant::now() >= next_print {
                    next_print = Instant::now() + Duration::from_secs(10);
                    let last = log_tail(exec, &plan.log, 1).pop().unwrap_or_default();
                    let last: String = last.chars().take(100).collect();
                    // The check's reason and the log line are the server's text: escaped.
                    let line = format!(
                        "srv-launch: waiting for {} ({:.0}s): {} | log: {}",
                        plan.engine,
                        elapsed.as_secs_f64(),
                        cli::printable(&why),
                        cli::printable(&last)
                    );
                    if tty {
                        eprint!("\r\x1b[K{line}");
                    } else {
                        eprintln!("{line}");
                    }
                }
            }
        }
        // Quick first checks (a small server is up in milliseconds), then every `poll`.
        polls += 1;
        std::thread::sleep(POLL.min(Duration::from_millis(50) * polls));
    }
}

fn timed_out(cfg: &Plan, exec: &dyn Exec, plan: &Launch, id: ProcId, why: &str) -> anyhow::Error {
    let what = format!(
        "{} not ready after {:?} (last check: {why}; log: {} on {})",
        plan.engine,
        cfg.timeout,
        plan.log,
        exec.host()
    );
    if cfg.keep_on_timeout {
        return cli::failure(format!(
            "{what}; left running as pid {}: srv-kill --pid {}{} to stop it",
            id.pid,
            id.pid,
            cfg.host
                .as_ref()
                .map(|h| format!(" --host {h}"))
                .unwrap_or_default()
        ));
    }
    cli::failure(format!("{what}; {}", kill_unannounced(exec, plan, id)))
}

/// A launch that gave no pid (SSH-BANNER: a login that printed before it) may still have
/// started the server, running unseen with nobody holding its record. Whatever carries this
/// launch's id (in no one else's environment) is found and killed; when that cannot be done
/// either, the error says where a server may be left. Nothing found: the error as it was.
fn spawn_failed(exec: &dyn Exec, plan: &Launch, err: servbench::exec::ExecError) -> anyhow::Error {
    let spec = procs::TargetSpec {
        name: format!("launch {}", plan.launch_id),
        marker: Some(format!("{LAUNCH_ID_VAR}={}", plan.launch_id)),
        ..Default::default()
    };
    // The id is in the server's environment from its exec on, a moment after the fork.
    for _ in 0..5 {
        let what = match kill::kill(exec, &spec, &KillOptions::default()) {
            Ok(o) if o.matched.is_empty() => {
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
            Ok(o) if o.survivors.is_empty() => format!(
                "what it started was found by its launch id and killed (pid {})",
                o.matched
                    .iter()
                    .map(|(pid, _)| pid.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Ok(o) => format!(
                "what it started was found by its launch id, and killing it left survivors {:?} on {}",
                o.survivors,
                exec.host()
            ),
            Err(e) => format!(
                "a server may be running on {host} unseen ({e}): srv-kill --host {host} --port {} stops it once it listens",
                plan.port,
                host = exec.host()
            ),
        };
        return cli::failure(format!("{err}; {what}"));
    }
    err.into()
}

/// Kills a server srv-launch started but never announced (timeout, interrupt); says how it went.
fn kill_unannounced(exec: &dyn Exec, plan: &Launch, id: ProcId) -> String {
    let spec = procs::TargetSpec {
        name: format!("pid {}", id.pid),
        roots: vec![id],
        pgids: vec![id.pid],
        sids: vec![id.pid],
        marker: Some(format!("{LAUNCH_ID_VAR}={}", plan.launch_id)),
        min_start_ticks: id.start_ticks,
    };
    match kill::kill(exec, &spec, &KillOptions::default()) {
        Ok(o) if o.survivors.is_empty() => format!("killed it (pid {})", id.pid),
        Ok(o) => format!("killing it left survivors {:?}", o.survivors),
        Err(e) => format!("killing it failed: {e}"),
    }
}
