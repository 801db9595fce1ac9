//! What srv-sim is asked to do, validated once from the command line (by `Args::plan`, above this file)
//! and read, never changed, by everything after: the action, the engine model (model, hardware,
//! layout, communication), the engine's scheduling, the server with its faults, the self-report
//! and the predicted load.

use crate::calibrate::{self, CalibrateArgs};
use crate::cost::{PlanInputs, Roofline};
use crate::engine::Spec;
use crate::grid;
use crate::http::Faults;
use crate::metrics::MetricNames;
use crate::predict::PredictArgs;
use crate::selfreport::SelfReport;
use servbench::cli;
use servbench::presets::{self, Comm, Deployment, Gemm, GemmCurve, Layout, MeasuredCurve};
use servbench::record::{Labels, SimPlanRecord};
use std::time::Duration;

/// What the command line asks for.
#[derive(Debug, Clone)]
pub enum Command {
    /// `--list-presets`: the built-in presets' names.
    ListPresets,
    /// `--print-card NAME`: a built-in preset as a JSON card.
    PrintCard(String),
    /// Everything else, validated.
    Run(Box<Plan>),
}

/// What a validated run does.
#[derive(Debug, Clone)]
pub enum Action {
    /// `--dry-run`: the cost model's figures at this context length, as one `sim_plan` record.
    DryRun { context: u64 },
    /// `--predict`: the modelled engine in virtual time under [`Plan::predict`]'s load.
    Predict,
    /// `--calibrate RUN.jsonl`: fit the cost model to these measured points.
    Calibrate(String),
    /// `--calibrate-from GRID.jsonl` alone: fit the step cost to a step grid, print the card.
    CalibrateFrom(String),
    /// `--search`: every layout of --gpus ranked at its best load under the SLO.
    Search,
    /// Serve until killed.
    Serve,
}

/// The validated run: every flag srv-sim acts on, in the form it acts on it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub action: Action,
    pub model: ModelPlan,
    pub engine: EnginePlan,
    pub server: ServerPlan,
    pub self_report: SelfReport,
    /// `--self-report-as trtllm`: the self-report keys of its options file.
    pub trtllm: Option<crate::trtllm::Options>,
    /// `--pd-role` and the proxy's members.
    pub pd: crate::pd::PdPlan,
    pub predict: PredictArgs,
    pub calibration: CalibrateArgs,
    /// `--label`s for the `--dry-run` and `--predict` records.
    pub labels: Labels,
}

/// The engine model: what the roofline is built from.
#[derive(Debug, Clone)]
pub struct ModelPlan {
    /// `--model-card FILE`, else the `--model` preset.
    pub model: String,
    /// `--hardware-file FILE`, else the `--hardware` preset.
    pub hardware: String,
    pub layout: Layout,
    pub comm_from: Option<String>,
    /// `--gemm-from FILE`: collbench's `gemm_step` records for the GEMM part of a step.
    pub gemm_from: Option<String>,
    pub tp_gpus: Vec<u32>,
    pub step_overhead: Duration,
    /// `--calibration CARD.json`, applied to the hardware card.
    pub calibration: Option<String>,
    /// `--calibrate-from GRID.jsonl`: a step grid fitted and applied as a card would be.
    pub calibrate_from: Option<String>,
}

/// Fixed-latency mode (`--ttft`/`--itl`): exact latencies instead of the cost model.
#[derive(Debug, Clone, Copy)]
pub struct FixedLatency {
    pub ttft: Duration,
    pub itl: Duration,
    pub tokens_per_chunk: u32,
}

