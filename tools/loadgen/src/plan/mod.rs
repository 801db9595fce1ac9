//! The run's plan: [`Args::plan`] turns the flags, validated once (`limits.rs`), into an
//! immutable [`Plan`] of high-level parts (the target, the mode with its rules, the workload,
//! the budget, the body, the telemetry, the seed), the only place the flags are read. One rank
//! of several runs [`Plan::for_rank`].

pub mod limits;

use crate::client::body::Api;
use crate::client::body::ExtraBody;
use crate::client::tls::Trust;
use crate::pacing::{Arrival, Load};
use crate::ranks::RankArgs;
use crate::telemetry::TelemetryFlags;
use crate::workload::Asked;
use crate::workload::registry::Spec;
use crate::{Args, Warmup};
use servbench::engines::EnginePreset;
use servbench::load::search;
use servbench::load::{LoadArgs, ramp};
use servbench::record::Labels;
use servbench::stats::Slo;
use std::time::Duration;

/// Where the requests go, from the flags (the target itself also needs stdin's `server`
/// record: `run/setup.rs`).
#[derive(Debug, Clone)]
pub struct TargetPlan {
    /// `--url` (else the `server` record on stdin, else the default).
    pub url: Option<String>,
    pub headers: Vec<(String, String)>,
    pub api_key: Option<String>,
    pub trust: Trust,
    /// `--engine`.
    pub engine: Option<servbench::engines::EnginePreset>,
}

/// The load mode, with its rules.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Every load, `--repeat` times each.
    Sweep { loads: Vec<Load> },
    /// `--ramp`: doubling the concurrency from `first`.
    Ramp { first: u32, rules: ramp::Rules },
    /// `--find-max`: an open loop's probes with these arrivals and cap.
    FindMax {
        rules: search::Rules,
        arrival: Arrival,
        max_concurrency: Option<u32>,
    },
    /// `--step-grid`: a decode cell per batch, then the prompt's prefill alone.
    StepGrid { batches: Vec<u32> },
}

/// How much of each point to run.
#[derive(Debug, Clone, Copy)]
pub struct BudgetPlan {
    /// `-n`, `--duration`.
    pub asked: Asked,
    pub warmup: Option<Warmup>,
    pub repeat: u32,
}

/// What every request body holds besides its prompt.
#[derive(Debug, Clone)]
pub struct BodyPlan {
    pub api: Api,
    /// `--model` (else the first one /v1/models lists).
    pub model: Option<String>,
    pub stream: bool,
    pub allow_eos: bool,
    pub usage_per_chunk: bool,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub extra: Option<ExtraBody>,
    /// `--max-tokens`, one point each (`None`: 256, or a listed prompt's own).
    pub max_tokens: Vec<Option<u32>>,
    /// Leading words synthetic prompts share (`--shared-prefix`) or each group has its own of
    /// (`--prefix-len`).
    pub shared_prefix: u32,
    pub prefix_groups: Option<u32>,
    pub prefix_len: Option<u32>,
    /// `--images`: the images each chat request carries.
    pub images: Option<crate::client::image::Images>,
    /// `--response-format`: the schema each request asks for and its answer is checked against.
    pub response_format: Option<std::sync::Arc<servbench::load::schema::ResponseFormat>>,
}

/// The whole run, planned.
#[derive(Debug, Clone)]
pub struct Plan {
    pub target: TargetPlan,
    /// The load flags, as shared declares them (the summary's description of the load).
    pub load: LoadArgs,
    pub mode: Mode,
    pub workload: Spec,
    pub budget: BudgetPlan,
    pub body: BodyPlan,
    pub telemetry: TelemetryFlags,
    /// This process's seed: `--seed`, else drawn once (a rerun against the same server sends
    /// prompts its prefix cache has not seen); one rank's derives from the job's.
    pub seed: u64,
    /// The job's seed (alone: `seed`): the aligner's shared prefix and a trace's words.
    pub job_seed: u64,
    pub slo: Option<Slo>,
    /// `--cancel-rate` and `--cancel-after`.
    pub cancel: Option<crate::cancel::Cancel>,
    /// `--lora` and its assignment: the adapter each request names.
    pub lora: Option<crate::lora::LoraMix>,
    pub timeout: Duration,
    pub grace: Duration,
    /// `request` records are written (no `--no-requests`).
    pub write_requests: bool,
    /// `--record-text`.
    pub record_text: bool,
    /// Runtime worker threads.
    pub threads: usize,
    pub flush_cache: bool,
    /// `--label`s.
    pub labels: Labels,
    /// `--strict`: upstream lines that are not records are errors.
    pub strict: bool,
    /// The lengths checked against the server's context once it is known.
    pub lengths: limits::Lengths,
    pub ranks: RankArgs,
    /// What the ranks of a job must agree on (every flag but the rank flags, `--label` and
    /// `--threads`).
    pub fingerprint: u64,
}

