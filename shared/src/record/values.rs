//! The enum-valued fields of the records, typed: each is a snake_case string on the wire, as it
//! always was, and a value this build does not know (a newer tool's, a hand-written record's)
//! is kept as written in `Other`, so it still parses and passes through unchanged.
//!
//! Code compares variants (`c.op == CollOp::Allreduce`); `as_str` is the wire spelling.
//! Comparing with a `&str` also works, for tests and one-off readers.

/// Declares a wire enum: its variants with their spelling, plus `Other(String)`; `as_str`,
/// `parse` (never fails), `Display`, `From<&str>`/`From<String>`, serde as the string, and
/// `== "spelling"`. Extra spellings after `|` are read as the variant (old records) and never
/// written.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident {
        $( $(#[$vmeta:meta])* $variant:ident = $wire:literal $(| $alias:literal)* ),+ $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this build does not know, kept as written.
            Other(String),
        }

        impl $name {
            /// Every known value, in declaration order.
            pub const KNOWN: &[$name] = &[$($name::$variant),+];

            /// The spelling on the wire.
            pub fn as_str(&self) -> &str {
                match self {
                    $( $name::$variant => $wire, )+
                    $name::Other(s) => s,
                }
            }

            /// The value `s` spells (`Other` when no known one does).
            pub fn parse(s: &str) -> $name {
                match s {
                    $( $wire $(| $alias)* => $name::$variant, )+
                    other => $name::Other(other.to_string()),
                }
            }
        }

        // Equal, hashed and ordered by the spelling, as the strings were: tables sort the same.
        impl PartialEq for $name {
            fn eq(&self, other: &$name) -> bool {
                self.as_str() == other.as_str()
            }
        }

        impl Eq for $name {}

        impl std::hash::Hash for $name {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.as_str().hash(h)
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &$name) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $name {
            fn cmp(&self, other: &$name) -> std::cmp::Ordering {
                self.as_str().cmp(other.as_str())
            }
        }

        // `pad`, not `write_str`: a table's `{:>6}` lines the value up under its header.
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                $name::parse(s)
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> $name {
                $name::parse(&s)
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Ok($name::parse(&s))
            }
        }
    };
}

wire_enum! {
    /// An inference engine: what srv-launch started (`server.engine`, spelled as its preset) and
    /// whose metric names a server's `/metrics` used (`summary.server.engine`, written in the
    /// vocabulary's spelling, [`Engine::metrics_name`]); its metric vocabulary is
    /// `telemetry::vocab` (`Engine::ALL`, `prefix`, `vocab::rows`). Both spellings of llama.cpp
    /// (`llama-cpp`, `llamacpp`) read as one engine.
    Engine {
        Vllm = "vllm",
        Sglang = "sglang",
        LlamaCpp = "llama-cpp" | "llamacpp",
        Tgi = "tgi",
        Trtllm = "trtllm",
        /// Triton Inference Server with the TensorRT-LLM backend.
        Triton = "triton",
        /// NVIDIA Dynamo's HTTP frontend.
        Dynamo = "dynamo",
        /// srv-sim (it speaks vLLM's or SGLang's metric names).
        Sim = "sim",
        /// `srv-launch --cmd`: a command of the user's.
        Cmd = "cmd",
    }
}

/// Not said (empty), as an empty `spec` had before it was typed.
impl Default for SpecFrom {
    fn default() -> SpecFrom {
        SpecFrom::Other(String::new())
    }
}

/// Not said (empty): a default [`super::ServerTiming`] names no source.
impl Default for TimingSource {
    fn default() -> TimingSource {
        TimingSource::Other(String::new())
    }
}

/// No engine named (empty), as an empty `summary.server` had before it was typed.
impl Default for Engine {
    fn default() -> Engine {
        Engine::Other(String::new())
    }
}

/// Serde for a field that holds whose metric names a server used: written in the vocabulary's
/// spelling (`llamacpp`), read in either.
pub mod metrics_engine {
    use super::Engine;