/// The engine's scheduling, per replica.
#[derive(Debug, Clone)]
pub struct EnginePlan {
    /// Fixed-latency mode; `None`: the cost model times every step.
    pub fixed: Option<FixedLatency>,
    /// `--max-prefill-tokens`: the token budget of one step.
    pub max_step_tokens: u32,
    /// Requests running at once per engine: --max-running-requests (default 256; unlimited
    /// in fixed-latency mode), capped at pp x --pp-max-micro-batch.
    pub max_running: Option<u32>,
    /// `--kv-cache-tokens` as given (see [`Plan::kv_budget`]).
    pub kv_cache_tokens: Option<u64>,
    pub max_model_len: u32,
    /// Speculative decoding (`--spec-tokens` above 0; the modelled engine only).
    pub spec: Option<Spec>,
    /// Data-parallel engine replicas (`--gpus` / (tp x pp)).
    pub replicas: u32,
    pub pp_max_micro_batch: Option<u32>,
    pub prefix_caching: bool,
    pub metrics_names: MetricNames,
    pub seed: u64,
    /// `--decode-abandoned`: what happens to a running request whose client went away.
    pub abandoned: crate::engine::Abandoned,
    /// `--lora`, `--max-loras`, `--lora-swap`.
    pub lora: Option<LoraPlan>,
}

/// LoRA adapters served beside the model, and the engine's adapter slots.
#[derive(Debug, Clone)]
pub struct LoraPlan {
    pub adapters: Vec<String>,
    pub max_loras: u32,
    pub swap: std::time::Duration,
}

/// The HTTP server and the faults it injects.
#[derive(Debug, Clone)]
pub struct ServerPlan {
    pub host: String,
    pub port: u16,
    /// `--ssl-certfile` and `--ssl-keyfile`.
    pub tls: Option<(String, String)>,
    pub served_model_name: Option<String>,
    pub default_max_tokens: u32,
    pub startup: Duration,
    /// `--idle-timeout`; `None` (0): never.
    pub idle_timeout: Option<Duration>,
    pub threads: usize,
    pub realtime: bool,
    pub prompt_tokens_details: bool,
    pub faults: Faults,
}

impl ServerPlan {
    /// The async runtime the server (or the P/D proxy) runs on: one thread at `--threads 1`
    /// (best on one pinned core), else that many workers.
    pub fn runtime(&self) -> anyhow::Result<tokio::runtime::Runtime> {
        use anyhow::Context as _;
        if self.threads <= 1 {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
        } else {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(self.threads)
                .enable_all()
                .build()
        }
        .context("start the async runtime")
    }
}

impl EnginePlan {
    /// Fixed-latency mode: `--ttft` or `--itl` given.
    pub fn fixed_latency(&self) -> bool {
        self.fixed.is_some()
    }
}

impl Plan {
    /// The roofline for the chosen model, hardware and layout.
    pub fn roofline(&self) -> anyhow::Result<Roofline> {
        let m = &self.model;
        let model =
            presets::load_model(&m.model).map_err(|e| cli::usage(format!("--model: {e}")))?;
        let hw = presets::load_hardware(&m.hardware)
            .map_err(|e| cli::usage(format!("--hardware: {e}")))?;
        let (tp, layout) = (m.layout.tp, m.layout);
        if layout.gpus() > hw.gpus {
            return Err(cli::usage(format!(
                "--tp {} x --pp {} needs {} GPUs in one node, and a {} node has {}: multi-node layouts are not modelled (use --gpus for data-parallel replicas)",
                layout.tp,
                layout.pp,
                layout.gpus(),
                hw.name,
                hw.gpus
            )));
        }
        let mut dep = Deployment::new(model, hw, layout);
        if let Some(path) = &m.comm_from
            && let Some((interconnect, comm)) =
                topology_comm(path, tp, &m.tp_gpus, &dep.hw.interconnect)?
        {
            dep.hw.interconnect = interconnect;
            dep.comm = comm;
        } else if let Some(path) = &m.comm_from {
            dep.comm = measured_comm(path, tp)?;
            // A decode step of the most requests running carries the largest allreduce that
            // decode pays (prefill chunks, larger still, are bandwidth-bound either way).
            let step_tokens = self.engine.max_step_tokens;
            let decode_tokens = self
                .engine
                .max_running
                .unwrap_or(step_tokens)
                .min(step_tokens);
            if let Comm::Measured { curve, .. } = &dep.comm
                && let Some(w) =
                    curve.extrapolation_warning(dep.model.allreduce_bytes(decode_tokens))
            {
                cli::warn(format!("--comm-from {path}: {w}"));
            }
        }
        if let Some(path) = &m.gemm_from {
            // The largest step a dry run times is one stream (with its drafts); the engine's
            // is a full chunk of --max-prefill-tokens.
            let largest = match self.action {
                Action::DryRun { .. } => 1 + self.engine.spec.map_or(0, |s| s.tokens),
                _ => self.engine.max_step_tokens,
            };
            dep.gemm = measured_gemm(path, &dep, largest)?;
        }
        let mut roofline = Roofline {
            dep,
            step_overhead: m.step_overhead,
            prefill_efficiency: 1.0,
            attention_s_per_kv_token: 0.0,
            front_end: Default::default(),
        };
        if let Some(path) = &m.calibration {
            let card = calibrate::Calibration::load(path)?;
            if card.hardware != roofline.dep.hw.name {
                cli::warn(format!(
                    "--calibration {path} was fitted on {}, applied here to {}",
                    card.hardware, roofline.dep.hw.name
                ));
            }
            if let Some(from) = &card.gemm_from
                && m.gemm_from.is_none()
            {
                cli::warn(format!(
                    "--calibration {path} was fitted with GEMMs {from}: give --gemm-from with the same file, or its FLOP fraction (attention only) is applied to the modelled GEMMs"
                ));
            }
            card.apply(&mut roofline);
        }
        if let Some(path) = &m.calibrate_from
            && !matches!(self.action, Action::CalibrateFrom(_))
        {
            let card = grid::fit(
                &self.calibration,
                path,
                &roofline,
                self.engine.max_step_tokens,
            )?;
            card.apply(&mut roofline);
        }
        Ok(roofline)
    }

