use super::*;

const VLLM: &str = "(APIServer pid=7) INFO 12-01 23:30:00 [loggers.py:200] Engine 000: Iteration(12): 1 context requests, 64 context tokens, 3 generation requests, 3 generation tokens, iteration elapsed time: 27.41 ms, CPU KV cache usage: 1.2%";
const FMT: LogFormat = LogFormat {
    decode_log_interval: 40,
};

fn step(line: &str) -> Step {
    match parse_step_line(line, &FMT).0 {
        StepLine::Step(s) => s,
        other => panic!("{other:?} for {line}"),
    }
}

/// The engines' own lines as the reference samples quote them (shared/tests/fixtures).
fn sample(name: &str) -> &'static str {
    match name {
        "vllm" => include_str!("../../tests/fixtures/engine-self-report/vllm_iteration_line.txt"),
        "sglang" => {
            include_str!("../../tests/fixtures/engine-self-report/sglang_mfu_and_decode_log.txt")
        }
        _ => unreachable!(),
    }
}

#[test]
fn vllms_iteration_line_reads_whatever_its_logger_prefix() {
    let want = Step {
        engine: Some(0),
        count: 1,
        ctx_requests: 1,
        ctx_tokens: 64,
        gen_requests: 3,
        gen_tokens: 3,
        result_wait_ms: Some(27.41),
        ..Step::default()
    };
    assert_eq!(step(VLLM), want);
    assert_eq!(step(VLLM.split_once("] ").unwrap().1), want);
    let dummy = "Engine 001: Iteration(3): 0 context requests, 0 context tokens, 0 generation requests, 0 generation tokens, iteration elapsed time: 0.00 ms (dummy), GPU KV cache usage: 0.0%";
    let d = step(dummy);
    assert!(d.dummy && d.engine == Some(1));
    assert_eq!(
        parse_step_line("INFO Avg prompt throughput: 1.0 tokens/s", &FMT).0,
        StepLine::Other
    );
    // Another engine's own marker is not vLLM's.
    assert_eq!(
        parse_step_line(&VLLM.replace(" Iteration(", " DraftIteration("), &FMT).0,
        StepLine::Other
    );
}

#[test]
fn the_verbatim_vllm_sample_line_reads_as_vllm_means_it() {
    let line = sample("vllm")
        .lines()
        .find(|l| l.starts_with("(APIServer"))
        .expect("the sample's example line");
    let s = step(line);
    assert_eq!(s.engine, Some(0));
    assert_eq!((s.ctx_requests, s.gen_requests, s.gen_tokens), (0, 1, 1));
    // The elapsed time is the engine core's wait for the result: never the step's length.
    assert_eq!((s.result_wait_ms, s.length_ms), (Some(4.9), None));
}

#[test]
fn an_older_vllm_line_without_the_engine_prefix_is_read() {
    let old = "INFO 05-01 12:00:00 [core.py:215] Iteration(7): 0 context requests, 0 context tokens, 2 generation requests, 2 generation tokens, iteration elapsed time: 12.50 ms";
    let s = step(old);
    assert_eq!(
        (s.engine, s.gen_requests, s.result_wait_ms),
        (None, 2, Some(12.5))
    );
}

#[test]
fn a_step_line_with_figures_that_are_not_counts_or_times_is_malformed_not_fatal() {
    for (bad, why) in [
        (VLLM.replace("27.41 ms", "NaN ms"), "elapsed time `NaN`"),
        (VLLM.replace("27.41 ms", "-1.00 ms"), "elapsed time `-1.00`"),
        (
            VLLM.replace("64 context tokens", "x context tokens"),
            "`x` is not a count of context tokens",
        ),
        (
            VLLM.replace(", iteration elapsed", "; iteration elapsed"),
            "no `N generation tokens`",
        ),
    ] {
        match parse_step_line(&bad, &FMT).0 {
            StepLine::Malformed(w) => assert!(w.contains(why), "{w} for {bad}"),
            other => panic!("{other:?} for {bad}"),
        }
    }
    let text = format!("{VLLM}\n{}\n", VLLM.replace("27.41", "inf"));
    let w = read_window(&text, 1.0, 1.0, &FMT).unwrap();
    assert_eq!((w.steps.steps, w.steps.malformed_lines), (1, 1));
    assert!(w.first_malformed.unwrap().contains("inf"));
}

