//! srv-launch: start an inference server detached (here or over SSH), wait until it really
//! answers, and write one `server` record that loadgen and srv-kill use. Engine flag maps and
//! readiness endpoints are data in `servbench::engines`; process handling is `servbench::exec`
//! and `servbench::procs`, the same code srv-kill runs.

use anyhow::Result;
use servbench::cli::{self, Exit};
use servbench::engines::{self, LaunchParams};
use servbench::exec::{self, Detached, Exec, SshOptions, shell_join};
use servbench::jsonl::{BackgroundPassThrough, RecordWriter};
use servbench::procs::{self, KillOptions, LAUNCH_ID_VAR, ProcId};
use servbench::record::{Labels, ServerRecord, inherit_labels, now_ts};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How many log lines to show when a server dies during startup.
const LOG_TAIL_LINES: usize = 30;

/// Set by SIGINT/SIGTERM while a server is starting: it was never announced, so nobody else
/// would stop it; srv-launch kills it and exits 130.
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

/// Everything srv-launch was asked to do.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Engine preset name (`sglang`, `vllm`, `llama-cpp`, `trtllm`, `sim`); `None` with `cmd`.
    pub engine: Option<String>,
    /// A shell command for anything else; `{port}` is replaced by the port.
    pub cmd: Option<String>,
    /// With `cmd`: the URL that answers 200 once ready; `{port}` is replaced by the port.
    pub ready_url: Option<String>,
    pub model: Option<String>,
    pub tp: u32,
    pub pp: u32,
    pub port: Option<u16>,
    /// Address the server listens on (default 127.0.0.1 here, 0.0.0.0 over SSH).
    pub bind: Option<String>,
    pub gpus: Option<String>,
    pub env: Vec<(String, String)>,
    pub name: Option<String>,
    pub log: Option<String>,
    pub cwd: Option<String>,
    pub timeout: Duration,
    pub host: Option<String>,
    pub ssh: SshOptions,
    pub probe: bool,
    pub replace: bool,
    pub kill_on_timeout: bool,
    pub verbose: bool,
    /// Replaces the engine's program (path to a binary).
    pub bin: Option<String>,
    pub extra: Vec<String>,
    pub labels: Labels,
    pub strict: bool,
    /// How often readiness is polled.
    pub poll: Duration,
}

/// What is launched, fully resolved.
struct Plan {
    engine: String,
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
}

/// Runs srv-launch; upstream records on stdin are passed through while it works.
pub fn run(cfg: &Config) -> Result<Exit> {
    let forwarder = BackgroundPassThrough::start(cfg.strict);

    let exec = exec::connect(cfg.host.as_deref(), &cfg.ssh).map_err(|e| e.into_tool_error())?;
    let plan = plan(cfg, exec.as_ref())?;
    catch_interrupts();
    let record = launch_and_wait(cfg, exec.as_ref(), &plan)?;

    RecordWriter::stdout().emit(&record)?;
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

fn plan(cfg: &Config, exec: &dyn Exec) -> Result<Plan> {
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

    let (engine, argv, command, port, health_url, models_url, probe_url, url) = match (
        &cfg.engine,
        &cfg.cmd,
    ) {
        (Some(name), None) => {
            let preset = engines::engine(name)
                .ok_or_else(|| cli::usage(format!("unknown engine '{name}'")))?;
            let port = match cfg.port {
                Some(p) => p,
                None => exec.free_port().map_err(|e| e.into_tool_error())?,
            };
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
                    extra: cfg.extra.clone(),
                })
                .map_err(|e| cli::usage(format!("{e} (srv-launch {name})")))?;
            let url = format!("http://{reach_host}:{port}");
            let command = shell_join(&argv);
            (
                preset.name.to_string(),
                argv,
                command,
                port,
                format!("{url}{}", preset.health_path),
                Some(format!("{url}{}", preset.models_path)),
                cfg.probe.then(|| format!("{url}/v1/completions")),
                url,
            )
        }
        (None, Some(cmd)) => {
            let ready = cfg.ready_url.as_deref().ok_or_else(|| {
                cli::usage("--cmd needs --ready-url URL (answers 200 once the server is ready)")
            })?;
            let port = match cfg.port {
                Some(p) => p,
                None => match port_of_url(ready) {
                    Some(p) => p,
                    None => exec.free_port().map_err(|e| e.into_tool_error())?,
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
                "cmd".to_string(),
                argv,
                command,
                port,
                ready,
                cfg.probe.then(|| format!("{origin}/v1/models")),
                cfg.probe.then(|| format!("{origin}/v1/completions")),
                origin,
            )
        }
        _ => {
            return Err(cli::usage(
                "give an ENGINE (sglang, vllm, llama-cpp, trtllm, sim) or --cmd '...' --ready-url URL",
            ));
        }
    };

    let name = cfg.name.clone().unwrap_or_else(|| engine.clone());
    let log = cfg.log.clone().unwrap_or_else(|| {
        let stamp = now_ts().replace([':', '-'], "").replace('.', "");
        format!(
            "/tmp/srv-launch/{name}-{port}-{}.log",
            &stamp[..15.min(stamp.len())]
        )
    });
    let launch_id = launch_id();
    let mut env = Vec::new();
    if let Some(g) = &cfg.gpus {
        env.push(("CUDA_VISIBLE_DEVICES".to_string(), g.clone()));
    }
    env.extend(cfg.env.iter().cloned());
    env.push((LAUNCH_ID_VAR.to_string(), launch_id.clone()));

    Ok(Plan {
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
    })
}

