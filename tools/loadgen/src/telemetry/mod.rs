//! The server's side of every point, off the hot path: one thread of its own (with its own
//! single-threaded runtime and connection) scrapes the server's Prometheus `/metrics` when a
//! point starts, every `--scrape-interval` while it runs and when it ends, and samples the
//! server's GPUs (nvidia-smi here or over SSH, or a DCGM exporter) at the same instants. No
//! request task, dispatcher or runtime worker of the load ever waits for it: a point only
//! waits for its first scrape before it starts and its last after it ends. The thread's own
//! CPU time is measured and kept out of `client_cpu_s`.

pub mod gpu_sampler;
pub mod members;
pub mod steplog;
pub mod trtllm;

use crate::client::http::{Pool, Target};
use bytes::Bytes;
use gpu_sampler::{GpuSampler, SmiTarget};
use servbench::cli;
use servbench::exec::{SshOptions, gpu};
use servbench::record::{GpuStats, ServerStats};
use servbench::telemetry::prom::{self, Reading};
use servbench::telemetry::vocab::{Engine, Figure};
use servbench::telemetry::window::{GpuWindow, Window};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Where the GPUs are read.
#[derive(Debug, Clone)]
pub enum GpuSource {
    /// NVML on this host where it loads, else nvidia-smi here (`localhost`) or over SSH;
    /// `indices` empty means every GPU.
    NvidiaSmi {
        host: String,
        /// The program (`nvidia-smi`, or a path).
        program: String,
        ssh: SshOptions,
        indices: Vec<u32>,
        /// Say so when there is no nvidia-smi (asked for, or the server names its GPUs).
        expected: bool,
        /// Try NVML first (no `--nvidia-smi` named a program).
        try_nvml: bool,
    },
    /// A DCGM exporter's `/metrics`.
    Dcgm { url: Target, indices: Vec<u32> },
}

/// What to read during each point.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The server's metrics: a base URL's target and the path (`/metrics`); `None`: off.
    pub metrics: Option<(Target, String)>,
    pub gpus: Option<GpuSource>,
    pub interval: Duration,
    /// Longest one scrape, or one nvidia-smi run, may take.
    pub timeout: Duration,
}

/// One point's server-side figures.
#[derive(Debug, Clone, Default)]
pub struct PointTelemetry {
    pub server: Option<ServerStats>,
    pub gpus: Vec<GpuStats>,
    /// CPU seconds the telemetry thread spent during the point.
    pub cpu_s: f64,
}

enum Cmd {
    Begin(oneshot::Sender<()>),
    /// Ends the point; the client counted this many output tokens (the last scrape waits a
    /// moment for the server's counter to reach them).
    End(u64, oneshot::Sender<PointTelemetry>),
}

/// Puts the calling thread at the lowest priority (nice 19, this thread only): a scrape and
/// its parse take a millisecond of CPU, and on a pinned client core it must not delay a send
/// the dispatcher is due to make. Failing to lower it changes only that, so it is not fatal.
pub(crate) fn yield_to_the_senders() {
    // SAFETY: setpriority on this thread's own id; no memory is passed.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, 19);
    }
}