#[test]
fn sl_count_a_step_claiming_four_billion_tokens_is_malformed() {
    let huge = VLLM.replace("3 generation tokens", "4294967295 generation tokens");
    match parse_step_line(&huge, &FMT).0 {
        StepLine::Malformed(w) => {
            assert!(w.contains("more than one step holds"), "{w}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sl_hugeline_an_endless_figure_is_quoted_short_in_the_note() {
    let figure = "9".repeat(8 << 20);
    let huge = VLLM.replace("27.41 ms", &format!("{figure} ms"));
    let StepLine::Malformed(w) = parse_step_line(&huge, &FMT).0 else {
        panic!("not malformed");
    };
    assert!(w.len() < 200, "{} bytes", w.len());
}

#[test]
fn sl_dp2_two_engines_in_one_log_are_counted_apart() {
    let mut text = String::new();
    for i in 0..10 {
        for e in 0..2 {
            text.push_str(
                &VLLM
                    .replace("Engine 000", &format!("Engine 00{e}"))
                    .replace("Iteration(12)", &format!("Iteration({i})")),
            );
            text.push('\n');
        }
    }
    let w = read_window(&text, 1.0, 0.5, &FMT).unwrap().steps;
    assert_eq!((w.engines, w.steps, w.steps_per_s), (2, 20, 40.0));
    let each: Vec<(u32, u64, f64)> = w
        .per_engine
        .iter()
        .map(|e| (e.engine, e.steps, e.steps_per_s))
        .collect();
    assert_eq!(each, [(0, 10, 20.0), (1, 10, 20.0)]);
    // Each engine's step: half a second over its ten steps, not over the twenty of both.
    assert_eq!(w.step_ms_mean, 50.0);
}

#[test]
fn sl_hour_logged_times_that_overfill_the_window_are_left_out_and_said() {
    let hour = VLLM.replace("27.41 ms", "3600000.00 ms");
    let text = format!("{hour}\n").repeat(489);
    let w = read_window(&text, 4.0, 4.0, &FMT).unwrap();
    assert_eq!(w.steps.result_wait_ms, None);
    assert_eq!(w.steps.steps, 489);
    assert!(
        w.implausible[0].contains("iteration elapsed times add up to"),
        "{:?}",
        w.implausible
    );
}

#[test]
fn a_clock_with_fractions_times_each_step_and_whole_seconds_do_not() {
    assert_eq!(line_clock("INFO 12-01 23:30:00 [loggers.py:200]"), None);
    assert_eq!(line_clock("2026-12-01 00:00:01.250 INFO"), Some(1.25));
    assert_eq!(line_clock("[00:01:00,5]"), Some(60.5));
    let body = VLLM.split_once("] ").unwrap().1;
    let at = |t: &str| format!("INFO 12-01 10:00:{t} [loggers.py:200] {body}");
    // Steps 5 ms apart, then the engine idles 2 s: the idle gap is no step.
    let text = [at("00.000"), at("00.005"), at("00.010"), at("02.010")].join("\n");
    let w = read_window(&text, 3.0, 3.0, &FMT).unwrap().steps;
    assert_eq!(w.steps, 4);
    assert_eq!((w.step_ms_p50, w.step_ms_max), (Some(5.0), Some(5.0)));
}

#[test]
fn sglangs_decode_and_prefill_lines_are_its_step_log() {
    // The format the sample quotes (its older decode form; the MFU tail is optional).
    assert!(sample("sglang").contains("Decode batch. #running-req:"));
    let decode = "[2026-05-15 08:40:32 TP0] Decode batch. #running-req: 4, #token: 300, token usage: 0.01, cuda graph: True, gen throughput (token/s): 200.00, #queue-req: 0, est. decode TFLOPS/s (per GPU): 1.00, est. read BW (GB/s per GPU): 2.00";
    let s = step(decode);
    assert_eq!((s.engine, s.count, s.gen_requests), (None, 40, 4));
    assert_eq!(s.length_ms, Some(20.0));
    let prefill = "[2026-05-15 08:40:32 DP1 TP0] Prefill batch. #new-seq: 2, #new-token: 128, #cached-token: 0, token usage: 0.00, #running-req: 3, #queue-req: 0";
    let p = step(prefill);
    assert_eq!(
        (p.engine, p.count, p.ctx_requests, p.ctx_tokens),
        (Some(1), 1, 2, 128)
    );
    // TP rank 1's copy of rank 0's line is not another step.
    assert_eq!(
        parse_step_line(&decode.replace("TP0]", "TP1]"), &FMT).0,
        StepLine::Other
    );
    let argv: Vec<String> = ["python3", "--decode-log-interval", "1"]
        .map(String::from)
        .to_vec();
    assert_eq!(sglang::decode_log_interval(&argv), 1);
    assert_eq!(sglang::decode_log_interval(&[]), 40);
}

#[test]
fn tensorrt_llms_iteration_log_is_its_step_log() {
    let line = "[TRT-LLM] [I] iter = 12, global_rank = 0, rank = 0, num_scheduled_requests = 4, kv_cache_util = 0.012, currank_total_requests = 0/4, host_step_time = 7.41ms, prev_device_step_time = 7.2ms, timestamp = 2026-12-02 10:00:00, states = {'num_ctx_requests': 1, 'num_ctx_tokens': 64, 'num_generation_tokens': 3}";
    let s = step(line);
    assert_eq!(
        (s.ctx_requests, s.ctx_tokens, s.gen_requests, s.gen_tokens),
        (1, 64, 3, 3)
    );
    assert_eq!((s.length_ms, s.host_step_ms), (Some(7.2), Some(7.41)));
    let first = line.replace("7.2ms", "N/A");
    assert_eq!(step(&first).length_ms, None);
    let older = "iter = 3, global_rank = 0, rank = 0, currank_total_requests = 0/1, host_step_time = 5.0ms, prev_device_step_time = 4.5ms, timestamp = 2026-12-02 10:00:00, num_scheduled_requests: 1, states = {'num_ctx_requests': 0, 'num_ctx_tokens': 0, 'num_generation_tokens': 1}";
    assert_eq!(step(older).gen_requests, 1);
}

#[test]
fn tensorrt_llms_iteration_stats_are_its_steps_and_a_hostile_one_is_named() {
    // The shape of trtllm-serve's docs' example, with the batch stats TRT-LLM's own test asserts.
    let v = serde_json::json!({"gpuMemUsage": 76665782272u64, "iter": 154,
        "iterLatencyMS": 7.00688362121582, "gpuForwardTimeMS": 6.5,
        "kvCacheStats": {"maxNumBlocks": 101256, "freeNumBlocks": 101253, "usedNumBlocks": 3,
            "tokensPerBlock": 32, "cacheHitRate": 0.00128},
        "inflightBatchingStats": {"numContextRequests": 1, "numCtxTokens": 64,
            "numGenRequests": 3, "numPausedRequests": 0, "numScheduledRequests": 4,
            "avgNumDecodedTokensPerIter": 1.0},
        "numActiveRequests": 4});
    let s = trtllm::iteration_stats(&v).unwrap();
    assert_eq!(
        (s.ctx_requests, s.ctx_tokens, s.gen_requests, s.gen_tokens),
        (1, 64, 3, 3)
    );
    assert_eq!(
        (s.length_ms, s.host_step_ms),
        (Some(6.5), Some(7.00688362121582))
    );
    let older = serde_json::json!({"iterLatencyMS": 5.0, "inflightBatchingStats":
        {"numContextRequests": 0, "numCtxTokens": 0, "numGenRequests": 8}});
    assert_eq!(trtllm::iteration_stats(&older).unwrap().length_ms, None);
    for (bad, why) in [
        (
            serde_json::json!({"iter": 1}),
            "no `inflightBatchingStats` object",
        ),
        (
            serde_json::json!({"inflightBatchingStats": {"numContextRequests": -1,
                "numCtxTokens": 0, "numGenRequests": 1}}),
            "`-1` is not a count of numContextRequests",
        ),
        (
            serde_json::json!({"iterLatencyMS": "NaN", "inflightBatchingStats":
                {"numContextRequests": 0, "numCtxTokens": 0, "numGenRequests": 1}}),
            "iterLatencyMS `\"NaN\"` is not a time of 0 to 3600000 ms",
        ),
    ] {
        assert_eq!(trtllm::iteration_stats(&bad).unwrap_err(), why);
    }
    // A point's list: the good ones are its steps, the bad one counted.
    let list = vec![v.clone(), older, serde_json::json!([])];
    let w = trtllm::stats_window(&list, 1.0, 0.5).unwrap();
    assert_eq!((w.steps.steps, w.steps.malformed_lines), (2, 1));
    assert_eq!(w.steps.steps_per_s, 4.0);
    assert!(trtllm::stats_window(&[], 1.0, 0.5).is_none());
    let argv = ["trtllm-serve", "m", "--extra_llm_api_options=o.yaml"].map(String::from);
    assert!(trtllm::self_reports(&argv));
    assert!(!trtllm::self_reports(&argv[..2]));
}

#[test]
fn an_async_engines_logged_wait_is_kept_as_the_wait_and_the_step_is_its_rate() {
    // vLLM with async scheduling: 200 steps in one busy second, each logged at 0.03 ms.
    let line = VLLM.replace("27.41 ms", "0.03 ms");
    let text = format!("{line}\n").repeat(200);
    let w = read_window(&text, 1.2, 1.0, &FMT).unwrap();
    let e = w.steps;
    assert!(w.implausible.is_empty(), "{:?}", w.implausible);
    assert!((e.step_ms_mean - 5.0).abs() <= 0.5, "{e:?}");
    assert_eq!(e.steps_per_s, 200.0);
    let wait = e.result_wait_ms.expect("the wait, under its own name");
    assert!((wait.mean - 0.03).abs() < 1e-12, "{wait:?}");
    assert!(e.step_from_window());
    let (step, _) = e.decode_step_at(3).expect("a decode step");
    assert!((step - 5.0).abs() <= 0.5, "{step}");
}

#[test]
fn a_synchronous_engines_waits_that_fill_its_busy_time_are_its_steps() {
    // 40 steps logged at 24 ms in one busy second: the engine waited out each step (sync
    // scheduling), so each wait is its step's own length.
    let line = VLLM.replace("27.41 ms", "24.00 ms");
    let text = format!("{line}\n").repeat(40);
    let e = read_window(&text, 1.0, 1.0, &FMT).unwrap().steps;
    assert_eq!((e.step_ms_p50, e.step_ms_max), (Some(24.0), Some(24.0)));
    assert_eq!(e.step_ms_mean, 25.0);
    assert!(!e.step_from_window());
    assert_eq!(e.result_wait_ms.unwrap().p50, 24.0);
}

#[test]
fn sglangs_time_stats_give_the_rid_and_its_queue_and_forward() {
    use super::sglang::time_stats;
    let line = "[2026-12-05 01:08:58 TP0] Req Time Stats(rid=5b1f0c2a9d3e4f60a7b8c9d0e1f2a3b4, input len=38, output len=484, type=unified): queue_duration=1.50ms, forward_duration=2345.67ms, start_time=12199.941";
    let (rid, t) = time_stats(line).unwrap().unwrap();
    assert_eq!(rid, "5b1f0c2a9d3e4f60a7b8c9d0e1f2a3b4");
    assert_eq!((t.queue_ms, t.forward_ms), (Some(1.5), Some(2345.67)));
    assert_eq!(t.source, "sglang");
    // Other ranks copy rank 0's; other lines are none of it.
    assert!(time_stats(&line.replace("TP0", "TP1")).is_none());
    assert!(time_stats("[2026] Decode batch, #running-req: 1").is_none());
    // A forward of 55 years (a clock that was never set) is not a time.
    let bad = line.replace("2345.67ms", "1759654443392.38ms");
    assert!(
        time_stats(&bad)
            .unwrap()
            .unwrap_err()
            .contains("forward_duration")
    );
}

#[test]
fn srv_sim_speaking_sglang_logs_its_steps_at_sglangs_interval() {
    use super::logs_steps;
    use crate::record::Engine;
    let argv = |a: &str| a.split(' ').map(str::to_string).collect::<Vec<_>>();
    for a in [
        "srv-sim --self-report-as sglang",
        "srv-sim --self-report-as=sglang-0.5.10",
    ] {
        let f = logs_steps(&Engine::Sim, &argv(a)).expect(a);
        assert_eq!(f.decode_log_interval, 40, "{a}");
    }
    let f = logs_steps(
        &Engine::Sim,
        &argv("srv-sim --self-report-as sglang --decode-log-interval 5"),
    );
    assert_eq!(f.unwrap().decode_log_interval, 5);
    // The clean twins: srv-sim speaking vLLM's or TensorRT-LLM's without their flags logs none.
    assert!(logs_steps(&Engine::Sim, &argv("srv-sim --self-report-as vllm")).is_none());
    assert!(logs_steps(&Engine::Sim, &argv("srv-sim")).is_none());
}