fn origin_of(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let hostport = rest.split('/').next()?;
    (!hostport.is_empty()).then(|| format!("http://{hostport}"))
}

fn port_of_url(url: &str) -> Option<u16> {
    let origin = origin_of(url)?;
    origin.rsplit_once(':')?.1.parse().ok()
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

fn launch_and_wait(cfg: &Config, exec: &dyn Exec, plan: &Plan) -> Result<ServerRecord> {
    let host = exec.host().to_string();
    if !exec
        .has_program(&plan.argv[0])
        .map_err(|e| e.into_tool_error())?
    {
        return Err(cli::usage(format!(
            "'{}' not found on {host} (PATH of a non-interactive shell): install it, or pass --bin PATH",
            plan.argv[0]
        )));
    }
    free_the_port(cfg, exec, plan.port)?;

    if cfg.verbose {
        cli::info(format!(
            "running on {host}: {} (log: {})",
            plan.command, plan.log
        ));
    }
    let started = Instant::now();
    let pid = exec
        .spawn_detached(&Detached {
            argv: plan.argv.clone(),
            env: plan.env.clone(),
            cwd: cfg.cwd.clone(),
            log: plan.log.clone(),
        })
        .map_err(|e| e.into_tool_error())?;
    let stat = exec
        .read_tail(&format!("/proc/{pid}/stat"), 4096)
        .map_err(|e| e.into_tool_error())?
        .and_then(|s| procs::parse_stat(pid, &String::from_utf8_lossy(&s)));
    let Some(stat) = stat.filter(|p| !p.is_gone()) else {
        return Err(died(exec, plan, started));
    };
    let id = ProcId {
        pid,
        start_ticks: stat.start_ticks,
    };

    let served = wait_ready(cfg, exec, plan, id, started)?;
    let ready_s = started.elapsed().as_secs_f64();
    cli::info(format!(
        "{} ready at {} after {ready_s:.1}s (pid {pid} on {host}, log {})",
        plan.engine, plan.url, plan.log
    ));

    let mut labels = Labels::new();
    labels.insert("engine".into(), plan.engine.clone());
    if let Some(m) = cfg.model.clone().or_else(|| served.clone()) {
        labels.insert("model".into(), m);
    }
    labels.insert("tp".into(), cfg.tp.to_string());
    labels.insert("pp".into(), cfg.pp.to_string());
    if !exec.is_local() {
        labels.insert("host".into(), host.clone());
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
        command: plan.command.clone(),
        log: plan.log.clone(),
        ready_s,
        launch_id: Some(plan.launch_id.clone()),
        served_model: served,
        gpus: cfg.gpus.clone(),
        name: cfg.name.clone(),
        extra: servbench::record::Extra::new(),
    })
}

/// Refuses a taken port, or with --replace kills whoever holds it (srv-kill's logic).
fn free_the_port(cfg: &Config, exec: &dyn Exec, port: u16) -> Result<()> {
    let holders = exec.listeners(port).map_err(|e| e.into_tool_error())?;
    if holders.is_free() {
        return Ok(());
    }
    let table = exec.processes(None).map_err(|e| e.into_tool_error())?;
    let who: Vec<String> = holders
        .pids
        .iter()
        .map(|p| match table.get(*p) {
            Some(info) => format!("pid {p} ({})", info.command()),
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
            let outcome = procs::kill(exec, &spec, &KillOptions::default())
                .map_err(|e| e.into_tool_error())?;
            if !outcome.survivors.is_empty() {
                return Err(cli::failure(format!(
                    "--replace: pids {:?} on port {port} survived SIGKILL",
                    outcome.survivors
                )));
            }
        }
    }
    if !procs::wait_port_free(exec, port, Duration::from_secs(5))
        .map_err(|e| e.into_tool_error())?
    {
        return Err(cli::failure(format!(
            "--replace: port {port} is still in use after the kill"
        )));
    }
    Ok(())
}