    /// The KV-cache budget in tokens: --kv-cache-tokens, else what fits beside the weights
    /// (fixed-latency mode: none unless given).
    pub fn kv_budget(&self, roofline: &Roofline) -> anyhow::Result<Option<u64>> {
        let engine = &self.engine;
        if engine.fixed_latency() {
            return Ok(engine.kv_cache_tokens);
        }
        Ok(Some(match engine.kv_cache_tokens {
            Some(n) => n,
            None => roofline.kv_capacity_tokens().ok_or_else(|| {
                let why = roofline
                    .fit_problem(engine.max_model_len)
                    .unwrap_or_default();
                cli::usage(format!("{why}; or give --kv-cache-tokens"))
            })?,
        }))
    }

    /// The `sim_plan` record `--dry-run` writes: the cost model's figures for the layout.
    pub fn dry_run(&self, roofline: &Roofline, context: u64) -> SimPlanRecord {
        let engine = &self.engine;
        let mut plan = roofline.plan(PlanInputs {
            context,
            data_parallel: engine.replicas,
            max_model_len: engine.max_model_len,
            max_running: engine.max_running.unwrap_or(u32::MAX),
            pp_max_micro_batch: engine.pp_max_micro_batch,
            labels: self.labels.clone(),
        });
        if let Some(spec) = engine.spec {
            // One stream with speculative decoding: each step verifies 1 + K tokens and emits
            // 1 + accepted on average.
            let mut shape = Roofline::decode_shape(1, context);
            shape.work.prefill_tokens = spec.tokens;
            let step_s = roofline.step_s(&shape);
            plan.spec_tokens_per_step = Some(spec.mean_tokens_per_step());
            plan.spec_single_stream_tok_s = Some(spec.mean_tokens_per_step() / step_s);
        }
        plan
    }
}

