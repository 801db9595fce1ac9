//! What a run starts from besides its flags: the target (`--url`, or the `server` record on
//! stdin, whose records pass on unchanged), its TLS trust, the server's engine, the labels, and
//! the binary's Ctrl-C/SIGTERM handling. Rank 0 of several resolves the target here too and
//! tells the other ranks ([`crate::ranks`]). `entry.rs` resolves these for the binary; a library
//! caller builds a [`Setup`] itself.

use crate::client::http::Target;
use crate::plan::Plan;
use crate::stop::Stop;
use servbench::cli::{self, Exit};
use servbench::engines::EnginePreset;
use servbench::jsonl::{self, BackgroundPassThrough, Disposition, RecordWriter};
use servbench::record::{Labels, PdRole, Record, ServerRecord, inherit_labels};

/// Where the target comes from, found before the run.
pub(crate) struct Upstream {
    pub url: String,
    /// The labels of the upstream `server` record that named the target.
    pub server_labels: Option<Labels>,
    /// Where `url` came from, for messages.
    pub from: &'static str,
    /// `--engine`, else the server record's.
    pub engine: Option<&'static EnginePreset>,
    /// Upstream records still being passed on (with `--url`).
    pub background: Option<BackgroundPassThrough>,
    /// The `server` record that named the target: where its GPUs are, for telemetry.
    pub server: Option<ServerRecord>,
    /// The target is a P/D group's proxy: the group's prefill and decode servers, whose
    /// `/metrics` are read too.
    pub pd_members: Vec<ServerRecord>,
}

impl Upstream {
    /// The records' labels: `own`, over the server record's.
    pub fn labels_with(&self, own: Labels) -> Labels {
        match &self.server_labels {
            Some(server) => inherit_labels(server, &own),
            None => own,
        }
    }
}

/// `--url`, else the first `server` record on stdin; upstream records pass on to `out` first,
/// unchanged. Neither is an error: there is no default target, or a launch that failed upstream
/// (no record) would have loadgen measure whatever else answers on a well-known port.
pub(crate) fn upstream<W: std::io::Write>(
    plan: &Plan,
    out: &mut RecordWriter<W>,
) -> anyhow::Result<Upstream> {
    // Upstream records go through first, unchanged; a `server` record names the target.
    let mut found: Option<ServerRecord> = None;
    let mut servers = 0;
    // A P/D group's prefill and decode servers (their proxy is the target).
    let mut members: Vec<ServerRecord> = Vec::new();
    // With --url, upstream records still pass on, on a thread of their own: loadgen does not
    // wait for an upstream that may never close (an SSH session's stdin).
    let background = match plan.target.url {
        Some(_) => BackgroundPassThrough::start(plan.strict),
        None => None,
    };
    if plan.target.url.is_none() {
        jsonl::pass_through(plan.strict, out, |line| {
            // A record srv-kill passed on names a server it killed: not a target.
            if let Record::Server(s) = &line.record
                && !s.killed
            {
                // A P/D group is one target, its proxy: its other members are not counted.
                match s.pd.as_ref().map(|pd| pd.role) {
                    Some(PdRole::Prefill | PdRole::Decode) => members.push(s.clone()),
                    _ => {
                        servers += 1;
                        found.get_or_insert_with(|| s.clone());
                    }
                }
            }
            Disposition::Forward
        })?;
        if servers > 1 {
            cli::warn(format!(
                "{servers} server records on stdin: loading the first only"
            ));
        }
        if found.is_none() && !members.is_empty() {
            return Err(cli::failure(format!(
                "{} server records of a P/D group on stdin but not its proxy, the one to load: did its launch fail upstream?",
                members.len()
            )));
        }
    }
    let mut engine = plan.engine();
    let (url, server_labels, from) = match (&plan.target.url, &found) {
        (Some(url), _) => (url.clone(), None, "--url"),
        (None, Some(s)) => {
            let recorded = &s.engine;
            if engine.is_none() {
                engine = servbench::engines::engine(recorded.as_str());
                if engine.is_none() && plan.flush_cache {
                    return Err(cli::usage(format!(
                        "--flush-cache: the server record's engine '{recorded}' has no preset; pass --engine NAME"
                    )));
                }
            }
            (
                s.url.clone(),
                Some(s.labels.clone()),
                "the server record's url",
            )
        }
        (None, None) => return Err(no_target()),
    };
    let server = found.filter(|_| plan.target.url.is_none());
    // The members of the proxy's own group (another group's, or a stray one's, are not it).
    let group = server
        .as_ref()
        .and_then(|s| s.pd.as_ref())
        .map(|pd| &pd.group);
    members.retain(|m| m.pd.as_ref().map(|pd| &pd.group) == group && group.is_some());
    Ok(Upstream {
        url,
        server_labels,
        from,
        engine,
        background,
        server,
        pd_members: members,
    })
}