/// The error for a server that exited before it was ready, with its log's tail on stderr.
fn died(exec: &dyn Exec, plan: &Plan, started: Instant) -> anyhow::Error {
    let tail = log_tail(exec, &plan.log, LOG_TAIL_LINES);
    eprintln!(
        "srv-launch: --- last {} lines of {} ---",
        tail.len(),
        plan.log
    );
    for line in &tail {
        eprintln!("{line}");
    }
    eprintln!("srv-launch: --- end of log ---");
    cli::failure(format!(
        "{} exited during startup after {:.1}s (command: {}; log: {} on {})",
        plan.engine,
        started.elapsed().as_secs_f64(),
        plan.command,
        plan.log,
        exec.host()
    ))
}

/// One readiness check's result, for the progress line.
enum Check {
    Ready(Option<String>),
    NotYet(String),
}

/// Polls until ready; returns the served model name when the server lists one.
fn wait_ready(
    cfg: &Config,
    exec: &dyn Exec,
    plan: &Plan,
    id: ProcId,
    started: Instant,
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
    let poll = if cfg.poll.is_zero() {
        Duration::from_millis(500)
    } else {
        cfg.poll
    };
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
        if !exec.alive(id).map_err(|e| e.into_tool_error())? {
            if tty {
                eprintln!();
            }
            return Err(died(exec, plan, started));
        }
        let state = rt.block_on(check(&client, plan));
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
                    let line = format!(
                        "srv-launch: waiting for {} ({:.0}s): {why} | log: {last}",
                        plan.engine,
                        elapsed.as_secs_f64()
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
        std::thread::sleep(poll.min(Duration::from_millis(50) * polls));
    }
}

fn model_matches(want: &str, served: &str) -> bool {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    want == served || base(want) == base(served)
}

async fn check(client: &reqwest::Client, plan: &Plan) -> Check {
    match client.get(&plan.health_url).send().await {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => return Check::NotYet(format!("health {}", r.status().as_u16())),
        Err(e) if e.is_connect() => return Check::NotYet("not listening yet".into()),
        Err(e) if e.is_timeout() => return Check::NotYet("health timed out".into()),
        Err(e) => return Check::NotYet(format!("health: {e}")),
    }
    let mut served = None;
    if let Some(models) = &plan.models_url {
        let resp = match client.get(models).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => return Check::NotYet(format!("/v1/models {}", r.status().as_u16())),
            Err(e) => return Check::NotYet(format!("/v1/models: {e}")),
        };
        let body: serde_json::Value = match resp.json().await {
            Ok(b) => b,
            Err(e) => return Check::NotYet(format!("/v1/models is not JSON: {e}")),
        };
        served = body["data"]
            .as_array()
            .and_then(|d| d.first())
            .and_then(|m| m["id"].as_str())
            .map(str::to_string);
        if served.is_none() {
            return Check::NotYet("/v1/models lists no model yet".into());
        }
    }
    if let Some(probe) = &plan.probe_url {
        let body = serde_json::json!({
            "model": served.clone().unwrap_or_default(),
            "prompt": "Hello",
            "max_tokens": 1,
            "temperature": 0,
        });
        match client.post(probe).json(&body).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => return Check::NotYet(format!("probe completion {}", r.status().as_u16())),
            Err(e) => return Check::NotYet(format!("probe completion: {e}")),
        }
    }
    Check::Ready(served)
}

fn timed_out(cfg: &Config, exec: &dyn Exec, plan: &Plan, id: ProcId, why: &str) -> anyhow::Error {
    let what = format!(
        "{} not ready after {:?} (last check: {why}; log: {} on {})",
        plan.engine,
        cfg.timeout,
        plan.log,
        exec.host()
    );
    if !cfg.kill_on_timeout {
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

/// Kills a server srv-launch started but never announced (timeout, interrupt); says how it went.
fn kill_unannounced(exec: &dyn Exec, plan: &Plan, id: ProcId) -> String {
    let spec = procs::TargetSpec {
        name: format!("pid {}", id.pid),
        roots: vec![id],
        pgids: vec![id.pid],
        sids: vec![id.pid],
        marker: Some(format!("{LAUNCH_ID_VAR}={}", plan.launch_id)),
        min_start_ticks: id.start_ticks,
    };
    match procs::kill(exec, &spec, &KillOptions::default()) {
        Ok(o) if o.survivors.is_empty() => format!("killed it (pid {})", id.pid),
        Ok(o) => format!("killing it left survivors {:?}", o.survivors),
        Err(e) => format!("killing it failed: {e}"),
    }
}