/// The telemetry thread's handle; dropping it ends the thread.
pub struct Telemetry {
    tx: Option<mpsc::Sender<Cmd>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Telemetry {
    /// Starts the thread; `None` when the plan reads nothing.
    pub fn start(plan: Plan) -> Option<Telemetry> {
        if plan.metrics.is_none() && plan.gpus.is_none() {
            return None;
        }
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("loadgen-telemetry".into())
            .spawn(move || {
                yield_to_the_senders();
                Scraper::new(plan).serve(rx)
            })
            .ok()?;
        Some(Telemetry {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Takes the point's first scrape and GPU sample; returns once they are in.
    pub async fn begin(&self) {
        let (tx, rx) = oneshot::channel();
        if let Some(t) = &self.tx
            && t.send(Cmd::Begin(tx)).is_ok()
        {
            let _ = rx.await;
        }
    }

    /// Takes the point's last scrape and returns its figures.
    pub async fn end(&self, client_output_tokens: u64) -> PointTelemetry {
        let (tx, rx) = oneshot::channel();
        match &self.tx {
            Some(t) if t.send(Cmd::End(client_output_tokens, tx)).is_ok() => {
                rx.await.unwrap_or_default()
            }
            _ => PointTelemetry::default(),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// CPU time of the calling thread.
pub(crate) fn thread_cpu_s() -> f64 {
    // SAFETY: clock_gettime fills the timespec we own.
    unsafe {
        let mut ts: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) != 0 {
            return 0.0;
        }
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    }
}

/// An open point on the thread.
struct Open {
    window: Option<Window>,
    gpus: GpuWindow,
    cpu_at_start: f64,
    /// A scrape failed during the point: no more until it ends (each would wait out the
    /// scrape timeout), and its window is cut short there.
    metrics_stopped: bool,
    /// CPU seconds the GPU sampler's thread spent on this point's samples.
    gpu_cpu_s: f64,
}

impl Open {
    /// One run of the nvidia-smi sampler: its sample, its counter reads, its CPU time.
    fn add(&mut self, s: &gpu_sampler::Sampled) {
        if !s.readings.is_empty() {
            self.gpus.add(&s.readings);
        }
        if let Some(c) = &s.counters {
            self.gpus.add_counters(c, s.counters_at);
        }
        self.gpu_cpu_s += s.cpu_s;
    }
}

/// The most of one `/metrics` answer read: engines write well under 1 MiB, and a page many
/// times that costs the telemetry thread seconds of CPU and many times its size in memory.
pub const MAX_METRICS_BYTES: usize = 8 << 20;

/// The thread's state: connections, and what was already said once.
struct Scraper {
    plan: Plan,
    runtime: Option<tokio::runtime::Runtime>,
    metrics: Option<Pool>,
    dcgm: Option<Pool>,
    /// nvidia-smi, here or over SSH, on a thread of its own (see [`gpu_sampler`]).
    smi: Option<GpuSampler>,
    engine: Option<Engine>,
    /// Notes already given (a server without metrics is noted once, not every point).
    noted_metrics: bool,
    noted_cut_short: bool,
    noted_gpus: bool,
    /// Energy fallbacks already said (each once a run).
    noted_energy: std::collections::BTreeSet<String>,
    /// The DCGM exporter was read once before the first point.
    gpu_probed: bool,
}

impl Scraper {
    fn new(plan: Plan) -> Scraper {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok();
        let metrics = plan.metrics.as_ref().map(|(t, _)| Pool::new(t.clone()));
        let dcgm = match &plan.gpus {
            Some(GpuSource::Dcgm { url, .. }) => Some(Pool::new(url.clone())),
            _ => None,
        };
        let smi = match &plan.gpus {
            Some(GpuSource::NvidiaSmi {
                host,
                program,
                ssh,
                indices,
                expected,
                try_nvml,
            }) => GpuSampler::start(
                SmiTarget {
                    host: host.clone(),
                    program: program.clone(),
                    ssh: ssh.clone(),
                    indices: indices.clone(),
                    expected: *expected,
                    try_nvml: *try_nvml,
                },
                plan.timeout,
                thread_cpu_s,
            ),
            _ => None,
        };
        Scraper {
            plan,
            runtime,
            metrics,
            dcgm,
            smi,
            engine: None,
            noted_metrics: false,
            noted_cut_short: false,
            noted_gpus: false,
            noted_energy: Default::default(),
            gpu_probed: false,
        }
    }

    fn serve(mut self, rx: mpsc::Receiver<Cmd>) {
        let mut open: Option<Open> = None;
        let mut next = Instant::now();
        loop {
            let cmd = match &open {
                None => match rx.recv() {
                    Ok(c) => c,
                    Err(_) => return,
                },
                Some(_) => match rx.recv_timeout(next.saturating_duration_since(Instant::now())) {
                    Ok(c) => c,
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some(o) = &mut open {
                            self.sample(o);
                        }
                        // Regular instants; a slow scrape skips the ones it overran.
                        let now = Instant::now();
                        while next <= now {
                            next += self.plan.interval;
                        }
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return,
                },
            };
            match cmd {
                Cmd::Begin(reply) => {
                    let cpu_at_start = thread_cpu_s();
                    if let Some(smi) = &mut self.smi {
                        smi.wait_connected(self.plan.timeout);
                        // A sample that ended after the last point is not this point's.
                        smi.take();
                        smi.ask_with_counters();
                    }
                    let window = self.scrape().map(|(engine, r)| Window::start(engine, r));
                    let o = Open {
                        window,
                        gpus: GpuWindow::default(),
                        cpu_at_start,
                        metrics_stopped: false,
                        gpu_cpu_s: 0.0,
                    };
                    if !std::mem::replace(&mut self.gpu_probed, true) {
                        // Read once before the first point, so a missing exporter is said
                        // at once.
                        self.dcgm_sample();
                    }
                    open = Some(o);
                    next = Instant::now() + self.plan.interval;
                    let _ = reply.send(());
                }
                Cmd::End(expected, reply) => {
                    let Some(o) = open.take() else {
                        let _ = reply.send(PointTelemetry::default());
                        continue;
                    };
                    let _ = reply.send(self.finish(o, expected));
                }
            }
        }
    }

    /// A scrape and a GPU sample while the point runs.
    fn sample(&mut self, o: &mut Open) {
        if let Some(w) = &mut o.window
            && !o.metrics_stopped
        {
            match self.try_scrape() {
                Ok((engine, r)) if engine == w.engine() => w.sample(r),
                Ok(_) => {}
                Err(why) => {
                    w.cut_short();
                    o.metrics_stopped = true;
                    self.note_cut_short(&why);
                }
            }
        }
        self.take_gpu_samples(o);
        if let Some(smi) = &mut self.smi {
            smi.ask();
        }
        if let Some(g) = self.dcgm_sample() {
            o.gpus.add(&g);
        }
    }

    /// The nvidia-smi samples that have arrived, into the open point (never waited for).
    fn take_gpu_samples(&mut self, o: &mut Open) {
        if let Some(smi) = &mut self.smi {
            for s in smi.take() {
                o.add(&s);
            }
        }
    }

    fn finish(&mut self, mut o: Open, expected: u64) -> PointTelemetry {
        if let Some(smi) = &mut self.smi {
            // At most a second for a first sample; one nvidia-smi deadline for the counters.
            let bound = self.plan.timeout.min(Duration::from_secs(1));
            for s in smi.end_of_point(o.gpus.is_empty(), bound, self.plan.timeout) {
                o.add(&s);
            }
        }
        for why in o.gpus.energy_fallbacks() {
            if self.noted_energy.insert(why.clone()) {
                cli::info(format!(
                    "note: GPU energy: {why}; that point's energy for it is its sampled power \
                     integrated over the point (energy_source sampled_power)"
                ));
            }
        }
        let stopped = o.metrics_stopped;
        let server = o.window.map(|w| {
            if stopped {
                return w.finish(None);
            }
            // The server may count a request's last tokens a moment after the client has
            // them: the last scrape waits (at most a second) until its counter has them too.
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut last = match self.try_scrape() {
                Ok((_, r)) => Some(r),
                Err(why) => {
                    self.note_cut_short(&why);
                    None
                }
            };
            while let Some(r) = &last
                && r.get(Figure::GenerationTokens).is_some()
                && generated(&w, r) < expected
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
                last = self.scrape().map(|(_, r)| r).or(last);
            }
            w.finish(last)
        });
        PointTelemetry {
            server,
            gpus: o.gpus.finish(),
            cpu_s: thread_cpu_s() - o.cpu_at_start + o.gpu_cpu_s,
        }
    }

    /// One GET within the plan's timeout and at most `max_bytes`: status and body, or a
    /// failure in words.
    fn get(&self, pool: &Pool, path: &str, max_bytes: usize) -> Result<(u16, Bytes), String> {
        let runtime = self.runtime.as_ref().ok_or("no runtime for scraping")?;
        runtime
            .block_on(pool.exchange_bounded(
                hyper::Method::GET,
                path,
                Bytes::new(),
                self.plan.timeout,
                max_bytes,
            ))
            .map_err(|f| f.message)
    }

    /// The server's metrics now, read in its engine's names; `None` (noted once) when there
    /// are none to read.
    fn scrape(&mut self) -> Option<(Engine, Reading)> {
        self.metrics.as_ref()?;
        match self.try_scrape() {
            Ok(x) => Some(x),
            Err(why) => self.note_metrics(why),
        }
    }

    /// The server's metrics now, or why not in words.
    fn try_scrape(&mut self) -> Result<(Engine, Reading), String> {
        let (Some(pool), Some((_, path))) = (self.metrics.as_ref(), self.plan.metrics.as_ref())
        else {
            return Err("no metrics to scrape".into());
        };
        let path = path.clone();
        let url = format!("{}{path}", pool.target.url.trim_end_matches('/'));
        let text = match self.get(pool, &path, MAX_METRICS_BYTES) {
            Ok((200, body)) => String::from_utf8_lossy(&body).into_owned(),
            Ok((status, _)) => return Err(format!("{url} answered HTTP {status}")),
            Err(e) => return Err(format!("{url}: {e}")),
        };
        let json = text.trim_start().starts_with(['{', '[']);
        let parsed = match prom::parse(&text) {
            Ok(p) => p,
            // trtllm-serve's /metrics is JSON; its Prometheus text is at /prometheus/metrics.
            Err(_) if path == "/metrics" && json => {
                if let Some((_, p)) = &mut self.plan.metrics {
                    *p = "/prometheus/metrics".into();
                }
                return self.try_scrape();
            }
            Err(e) if json => {
                return Err(format!(
                    "{url}: {e}; trtllm-serve answers JSON at /metrics and serves its \
                     Prometheus text at /prometheus/metrics (--metrics-url \
                     {}/prometheus/metrics)",
                    pool.target
                        .url
                        .trim_end_matches('/')
                        .trim_end_matches("/metrics")
                ));
            }
            Err(e) => return Err(format!("{url}: {e}")),
        };
        let engine = match self.engine.clone().or_else(|| parsed.engine()) {
            Some(e) => e,
            None => {
                let prefixes: Vec<&str> = Engine::ALL.iter().map(|e| e.prefix()).collect();
                return Err(format!(
                    "{url} has no metric names servbench knows ({})",
                    prefixes.join(", ")
                ));
            }
        };
        self.engine = Some(engine.clone());
        Ok((engine.clone(), parsed.read(engine)))
    }

    /// The server stopped answering during a point (said once): that point's `server` object
    /// covers it up to the last answered scrape and says so.
    fn note_cut_short(&mut self, why: &str) {
        if !std::mem::replace(&mut self.noted_cut_short, true) {
            cli::info(format!(
                "note: server metrics stopped answering during a point: {why}; its `server` \
                 object covers the point up to the last answered scrape and is marked \
                 `incomplete` (no more scrapes until the point ends)"
            ));
        }
    }

    fn note_metrics<T>(&mut self, why: String) -> Option<T> {
        if !std::mem::replace(&mut self.noted_metrics, true) {
            cli::info(format!(
                "note: no server metrics: {why}; summaries have no `server` object \
                 (--metrics-url to point elsewhere, --no-metrics to skip)"
            ));
        }
        None
    }

    /// A DCGM exporter's GPUs now, only those the server uses (nvidia-smi is sampled on its
    /// own thread instead).
    fn dcgm_sample(&mut self) -> Option<Vec<gpu::GpuReading>> {
        let Some(GpuSource::Dcgm { url, indices }) = self.plan.gpus.clone() else {
            return None;
        };
        let pool = self.dcgm.as_ref()?;
        let path = url.prefix.clone();
        let got = self.get(
            pool,
            if path.is_empty() { "/metrics" } else { "" },
            MAX_METRICS_BYTES,
        );
        match got.map(|(s, b)| (s, prom::parse(&String::from_utf8_lossy(&b)))) {
            Ok((200, Ok(x))) => Some(only(x.dcgm_gpus(), &indices)),
            Ok((s, _)) => self.note_gpus(format!("{}: HTTP {s} or not Prometheus text", url.url)),
            Err(e) => self.note_gpus(format!("{}: {e}", url.url)),
        }
    }

    fn note_gpus<T>(&mut self, why: String) -> Option<T> {
        if !std::mem::replace(&mut self.noted_gpus, true) {
            cli::info(format!(
                "note: no GPU telemetry: {why}; summaries have no `gpus` (--no-gpu to skip)"
            ));
        }
        None
    }
}

/// The server's generated tokens since the window opened.
fn generated(w: &Window, r: &Reading) -> u64 {
    let now = r.get(Figure::GenerationTokens).unwrap_or(0.0);
    (now - w.start_value(Figure::GenerationTokens).unwrap_or(0.0)).max(0.0) as u64
}

fn only(gpus: Vec<gpu::GpuReading>, indices: &[u32]) -> Vec<gpu::GpuReading> {
    gpus.into_iter()
        .filter(|g| indices.is_empty() || indices.contains(&g.index))
        .collect()
}

/// The telemetry flags, as the run's plan holds them.
#[derive(Debug, Clone)]
pub struct TelemetryFlags {
    /// `--metrics-url`.
    pub metrics_url: Option<String>,
    pub no_metrics: bool,
    /// `--scrape-interval`.
    pub interval: Duration,
    /// `--timeout` (a scrape's is at most 5 s of it).
    pub timeout: Duration,
    pub gpu_host: Option<String>,
    /// `--nvidia-smi`: the program named by hand (then NVML is not tried).
    pub nvidia_smi: Option<String>,
    pub ssh: SshOptions,
    /// `--gpus`.
    pub gpus: Option<String>,
    pub gpu_metrics: Option<String>,
    pub no_gpu: bool,
}

/// What to read, from the flags, the target and the upstream `server` record: the target's
/// `/metrics` unless `--metrics-url` or `--no-metrics`; the GPUs of `--gpu-metrics` (DCGM),
/// of `--gpu-host`, or of the record's host (its `gpus` only), or of this host when the server
/// is on loopback; none for srv-sim (it has no GPUs) unless asked, nor with `--no-gpu`.
pub fn plan(
    flags: &TelemetryFlags,
    target: &Target,
    server: Option<&servbench::record::ServerRecord>,
) -> anyhow::Result<Plan> {
    let parse = |flag: &str, url: &str| {
        Target::parse(url, Vec::new()).map_err(|e| cli::usage(format!("{flag} {e}")))
    };
    let metrics = match (&flags.metrics_url, flags.no_metrics) {
        (_, true) => None,
        (Some(url), false) => Some((parse("--metrics-url", url)?, String::new())),
        (None, false) => Some((target.clone(), "/metrics".to_string())),
    };
    let indices = match &flags.gpus {
        Some(list) => {
            let i = gpu::indices_of(Some(list));
            if i.is_empty() {
                return Err(cli::usage(format!(
                    "--gpus {list}: expected GPU indices like 0,1"
                )));
            }
            i
        }
        None => gpu::indices_of(server.and_then(|s| s.gpus.as_deref())),
    };
    let nvidia_smi = |host: &str, expected: bool| GpuSource::NvidiaSmi {
        host: host.to_string(),
        program: flags
            .nvidia_smi
            .clone()
            .unwrap_or_else(|| "nvidia-smi".into()),
        ssh: flags.ssh.clone(),
        indices: indices.clone(),
        expected,
        try_nvml: flags.nvidia_smi.is_none(),
    };
    let gpus = if flags.no_gpu {
        None
    } else if let Some(url) = &flags.gpu_metrics {
        Some(GpuSource::Dcgm {
            url: parse("--gpu-metrics", url)?,
            indices: indices.clone(),
        })
    } else if let Some(host) = &flags.gpu_host {
        Some(nvidia_smi(host, true))
    } else {
        match server {
            Some(s) if s.engine == servbench::record::Engine::Sim => None,
            Some(s) => Some(nvidia_smi(&s.host, s.gpus.is_some())),
            None if loopback(&target.authority) => Some(nvidia_smi("localhost", false)),
            None => None,
        }
    };
    Ok(Plan {
        metrics,
        gpus,
        interval: flags.interval.max(Duration::from_millis(10)),
        timeout: flags.timeout.min(Duration::from_secs(5)),
    })
}

/// Whether `host:port` names this machine.
fn loopback(authority: &str) -> bool {
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}
