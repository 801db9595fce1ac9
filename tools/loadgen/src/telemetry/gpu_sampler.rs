//! GPU sampling on a thread of its own, so the telemetry thread (and through it a point's
//! start and end) never waits for it: nvidia-smi on a wedged driver hangs, and an SSH
//! connection takes its time. The telemetry thread asks for a sample at each of its instants
//! and takes whatever samples have arrived; one still running is not waited for.
//!
//! On the GPU host itself the GPUs are read through NVML (`libnvidia-ml.so.1`, loaded at run
//! time: [`servbench::exec::nvml`]), which also has the energy counter; where it does not load
//! (one line says why) and on remote hosts, through nvidia-smi, which has no energy counter:
//! the energy is then the sampled power integrated.
//!
//! Each run is bounded (by the plan's scrape timeout, `--timeout` and at most 5 s; its process
//! group killed at the deadline; its output cut at [`SAMPLE_OUTPUT_CAP`]). A run that times out, prints without end, or answers nothing readable ends
//! the sampling for the run, with one note saying what failed; nvidia-smi failing for one GPU
//! while the others answer (a lost GPU) is noted once and the healthy GPUs are still sampled.
//!
//! NVML's energy counters are read apart from the samples, when a point starts (right after
//! its first sample) and once more after it ends ([`GpuSampler::end_of_point`]). A counter
//! read that fails stops only the counter reads, with one note: the energy is then the sampled
//! power integrated.

use servbench::cli;
use servbench::exec::nvml::{self, Nvml};
use servbench::exec::{self, Bounds, Exec, SshOptions, gpu};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::time::{Duration, Instant};

/// What one nvidia-smi run may print: 1 MiB (a few hundred bytes per GPU is what it prints).
pub const SAMPLE_OUTPUT_CAP: usize = 1 << 20;

/// How long dropping the sampler waits for its thread (which stops its nvidia-smi at once
/// here, within the remote `timeout` over SSH) before leaving it behind.
const DROP_WAIT: Duration = Duration::from_secs(3);

/// Where and what to sample.
#[derive(Debug, Clone)]
pub struct SmiTarget {
    pub host: String,
    /// The program (`nvidia-smi`, or a path).
    pub program: String,
    pub ssh: SshOptions,
    /// Empty: every GPU.
    pub indices: Vec<u32>,
    /// Say so when there is no nvidia-smi (asked for, or the server names its GPUs).
    pub expected: bool,
    /// Read the GPUs through NVML where it loads and the host is this one (no `--nvidia-smi`
    /// was given: a program named by hand is what runs).
    pub try_nvml: bool,
}

/// One finished sample and the CPU time the sampler thread spent on it (kept out of the
/// client's CPU like the telemetry thread's own).
pub struct Sampled {
    pub readings: Vec<gpu::GpuReading>,
    /// The energy counters, where this run read them, and when.
    pub counters: Option<Vec<gpu::CounterRow>>,
    pub counters_at: Instant,
    pub cpu_s: f64,
}

/// What one run of the sampler reads.
#[derive(Debug, Clone, Copy)]
struct Ask {
    sample: bool,
    counters: bool,
}

/// The sampler's handle (owned by the telemetry thread).
pub struct GpuSampler {
    ask: Option<mpsc::Sender<Ask>>,
    got: mpsc::Receiver<Sampled>,
    /// Until the host is connected (over SSH; at once here).
    ready: Option<mpsc::Receiver<()>>,
    ended: mpsc::Receiver<()>,
    in_flight: bool,
    stop: &'static AtomicBool,
    /// The counter query failed once (noted): it is not asked again this run.
    counters_off: Arc<AtomicBool>,
}