/// Why there is no target. A pipe (or file) that ended without a `server` record is an upstream
/// failure passed on (exit 1: srv-launch said why); a terminal means `--url` was forgotten (exit 2).
fn no_target() -> anyhow::Error {
    if servbench::jsonl::stdin_is_piped() {
        cli::failure(
            "no server record on stdin: did the launch fail upstream? give --url to measure a server by address",
        )
    } else {
        cli::usage(
            "no target: give --url (e.g. --url http://127.0.0.1:8000), or pipe a server record in (srv-launch sim | loadgen ...)",
        )
    }
}

/// The target with `--header` and `--api-key`; `from` names where `url` came from.
pub(crate) fn target(plan: &Plan, url: &str, from: &str) -> anyhow::Result<Target> {
    let mut headers = Vec::new();
    for (k, v) in &plan.target.headers {
        let name = hyper::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| cli::usage(format!("--header '{k}': not a header name")))?;
        let value = hyper::header::HeaderValue::from_str(v)
            .map_err(|_| cli::usage(format!("--header '{k}': value is not valid in a header")))?;
        headers.push((name, value));
    }
    if let Some(key) = &plan.target.api_key
        && !headers
            .iter()
            .any(|(k, _)| k == hyper::header::AUTHORIZATION)
    {
        // Never silently unsent, never echoed: a key with a line break is a pasting mistake.
        let mut v = hyper::header::HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
            cli::usage(
                "--api-key (or OPENAI_API_KEY): the key holds a line break or another control character, which no header can carry; check how it was pasted or exported",
            )
        })?;
        v.set_sensitive(true);
        headers.push((hyper::header::AUTHORIZATION, v));
    }
    Target::parse(url, headers)
        .and_then(|t| t.with_trust(&plan.target.trust))
        .map_err(|e| cli::usage(format!("{from} {e}")))
}

/// A run's inputs besides its flags: resolved by `entry::main` from the flags and stdin, or given by
/// a library caller (who may run more than once in a process).
pub struct Setup {
    pub target: Target,
    /// The server's engine (`--engine`, else the server record's): how `--flush-cache` empties
    /// its prefix cache.
    pub engine: Option<&'static EnginePreset>,
    /// On every record written: loadgen's own labels, plus an upstream server record's.
    pub labels: Labels,
    pub stop: Stop,
    /// Catch Ctrl-C/SIGTERM when the run starts: the first pulls `stop`, a second exits the
    /// process (the binary's `entry::main` catches them earlier itself, before reading upstream).
    pub signals: bool,
    /// Watch the process's stdout: once its reader is gone, `stop` is pulled hard (in-flight
    /// requests cancelled at once) and the run ends as a closed stdout does.
    pub watch_stdout: bool,
    /// Upstream records still being passed on; waited for after the last point.
    pub upstream: Option<BackgroundPassThrough>,
    /// This process is one rank of a job of several ([`crate::ranks`]).
    pub ranks: Option<crate::ranks::Ranks>,
    /// The `server` record loaded: where its GPUs are, for telemetry.
    pub server: Option<ServerRecord>,
    /// A P/D group's prefill and decode servers behind the loaded proxy: each one's
    /// `/metrics` is read over every point too (a summary's `pd_members`).
    pub pd_members: Vec<ServerRecord>,
}

impl Setup {
    /// Loads `target`, stopped only through the returned setup's `stop`.
    pub fn new(target: Target) -> Setup {
        Setup {
            target,
            engine: None,
            labels: Labels::default(),
            stop: Stop::new(),
            signals: false,
            watch_stdout: false,
            upstream: None,
            ranks: None,
            server: None,
            pd_members: Vec::new(),
        }
    }
}

/// The first Ctrl-C/SIGTERM pulls `stop`; a second exits at once. Caught through the shared
/// [`servbench::interrupt`], so upstream records read meanwhile are still passed on (the
/// drain rule) before the run ends with 130.
pub(crate) fn watch_signals(stop: Stop) {
    servbench::interrupt::catch(servbench::interrupt::DRAIN_WAIT);
    servbench::interrupt::on_signal(move |seen| {
        if seen == 1 {
            stop.stop();
            cli::info(
                "stopping: no new requests; in-flight ones get --grace, then a partial summary (again to quit now)",
            );
            true
        } else {
            // Hold stdout so no record line is cut in half, then leave at once.
            let _lock = std::io::stdout().lock();
            std::process::exit(Exit::Interrupted as i32);
        }
    });
}