impl Args {
    /// The plan of this run: the flags validated (one usage line naming the flag for the
    /// first that is wrong), the open-files limit raised and the concurrency checked against
    /// it, the seed drawn.
    pub fn plan(&self) -> anyhow::Result<Plan> {
        limits::validate(self)?;
        let mut a = self.clone();
        // A ramp's ceiling is lowered to what the open-files limit holds.
        limits::fit_open_files(&mut a, servbench::rlimit::raise_nofile_limit())?;
        // 53 bits, so that every JSON reader (jq, JavaScript) gives the recorded seed back
        // exactly for `--seed`.
        let seed = a.seed.unwrap_or_else(|| rand::random::<u64>() >> 11);
        let mode = if a.load.ramp {
            let (first, rules) = a.load.ramp_rules();
            Mode::Ramp { first, rules }
        } else if let Some(var) = a.load.find_max {
            Mode::FindMax {
                rules: a.load.search_rules(var),
                arrival: a.load.arrival,
                max_concurrency: a.load.max_concurrency,
            }
        } else if a.step_grid {
            Mode::StepGrid {
                batches: a.load.concurrency.as_ref().map_or(vec![1], |c| c.to_vec()),
            }
        } else {
            Mode::Sweep {
                loads: a.load.loads(),
            }
        };
        let threads = a
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get().min(8)));
        Ok(Plan {
            target: TargetPlan {
                url: a.url.clone(),
                headers: a.headers.clone(),
                api_key: a.api_key.clone(),
                trust: match (&a.cacert, a.insecure) {
                    (Some(file), _) => Trust::CaFile(file.clone()),
                    (None, true) => Trust::Insecure,
                    (None, false) => Trust::System,
                },
                engine: a.engine,
            },
            load: a.load.clone(),
            mode,
            workload: Spec {
                api: a.api,
                prompts: a.prompts.clone(),
                input_len: a.load.input_len.clone(),
                prefix_groups: a.load.prefix_groups,
                turns: a.load.turns,
                think: a.load.think_time,
                trace: a.load.trace.clone(),
                trace_block: a.load.trace_block,
                eval: a.eval.clone().map(|f| (f, a.eval_match)),
            },
            budget: BudgetPlan {
                asked: Asked {
                    requests: a.load.requests,
                    duration: a.load.duration,
                },
                warmup: a.warmup,
                repeat: a.load.repeat,
            },
            body: BodyPlan {
                api: a.api,
                model: a.model.clone(),
                stream: !a.no_stream && a.api.generates(),
                allow_eos: a.allow_eos,
                usage_per_chunk: !a.no_usage_per_chunk,
                temperature: a.temperature,
                top_p: a.top_p,
                extra: a.extra_body.clone(),
                response_format: a.response_format.clone(),
                max_tokens: match &a.load.max_tokens {
                    Some(m) => m.iter().copied().map(Some).collect(),
                    None => vec![None],
                },
                images: (a.images > 0).then_some(crate::client::image::Images {
                    count: a.images,
                    size: a.image_size,
                }),
                shared_prefix: a.load.prefix_len.unwrap_or(a.load.shared_prefix),
                prefix_groups: a.load.prefix_groups,
                prefix_len: a.load.prefix_len,
            },
            telemetry: TelemetryFlags {
                metrics_url: a.metrics_url.clone(),
                no_metrics: a.no_metrics,
                interval: a.scrape_interval,
                timeout: a.timeout,
                gpu_host: a.gpu_host.clone(),
                nvidia_smi: a.nvidia_smi.clone(),
                ssh: a.ssh.options(),
                gpus: a.gpus.clone(),
                gpu_metrics: a.gpu_metrics.clone(),
                no_gpu: a.no_gpu,
            },
            seed,
            job_seed: seed,
            slo: a.load.slo.clone(),
            cancel: a
                .cancel_rate
                .zip(a.cancel_after)
                .map(|(rate, after)| crate::cancel::Cancel { rate, after }),
            lora: (!a.lora.is_empty()).then(|| {
                crate::lora::LoraMix::new(
                    a.lora.clone(),
                    a.lora_assignment,
                    a.lora_zipf_exponent
                        .unwrap_or(crate::lora::DEFAULT_ZIPF_EXPONENT),
                )
            }),
            timeout: a.timeout,
            grace: a.grace,
            write_requests: !a.no_requests,
            // A structured answer is checked by its text, and its record carries it.
            record_text: a.record_text || a.response_format.is_some(),
            threads: threads.max(1),
            flush_cache: a.load.flush_cache,
            labels: a.common.labels(),
            strict: a.common.strict,
            lengths: limits::Lengths::of(&a),
            ranks: a.ranks.clone(),
            fingerprint: fingerprint(self),
        })
    }
}

impl Plan {
    /// The plan of rank `rank` of a job whose seed is `job_seed`: its own seed derived from
    /// the job's (each rank draws its own prompts and arrivals).
    pub fn for_rank(&self, job_seed: u64, rank: usize) -> Plan {
        Plan {
            seed: servbench::ranks::rank_seed(job_seed, rank),
            job_seed,
            ..self.clone()
        }
    }

    /// The seed of a point's arrivals.
    pub fn arrival_seed(&self, index: u32, repeat: u32) -> u64 {
        self.seed ^ (u64::from(index) << 32) ^ u64::from(repeat)
    }

    /// `--engine`, as a preset.
    pub fn engine(&self) -> Option<&'static EnginePreset> {
        self.target
            .engine
            .as_ref()
            .and_then(|e| servbench::engines::engine(e.name))
    }
}

/// What the ranks must agree on: every flag but the rank flags, `--label` and `--threads`.
fn fingerprint(args: &Args) -> u64 {
    let mut a = args.clone();
    a.ranks = RankArgs {
        rank_output: a.ranks.rank_output,
        ..RankArgs::default()
    };
    a.common.labels.clear();
    a.threads = None;
    format!("{a:?}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        })
}