    pub fn serialize<S: serde::Serializer>(e: &Engine, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(e.metrics_name())
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Engine, D::Error> {
        serde::Deserialize::deserialize(d)
    }
}

wire_enum! {
    /// Where a point's speculative-decoding figures came from (`summary.server.spec.from`).
    SpecFrom {
        /// Counter deltas over the point: exact.
        Counters = "counters",
        /// Windowed gauges (SGLang's, TensorRT-LLM's), averaged over the point's samples.
        Gauges = "gauges",
    }
}

wire_enum! {
    /// A collective (`coll.op`, `coll_run.op`).
    CollOp {
        Allreduce = "allreduce",
        Allgather = "allgather",
        ReduceScatter = "reduce_scatter",
        Broadcast = "broadcast",
        Alltoall = "alltoall",
        Sendrecv = "sendrecv",
    }
}

wire_enum! {
    /// What moved a collective's bytes (`coll`, `coll_run`, `decode`).
    CollBackend {
        Tcp = "tcp",
        Nccl = "nccl",
    }
}

wire_enum! {
    /// The algorithm that ran (`coll.algo`, `decode.algo`); `nccl` where NCCL chose, `none`
    /// where nothing ran (`decode` at TP1).
    CollAlgo {
        Auto = "auto",
        Ring = "ring",
        RecursiveDoubling = "recursive_doubling",
        Tree = "tree",
        Direct = "direct",
        Pairwise = "pairwise",
        Nccl = "nccl",
        /// `decode` at TP1: a step runs no allreduce, and none was measured.
        NoAllreduce = "none",
    }
}

wire_enum! {
    /// Element type of a collective (`coll.dtype`, `decode.dtype`).
    CollDtype {
        F32 = "f32",
        F16 = "f16",
        Bf16 = "bf16",
    }
}

wire_enum! {
    /// The reduction of a collective (`coll.redop`).
    RedOp {
        Sum = "sum",
        Max = "max",
        Min = "min",
    }
}

wire_enum! {
    /// How a collective's time was taken (`coll.mode`).
    CollMode {
        /// Back-to-back ops.
        Pipelined = "pipelined",
        /// Waiting after each op.
        Latency = "latency",
    }
}

wire_enum! {
    /// What a `loadgen --find-max` varied (`search.var`).
    SearchVar {
        /// Open loop: requests per second.
        RateRps = "rate_rps",
        /// Closed loop: requests in flight.
        Concurrency = "concurrency",
    }
}

wire_enum! {
    /// Why a `loadgen --find-max` ended (`search.stopped_by`).
    SearchStop {
        Converged = "converged",
        /// The highest load allowed still passed.
        Limit = "limit",
        /// The lowest load tried failed.
        NonePassed = "none_passed",
        Interrupted = "interrupted",
        ServerDown = "server_down",
        /// A loadgen rank of several failed.
        RankFailed = "rank_failed",
    }
}

wire_enum! {
    /// Which rule ended a `loadgen --ramp` (`ramp.stopped_by`).
    RampStop {
        ErrorRate = "error_rate",
        Saturated = "saturated",
        Slo = "slo",
        /// The cap was reached.
        MaxConcurrency = "max_concurrency",
        Interrupted = "interrupted",
        ServerDown = "server_down",
        /// A loadgen rank of several failed.
        RankFailed = "rank_failed",
    }
}

wire_enum! {
    /// The OpenAI API a point's requests used (`summary.api`).
    Api {
        Completions = "completions",
        Chat = "chat",
    }
}

wire_enum! {
    /// How a `gemm` record's `time_us` was taken (`gemm.timing`).
    GemmTiming {
        /// Each call timed alone: clock reads around it (the CPU, where they cost nothing
        /// beside a GEMM), or an event after every call (GPU records of older collbench: the
        /// event added ~2 us to a 12-18 us kernel).
        PerCall = "per_call",
        /// `calls_per_sample` calls launched back to back between two events, their mean: no
        /// per-call overhead, as a decode step runs them.
        BackToBack = "back_to_back",
    }
}

impl GemmTiming {
    /// What a record without the field was timed with (collbench before the field).
    pub fn older() -> GemmTiming {
        GemmTiming::PerCall
    }
}

wire_enum! {
    /// Where GEMMs ran (`gemm`, `gemm_step`, `device_limits` `backend`).
    GemmBackend {
        /// This machine's cores (figures labelled as CPU).
        Cpu = "cpu",
        /// An NVIDIA GPU through cuBLAS.
        Cublas = "cublas",
        /// cuBLASLt (FP8 GEMMs).
        Cublaslt = "cublaslt",
    }
}

wire_enum! {
    /// Element type of GEMMs (`gemm.dtype`, `gemm_step.dtype`; a card's `card_dtype` may be
    /// another, kept as written).
    GemmDtype {
        F32 = "f32",
        Bf16 = "bf16",
        /// FP8 E4M3 inputs, BF16 output.
        Fp8 = "fp8",
    }
}

wire_enum! {
    /// One GEMM of a decode step (`gemm.name`): the attention projections, the dense MLP, a MoE
    /// layer's router, routed and shared experts, or a `--shape` of the user's.
    GemmName {
        Qkv = "qkv",
        AttnOut = "attn_out",
        GateUp = "gate_up",
        Down = "down",
        Router = "router",
        ExpertGateUp = "expert_gate_up",
        ExpertDown = "expert_down",
        SharedGateUp = "shared_gate_up",
        SharedDown = "shared_down",
        /// `collbench gemm --shape MxNxK`.
        Custom = "custom",
    }
}

wire_enum! {
    /// A phase of a server's startup, as its engine's log reports it (`server.startup.phases`;
    /// the log lines that mark each, per engine, are `servbench::startup`).
    StartupPhaseName {
        /// The engine began loading the model.
        LoadStart = "load_start",
        /// The weights are loaded.
        Weights = "weights",
        /// The model is loaded and initialised (vLLM's `Model loading took`, on GPUs).
        ModelLoad = "model_load",
        /// torch.compile (or the CPU build's compile warm-up) finished.
        Compile = "compile",
        /// CUDA graphs (or SGLang's CPU graphs) are captured.
        GraphCapture = "graph_capture",
        /// The KV cache is sized and allocated.
        KvCache = "kv_cache",
        /// vLLM's engine core is initialised (profile, KV cache, warm-up).
        EngineInit = "engine_init",
        /// The HTTP server is listening (it may not be ready yet).
        Listening = "listening",
        /// The engine says it is ready.
        Ready = "ready",
    }
}

wire_enum! {
    /// The allreduce algorithm a `sim_plan` costs decode's allreduces by (`sim_plan.allreduce_algo`):
    /// what NCCL would pick, `measured` (read off `--comm-from`'s curve), or `none` without TP.
    AllreduceAlgo {
        RingLl = "ring/LL",
        RingLl128 = "ring/LL128",
        RingSimple = "ring/Simple",
        TreeLl = "tree/LL",
        TreeSimple = "tree/Simple",
        Nvls = "nvls",
        Measured = "measured",
        /// No tensor parallelism: no allreduce.
        NoAllreduce = "none",
    }
}

wire_enum! {
    /// How a model's weights are stored (one part of `sim_plan.weight_format`, [`WeightFormats`]).
    WeightFormatName {
        Bf16 = "bf16",
        Fp8 = "fp8",
        Nvfp4 = "nvfp4",
        Mxfp4 = "mxfp4",
    }
}

wire_enum! {
    /// Whose per-request timing an answer carried (`request.server_timing.source`,
    /// `summary.ttft_split.source`).
    TimingSource {
        /// vLLM's `metrics` object (`--enable-per-request-metrics`; srv-sim's the same).
        Vllm = "vllm",
        /// llama-server's `timings` object.
        Llamacpp = "llamacpp",
        /// SGLang's per-request time stats in its log (`--enable-request-time-stats-logging`).
        Sglang = "sglang",
        /// TensorRT-LLM's `GET /perf_metrics` (`return_perf_metrics` in its LLM-API options).
        Trtllm = "trtllm",
    }
}

wire_enum! {
    /// Whose log format an engine's step lines were read in (`summary.engine_steps.source`).
    StepLogFormat {
        /// vLLM's iteration details (`--enable-logging-iteration-details`; srv-sim's the same).
        Vllm = "vllm",
        /// SGLang's `Decode batch` / `Prefill batch` lines.
        Sglang = "sglang",
        /// TensorRT-LLM's iteration log (`print_iter_log`).
        Trtllm = "trtllm",
    }
}

/// Not said (empty): a default [`super::EngineSteps`] names no log format.
impl Default for StepLogFormat {
    fn default() -> StepLogFormat {
        StepLogFormat::Other(String::new())
    }
}

wire_enum! {
    /// Transparent huge pages mode (`host.thp`: the bracketed word of
    /// /sys/kernel/mm/transparent_hugepage/enabled).
    ThpMode {
        Always = "always",
        Madvise = "madvise",
        Never = "never",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wire_value_reads_and_writes_as_its_spelling_and_an_unknown_one_is_kept() {
        for op in CollOp::KNOWN {
            let json = serde_json::to_string(op).unwrap();
            assert_eq!(json, format!("\"{}\"", op.as_str()));
            assert_eq!(&serde_json::from_str::<CollOp>(&json).unwrap(), op);
        }
        let newer: CollOp = serde_json::from_str("\"reduce\"").unwrap();
        assert_eq!(newer, CollOp::Other("reduce".into()));
        assert_eq!(serde_json::to_string(&newer).unwrap(), "\"reduce\"");
        assert_eq!(CollOp::from("allreduce"), CollOp::Allreduce);
        assert!(CollMode::Latency == "latency" && SearchStop::NonePassed == "none_passed");
        // Ordered by spelling, as the strings were (tables keep their order).
        assert!(CollOp::Sendrecv > CollOp::Alltoall && CollOp::Allgather < CollOp::Allreduce);
        assert_eq!(CollOp::Other("allreduce".into()), CollOp::Allreduce);
    }

    #[test]
    fn a_wire_value_is_padded_to_its_table_column_like_a_string() {
        assert_eq!(format!("[{:>6}]", CollDtype::F32), "[   f32]");
        assert_eq!(format!("[{:<6}]", CollBackend::Nccl), "[nccl  ]");
        assert_eq!(
            format!("[{}]", CollAlgo::Other("tree/LL".into())),
            "[tree/LL]"
        );
    }

    #[test]
    fn both_spellings_of_llama_cpp_read_as_one_engine_written_as_each_field_wrote_it() {
        assert_eq!(Engine::parse("llamacpp"), Engine::LlamaCpp);
        assert_eq!(Engine::parse("llama-cpp"), Engine::LlamaCpp);
        assert_eq!(Engine::LlamaCpp.as_str(), "llama-cpp");
        assert_eq!(Engine::LlamaCpp.metrics_name(), "llamacpp");
        assert_eq!(Engine::Vllm.metrics_name(), "vllm");
    }

    #[test]
    fn sim_plan_and_timing_values_keep_their_spellings_on_the_wire() {
        assert_eq!(AllreduceAlgo::parse("ring/LL128"), AllreduceAlgo::RingLl128);
        assert_eq!(AllreduceAlgo::NoAllreduce.as_str(), "none");
        assert_eq!(TimingSource::parse("llamacpp"), TimingSource::Llamacpp);
        assert_eq!(StepLogFormat::parse("vllm"), StepLogFormat::Vllm);
        assert_eq!(GemmName::parse("expert_gate_up"), GemmName::ExpertGateUp);
        assert_eq!(ThpMode::parse("madvise"), ThpMode::Madvise);
        assert_eq!(
            WeightFormatName::parse("fp4"),
            WeightFormatName::Other("fp4".into())
        );
    }
}

wire_enum! {
    /// Which part of a step a `step_cell` measured (`step_cell.phase`).
    StepPhase {
        /// B requests decoding at context L: one decode step.
        Decode = "decode",
        /// One request's prompt of L tokens: its whole prefill (every chunk).
        Prefill = "prefill",
    }
}

wire_enum! {
    /// Where a `step_cell`'s time came from (`step_cell.source`).
    StepSource {
        /// The engine's own step log (`summary.engine_steps`): decode-only steps at the full
        /// batch, or the prefill steps of each request.
        EngineSteps = "engine_steps",
        /// The client's inter-token time (TPOT): decode steps with the others' prefills in them.
        ClientTpot = "client_tpot",
        /// The client's time to first token: the prefill with the HTTP round trip in it.
        ClientTtft = "client_ttft",
    }
}