impl GpuSampler {
    /// Starts the thread; each nvidia-smi run ends by `deadline`.
    pub fn start(
        target: SmiTarget,
        deadline: Duration,
        thread_cpu_s: fn() -> f64,
    ) -> Option<GpuSampler> {
        let (ask, asked) = mpsc::channel::<Ask>();
        let counters_off = Arc::new(AtomicBool::new(false));
        let (tx, got) = mpsc::channel();
        let (end_tx, ended) = mpsc::channel();
        let (ready_tx, ready) = mpsc::channel();
        // One per run of loadgen: the flag must outlive the thread, which may be left behind.
        let stop: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let counters_off_worker = counters_off.clone();
        std::thread::Builder::new()
            .name("loadgen-gpu".into())
            .spawn(move || {
                super::yield_to_the_senders();
                let mut worker = Worker {
                    target,
                    exec: None,
                    nvml: None,
                    nvml_missing: None,
                    noted: false,
                    bounds: Bounds::new(deadline, SAMPLE_OUTPUT_CAP).stopped_by(stop),
                    counters_off: counters_off_worker,
                };
                // Connected (over SSH) while loadgen sets up; the first point waits for that
                // (bounded), never for nvidia-smi itself.
                let mut alive = worker.connect();
                let _ = ready_tx.send(());
                while alive && let Ok(what) = asked.recv() {
                    let cpu = thread_cpu_s();
                    let sample = match what.sample {
                        true => worker.sample(),
                        false => Some(Vec::new()),
                    };
                    // Not after a sample that ended the sampling (a hang is waited out once).
                    let counters = match (what.counters, &sample) {
                        (true, Some(_)) => worker.counters(),
                        _ => None,
                    };
                    let counters_at = Instant::now();
                    let cpu_s = thread_cpu_s() - cpu;
                    alive = match sample {
                        Some(readings) => tx
                            .send(Sampled {
                                readings,
                                counters,
                                counters_at,
                                cpu_s,
                            })
                            .is_ok(),
                        None => false,
                    };
                }
                let _ = end_tx.send(());
            })
            .ok()?;
        Some(GpuSampler {
            ask: Some(ask),
            got,
            ready: Some(ready),
            ended,
            in_flight: false,
            stop,
            counters_off,
        })
    }

    /// Asks for a sample unless one is running (a slow nvidia-smi skips instants).
    pub fn ask(&mut self) {
        self.send(Ask {
            sample: true,
            counters: false,
        });
    }

    /// [`GpuSampler::ask`], reading the energy counters after the sample (a point's start).
    pub fn ask_with_counters(&mut self) {
        let counters = !self.counters_off.load(Ordering::SeqCst);
        self.send(Ask {
            sample: true,
            counters,
        });
    }

    fn send(&mut self, what: Ask) {
        if !self.in_flight
            && let Some(a) = &self.ask
        {
            self.in_flight = a.send(what).is_ok();
        }
    }

    /// Waits (once, at most `bound`) until the host is connected, so a first short point
    /// gets its samples; nvidia-smi itself is never waited for here.
    pub fn wait_connected(&mut self, bound: Duration) {
        if let Some(r) = self.ready.take() {
            let _ = r.recv_timeout(bound);
        }
    }

    /// What a point's end takes: the samples that arrived, and the energy counters read
    /// after the point. The sample under way is waited for when the point has none yet (at
    /// most `bound`: a point shorter than one SSH round trip still gets one) or when the
    /// counters are to be read after it (at most `counter_bound`, one nvidia-smi deadline);
    /// then the counters are read (at most `counter_bound`). Nothing more is asked once the
    /// counter query failed in this run.
    pub fn end_of_point(
        &mut self,
        none_yet: bool,
        bound: Duration,
        counter_bound: Duration,
    ) -> Vec<Sampled> {
        let mut out = self.take();
        let counters = !self.counters_off.load(Ordering::SeqCst) && self.ask.is_some();
        let wait = match counters {
            true => Some(counter_bound),
            false => (none_yet && out.is_empty()).then_some(bound),
        };
        if self.in_flight
            && self.ask.is_some()
            && let Some(wait) = wait
        {
            match self.got.recv_timeout(wait) {
                Ok(s) => {
                    self.in_flight = false;
                    out.push(s);
                }
                Err(_) => return out,
            }
        }
        if !counters {
            return out;
        }
        self.send(Ask {
            sample: false,
            counters: true,
        });
        if self.in_flight
            && let Ok(s) = self.got.recv_timeout(counter_bound)
        {
            self.in_flight = false;
            out.push(s);
        }
        out
    }

    /// The samples that have arrived since the last call.
    pub fn take(&mut self) -> Vec<Sampled> {
        let mut out = Vec::new();
        loop {
            match self.got.try_recv() {
                Ok(s) => {
                    self.in_flight = false;
                    out.push(s);
                }
                Err(TryRecvError::Empty) => return out,
                Err(TryRecvError::Disconnected) => {
                    // The sampler gave up (its note said why): nothing more will come.
                    self.ask = None;
                    return out;
                }
            }
        }
    }
}

impl Drop for GpuSampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        drop(self.ask.take());
        let _ = self.ended.recv_timeout(DROP_WAIT);
    }
}

/// The sampler thread's state.
struct Worker {
    target: SmiTarget,
    exec: Option<Box<dyn Exec>>,
    /// NVML, where it loaded on the GPU host itself: samples and counters come from it.
    nvml: Option<Nvml>,
    /// Why NVML did not load, said once when nvidia-smi answers in its place.
    nvml_missing: Option<String>,
    noted: bool,
    bounds: Bounds,
    counters_off: Arc<AtomicBool>,
}