/// `--comm-from FILE` without allreduce records but with a host topology (srv-launch's
/// `server` record): the card's interconnect as the TP group's GPUs see it; `None` otherwise.
fn topology_comm(
    path: &str,
    tp: u32,
    tp_gpus: &[u32],
    card: &presets::Interconnect,
) -> anyhow::Result<Option<(presets::Interconnect, Comm)>> {
    let coll = presets::comm::coll_records_from(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
    if coll
        .iter()
        .any(|c| c.op == servbench::record::CollOp::Allreduce)
    {
        return Ok(None);
    }
    let Some((host, server_gpus)) = servbench::host::topo::host_from_records(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?
    else {
        return Ok(None);
    };
    let given = if !tp_gpus.is_empty() {
        tp_gpus.to_vec()
    } else if server_gpus.len() == tp as usize {
        server_gpus
    } else {
        Vec::new()
    };
    let group = servbench::host::topo::tp_group(&host, &given, tp)
        .map_err(|e| cli::usage(format!("--comm-from {path} --tp-gpus: {e}")))?;
    let (interconnect, across) = servbench::host::topo::interconnect_for(card, &host, &group);
    let list: Vec<String> = group.iter().map(u32::to_string).collect();
    let place = if across {
        "across sockets"
    } else {
        "one socket"
    };
    Ok(Some((
        interconnect,
        Comm::Topology {
            from: format!("{path} (GPUs {}, {place})", list.join(",")),
        },
    )))
}

/// `--comm-from FILE`: the allreduce curve collbench measured at `tp` ranks.
fn measured_comm(path: &str, tp: u32) -> anyhow::Result<Comm> {
    let coll = presets::comm::coll_records_from(path)
        .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
    let curve = MeasuredCurve::from_records(&coll, tp, true).ok_or_else(|| {
        let mut ranks: Vec<u32> = coll
            .iter()
            .filter(|c| c.op == servbench::record::CollOp::Allreduce)
            .map(|c| c.ranks)
            .collect();
        ranks.sort_unstable();
        ranks.dedup();
        let found = if ranks.is_empty() {
            "no allreduce records".to_string()
        } else {
            format!(
                "allreduce at {} rank(s) only",
                ranks
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        cli::usage(format!(
            "--comm-from {path}: {found}, and --tp {tp} needs allreduce measured at {tp} ranks (collbench -np {tp} --mode latency -b 1K -e 4M)"
        ))
    })?;
    if let Some(caveat) = curve.tcp_caveat() {
        cli::warn(format!("--comm-from {path}: {caveat}"));
    }
    Ok(Comm::Measured {
        curve,
        from: path.to_string(),
    })
}

/// `--gemm-from FILE`: the GEMM time per step collbench measured for this model at this TP.
/// Records of another model or TP are left out with one warning; none matching is an error.
fn measured_gemm(path: &str, dep: &Deployment, largest_step: u32) -> anyhow::Result<Gemm> {
    let steps = presets::gemm::gemm_step_records_from(path)
        .map_err(|e| cli::usage(format!("--gemm-from: {e}")))?;
    let (model, tp) = (dep.model.name.as_str(), dep.layout.tp);
    let curve = GemmCurve::from_records(&steps, model, tp).ok_or_else(|| {
        let mut found: Vec<String> = steps
            .iter()
            .map(|s| format!("{} at tp {}", s.model, s.tp))
            .collect();
        found.sort();
        found.dedup();
        let found = if found.is_empty() {
            "no gemm_step records".to_string()
        } else {
            format!("gemm_step records of {} only", found.join(", "))
        };
        cli::usage(format!(
            "--gemm-from {path}: {found}, and {model} at --tp {tp} needs its own (collbench gemm --model {model} --tp {tp} --batch 1,8,64)"
        ))
    })?;
    let others = steps
        .iter()
        .filter(|s| s.model != model || s.tp != tp)
        .count();
    if others > 0 {
        cli::warn(format!(
            "--gemm-from {path}: {others} gemm_step record(s) of another model or TP left out (only {model} at tp {tp} is read)"
        ));
    }
    if let Some(s) = steps
        .iter()
        .find(|s| s.model == model && s.tp == tp && s.hardware != dep.hw.name)
    {
        cli::warn(format!(
            "--gemm-from {path}: GEMMs measured on {} ({}), applied here to {}",
            s.device, s.hardware, dep.hw.name
        ));
    }
    let (lo, hi) = curve.range();
    if lo > 1 || hi < largest_step {
        let example = curve
            .extrapolation(if hi < largest_step { largest_step } else { 1 }, &dep.rates)
            .map_or(String::new(), |e| format!(" ({e})"));
        cli::warn(format!(
            "--gemm-from {path}: batches {lo}-{hi} measured, and steps of 1-{largest_step} tokens are timed: outside them a step's GEMM time is the nearest measured batch's scaled by the step's work, FLOPs over peak against bytes over bandwidth{example} (measure more: collbench gemm --batch 1,...,{largest_step})"
        ));
    }
    Ok(Gemm::Measured {
        curve,
        from: path.to_string(),
    })
}