impl Worker {
    /// Connects to the host, and opens NVML there when it is this one; false (noted) when the
    /// connection failed.
    fn connect(&mut self) -> bool {
        let host = self.target.host.clone();
        match exec::connect(Some(&host), &self.target.ssh) {
            Ok(e) => {
                if self.target.try_nvml && e.is_local() {
                    match Nvml::open() {
                        Ok(n) => self.nvml = Some(n),
                        Err(why) => self.nvml_missing = Some(why),
                    }
                }
                // nvidia-smi has no energy counter: NVML's is the only one read here.
                if self.nvml.is_none() {
                    self.counters_off.store(true, Ordering::SeqCst);
                }
                self.exec = Some(e);
                true
            }
            Err(e) => self.give_up::<()>(format!("{host}: {e}")).is_some(),
        }
    }

    /// One sample; `None` when sampling ends (noted).
    fn sample(&mut self) -> Option<Vec<gpu::GpuReading>> {
        if let Some(n) = &self.nvml {
            let answer = n.sample(&self.target.indices);
            return self.answered(answer, true);
        }
        let host = self.target.host.clone();
        let exec = self.exec.as_deref()?;
        let program = self.target.program.clone();
        match gpu::sample(exec, &program, &self.target.indices, self.bounds) {
            Ok(Some(answer)) => {
                if !answer.rows.is_empty()
                    && let Some(why) = self.nvml_missing.take()
                {
                    cli::info(format!(
                        "note: GPU telemetry through {program}: {why}; each point's GPU \
                         energy is its sampled power integrated (energy_source sampled_power)"
                    ));
                }
                self.answered(answer, self.target.expected)
            }
            Ok(None) if self.target.expected => self.give_up(format!("no {program} on {host}")),
            Ok(None) => None,
            Err(_) if self.bounds.stop.is_some_and(|f| f.load(Ordering::SeqCst)) => None,
            Err(e) => self.give_up(e.to_string()),
        }
    }

    /// What a sample's answer gives: its rows, with a lost GPU noted once; `None` (noted when
    /// `expected`, or for a hang or an endless output) when no GPU answered.
    fn answered(
        &mut self,
        answer: gpu::Answer<gpu::GpuReading>,
        expected: bool,
    ) -> Option<Vec<gpu::GpuReading>> {
        let Some(why) = answer.failure else {
            return Some(answer.rows);
        };
        if answer.rows.is_empty() {
            // Failing where GPUs were not asked for (a loopback URL) is said only when it is
            // a hang or an endless output, which a wedged driver gives.
            return match expected || answer.cut {
                true => self.give_up(why),
                false => None,
            };
        }
        // A lost GPU: the others still answer, and are still sampled.
        if !std::mem::replace(&mut self.noted, true) {
            let got: Vec<String> = answer.rows.iter().map(|g| g.index.to_string()).collect();
            cli::info(format!(
                "note: GPU telemetry: {why}; sampling the GPUs that answer ({})",
                got.join(", ")
            ));
        }
        Some(answer.rows)
    }

    /// The GPUs' energy counters; `None` when they cannot be read (the first failure noted,
    /// and no more reads this run).
    fn counters(&mut self) -> Option<Vec<gpu::CounterRow>> {
        if self.counters_off.load(Ordering::SeqCst) {
            return None;
        }
        let answer = self.nvml.as_ref()?.energy_counters(&self.target.indices);
        // A lost GPU: the others' counters still count (the sample notes the loss).
        let Some(why) = answer.failure.filter(|_| answer.rows.is_empty()) else {
            return Some(answer.rows);
        };
        self.counters_off.store(true, Ordering::SeqCst);
        cli::info(format!(
            "note: GPU energy: the energy counters ({} through {}) cannot be read: {why}; each \
             point's energy is the GPUs' sampled power integrated over it (energy_source \
             sampled_power)",
            "nvmlDeviceGetTotalEnergyConsumption",
            nvml::LIBRARY
        ));
        None
    }

    fn give_up<T>(&mut self, why: String) -> Option<T> {
        // Neither way answered: the line says why NVML did not either.
        let why = match self.nvml_missing.take() {
            Some(nvml) => format!("{nvml}, and {why}"),
            None => why,
        };
        if !std::mem::replace(&mut self.noted, true) {
            cli::info(format!(
                "note: no GPU telemetry: {why}; GPU sampling stopped for this run, summaries \
                 have no `gpus` (--no-gpu to skip)"
            ));
        } else {
            cli::info(format!("note: GPU sampling stopped: {why}"));
        }
        None
    }
}
