//! Each engine's `/metrics` in the shape its own code writes it (names, labels and types from
//! the metric definitions named in vocab.rs), read into our figures.

use super::prom::parse;
use super::vocab::{Engine, Figure};
use super::window::Window;
use crate::record::ServerStats;

fn window(engine: Engine, pages: &[String]) -> ServerStats {
    let read = |t: &String| {
        let x = parse(t).unwrap();
        assert_eq!(x.engine().as_ref(), Some(&engine), "{t}");
        x.read(engine.clone())
    };
    let mut w = Window::start(engine.clone(), read(&pages[0]));
    for p in &pages[1..pages.len() - 1] {
        w.sample(read(p));
    }
    w.finish(Some(read(&pages[pages.len() - 1])))
}

/// SGLang's scheduler gauges as `--enable-metrics-for-all-schedulers` writes them: one sample
/// per TP rank, the same batch in each (and, with DP attention, one set per DP rank).
fn sglang_schedulers(tp: u32, dp: &[(u32, u32)]) -> String {
    let mut s = String::from(
        "# HELP sglang:num_running_reqs The number of running requests.\n\
         # TYPE sglang:num_running_reqs gauge\n",
    );
    for &(dp_rank, running) in dp {
        for tp_rank in 0..tp {
            s.push_str(&format!(
                "sglang:num_running_reqs{{dp_rank=\"{dp_rank}\",engine_type=\"unified\",model_name=\"m\",pp_rank=\"0\",tp_rank=\"{tp_rank}\"}} {running}.0\n"
            ));
        }
    }
    s.push_str("# TYPE sglang:token_usage gauge\n");
    for &(dp_rank, running) in dp {
        for tp_rank in 0..tp {
            s.push_str(&format!(
                "sglang:token_usage{{dp_rank=\"{dp_rank}\",engine_type=\"unified\",model_name=\"m\",pp_rank=\"0\",tp_rank=\"{tp_rank}\"}} {}\n",
                f64::from(running) / 10.0
            ));
        }
    }
    s
}

#[test]
fn sglang_tp_ranks_export_one_batch_state_not_a_sum() {
    let x = parse(&sglang_schedulers(4, &[(0, 6)])).unwrap();
    let r = x.read(Engine::Sglang);
    assert_eq!(
        r.get(Figure::Running),
        Some(6.0),
        "TP=4 with 6 running reads 6, not 24"
    );
    assert_eq!(r.get(Figure::KvUsage), Some(0.6));
    // DP ranks are separate batches: their running requests add up, their usage averages.
    let r = parse(&sglang_schedulers(2, &[(0, 6), (1, 2)]))
        .unwrap()
        .read(Engine::Sglang);
    assert_eq!(r.get(Figure::Running), Some(8.0));
    assert!((r.get(Figure::KvUsage).unwrap() - 0.4).abs() < 1e-12);
    // The clean twin: the default (TP rank 0 alone) reads as before.
    let r = parse(&sglang_schedulers(1, &[(0, 6)]))
        .unwrap()
        .read(Engine::Sglang);
    assert_eq!(r.get(Figure::Running), Some(6.0));
}

/// SGLang's `--enable-mfu-metrics` counters: one series per scheduler (TP rank, and DP rank),
/// each the work of its own GPU, under the names SGLang's own metrics test asserts.
fn sglang_mfu(ranks: &[(u32, u32, f64)]) -> String {
    let mut s = String::from("# TYPE sglang:estimated_flops_per_gpu_total counter\n");
    for &(dp_rank, tp_rank, flops) in ranks {
        s.push_str(&format!(
            "sglang:estimated_flops_per_gpu_total{{dp_rank=\"{dp_rank}\",engine_type=\"unified\",model_name=\"m\",pp_rank=\"0\",tp_rank=\"{tp_rank}\"}} {flops:?}\n"
        ));
    }
    s.push_str(
        "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank=\"0\"} 1.0\n",
    );
    s
}

#[test]
fn sglang_flop_counters_are_per_gpu_not_summed_over_ranks() {
    let sample =
        include_str!("../../tests/fixtures/engine-self-report/sglang_mfu_and_decode_log.txt");
    assert!(sample.contains("\"sglang:estimated_flops_per_gpu_total\","));
    let start = parse(&sglang_mfu(&[(0, 0, 1e12), (0, 1, 1e12)])).unwrap();
    let end = parse(&sglang_mfu(&[(0, 0, 3e12), (0, 1, 3e12)])).unwrap();
    let w = Window::start(Engine::Sglang, start.read(Engine::Sglang));
    let s = w.finish(Some(end.read(Engine::Sglang)));
    assert_eq!(
        s.est_flops_per_gpu,
        Some(2e12),
        "TP=2: each GPU's 2e12, not 4e12"
    );
    // Two DP engines of two ranks, one busier: the mean GPU's work.
    let r = parse(&sglang_mfu(&[
        (0, 0, 4e12),
        (0, 1, 4e12),
        (1, 0, 2e12),
        (1, 1, 2e12),
    ]))
    .unwrap()
    .read(Engine::Sglang);
    assert_eq!(r.get(Figure::EstFlops), Some(3e12));
}

/// Lines in dcgm-exporter's MIG shape (NVIDIA/dcgm-exporter issue #544): each GPU instance a
/// sample of its own under the same `gpu` label, told apart by `GPU_I_ID`.
const DCGM_MIG: &str = "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n\
# TYPE DCGM_FI_DEV_FB_USED gauge\n\
DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"7\",Hostname=\"h\"} 12\n\
DCGM_FI_DEV_FB_USED{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"8\",Hostname=\"h\"} 12\n\
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.\n\
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n\
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"7\",Hostname=\"h\"} 0.5\n\
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"8\",Hostname=\"h\"} 0.25\n\
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).\n\
# TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"7\",Hostname=\"h\"} 90.5\n\
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-0f2a\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-40GB\",GPU_I_PROFILE=\"1g.5gb\",GPU_I_ID=\"8\",Hostname=\"h\"} 90.5\n";

#[test]
fn dcgm_mig_instances_are_read_apart_with_their_engine_activity() {
    let gpus = parse(DCGM_MIG).unwrap().dcgm_gpus();
    assert_eq!(
        gpus.len(),
        2,
        "two instances, not one overwritten: {gpus:?}"
    );
    for (g, (id, util)) in gpus.iter().zip([(7, 50.0), (8, 25.0)]) {
        assert_eq!((g.index, g.mig_instance), (0, Some(id)));
        assert_eq!(g.mem_used_mib, Some(12.0));
        assert_eq!(
            g.util_pct,
            Some(util),
            "GR_ENGINE_ACTIVE where GPU_UTIL is unsupported"
        );
        assert_eq!(g.power_w, Some(90.5), "the whole GPU's, on each instance");
    }
    // The clean twin: a GPU without MIG keeps its own utilization and no instance.
    let whole = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\"} 87\n\
        # TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge\n\
        DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\"} 0.1\n";
    let gpus = parse(whole).unwrap().dcgm_gpus();
    assert_eq!(gpus.len(), 1);
    assert_eq!((gpus[0].mig_instance, gpus[0].util_pct), (None, Some(87.0)));
}

/// trtllm-serve's `/prometheus/metrics` as tensorrt_llm/metrics/collector.py declares it
/// (prometheus_client: counters declared with `_total` keep one `_total`).
fn trtllm(prompt: u64, cached: u64, generated: u64, drafted: u64, accepted: u64) -> String {
    let labels = "engine_type=\"trtllm\",model_name=\"m\"";
    let mut s = format!(
        "# HELP trtllm_num_requests_running Number of active requests\n\
         # TYPE trtllm_num_requests_running gauge\ntrtllm_num_requests_running{{{labels}}} 4.0\n\
         # TYPE trtllm_kv_cache_utilization gauge\ntrtllm_kv_cache_utilization{{{labels}}} 0.25\n\
         # TYPE trtllm_prompt_tokens_total counter\ntrtllm_prompt_tokens_total{{{labels}}} {prompt}.0\n\
         # TYPE trtllm_generation_tokens_total counter\ntrtllm_generation_tokens_total{{{labels}}} {generated}.0\n\
         # TYPE trtllm_prompt_cached_tokens_total counter\ntrtllm_prompt_cached_tokens_total{{{labels}}} {cached}.0\n\
         # TYPE trtllm_spec_decode_num_draft_tokens_total counter\ntrtllm_spec_decode_num_draft_tokens_total{{{labels}}} {drafted}.0\n\
         # TYPE trtllm_spec_decode_num_accepted_tokens_total counter\ntrtllm_spec_decode_num_accepted_tokens_total{{{labels}}} {accepted}.0\n\
         # TYPE trtllm_spec_decode_acceptance_length gauge\ntrtllm_spec_decode_acceptance_length{{{labels}}} 2.5\n\
         # HELP trtllm_time_per_output_token_seconds Histogram of time per output token in seconds.\n\
         # TYPE trtllm_time_per_output_token_seconds histogram\n"
    );
    for (le, c) in [
        ("0.01", 0),
        ("0.025", generated / 10),
        ("+Inf", generated / 10),
    ] {
        s.push_str(&format!(
            "trtllm_time_per_output_token_seconds_bucket{{{labels},le=\"{le}\"}} {c}.0\n"
        ));
    }
    s.push_str(&format!(
        "trtllm_time_per_output_token_seconds_count{{{labels}}} {}.0\n\
         trtllm_time_per_output_token_seconds_sum{{{labels}}} {}\n",
        generated / 10,
        generated as f64 / 10.0 * 0.02
    ));
    s
}

#[test]
fn trtllm_serve_counters_end_in_total_and_its_tpot_is_not_an_itl() {
    let s = window(
        Engine::Trtllm,
        &[trtllm(0, 0, 0, 0, 0), trtllm(1000, 600, 500, 300, 210)],
    );
    let spec = s
        .spec
        .expect("spec from the _total counters and the length gauge");
    assert_eq!(spec.draft_acceptance, Some(0.7));
    assert_eq!(spec.mean_accepted_len, Some(2.5));
    assert_eq!(
        (s.prompt_tokens, s.generation_tokens),
        (Some(1000), Some(500))
    );
    assert_eq!(s.prefix_hit_rate, Some(0.6));
    assert!(
        s.itl_ms.is_none(),
        "a per-request TPOT is not an inter-token latency"
    );
    let tpot = s.tpot_ms.unwrap();
    assert_eq!(tpot.n, 50);
    assert!((tpot.mean - 20.0).abs() < 1e-9);
    assert_eq!(s.running.unwrap().mean, 4.0);
}

/// llama-server's `/metrics` (tools/server `to_metrics()`); recent builds add the cached prompt
/// tokens and speculative counters, and count only computed prompt tokens in
/// `prompt_tokens_total`.
fn llama(prompt: u64, cached: Option<u64>, spec: Option<(u64, u64, Option<u64>)>) -> String {
    let mut s = format!(
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n\
         # TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {prompt}\n\
         # HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n\
         # TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 64\n\
         # HELP llamacpp:requests_processing Number of requests processing.\n\
         # TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
    );
    if let Some(c) = cached {
        s.push_str(&format!(
            "# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total {c}\n"
        ));
    }
    if let Some((d, a, drafts)) = spec {
        s.push_str(&format!(
            "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\nllamacpp:spec_decode_num_draft_tokens_total {d}\n\
             # TYPE llamacpp:spec_decode_num_accepted_tokens_total counter\nllamacpp:spec_decode_num_accepted_tokens_total {a}\n"
        ));
        if let Some(n) = drafts {
            s.push_str(&format!(
                "# TYPE llamacpp:spec_decode_num_drafts_total counter\nllamacpp:spec_decode_num_drafts_total {n}\n"
            ));
        }
    }
    s
}

#[test]
fn llama_server_prompt_tokens_add_the_cached_ones_and_spec_counters_are_read() {
    let s = window(
        Engine::LlamaCpp,
        &[
            llama(0, Some(0), Some((0, 0, Some(0)))),
            llama(100, Some(300), Some((900, 630, Some(300)))),
        ],
    );
    assert_eq!(s.prompt_tokens, Some(400), "computed 100 + cached 300");
    assert_eq!(s.prefix_hit_rate, Some(0.75));
    let spec = s.spec.unwrap();
    assert!((spec.draft_acceptance.unwrap() - 0.7).abs() < 1e-12);
    assert_eq!(
        (spec.mean_accepted_len, spec.draft_len),
        (Some(3.1), Some(3.0))
    );
    // A build with the token counters alone: the acceptance, and no length.
    let s = window(
        Engine::LlamaCpp,
        &[
            llama(0, None, Some((0, 0, None))),
            llama(100, None, Some((900, 630, None))),
        ],
    );
    let spec = s.spec.unwrap();
    assert!((spec.draft_acceptance.unwrap() - 0.7).abs() < 1e-12);
    assert_eq!((spec.mean_accepted_len, spec.chain_alpha), (None, None));
    // The clean twin: an older build without those counters reads as it always did.
    let s = window(
        Engine::LlamaCpp,
        &[llama(0, None, None), llama(100, None, None)],
    );
    assert_eq!((s.prompt_tokens, s.prefix_hit_rate), (Some(100), None));
    assert!(s.spec.is_none());
}

/// Triton's metrics port with the TensorRT-LLM backend (tensorrtllm_backend README's sample)
/// and Triton's own first-response histogram (milliseconds).
fn triton(first_ms: [u64; 3]) -> String {
    let mut s = String::from(
        "# HELP nv_trt_llm_request_metrics TRT LLM request metrics\n\
         # TYPE nv_trt_llm_request_metrics gauge\n\
         nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 2\n\
         nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"context\",version=\"1\"} 1\n\
         nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"scheduled\",version=\"1\"} 3\n\
         nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\",version=\"1\"} 512\n\
         nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"active\",version=\"1\"} 5\n\
         # HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics\n\
         # TYPE nv_trt_llm_kv_cache_block_metrics gauge\n\
         nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",model=\"tensorrt_llm\",version=\"1\"} 0.5\n\
         nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"max\",model=\"tensorrt_llm\",version=\"1\"} 6239\n\
         # HELP nv_inference_first_response_histogram_ms Duration from request to first response in milliseconds\n\
         # TYPE nv_inference_first_response_histogram_ms histogram\n",
    );
    for model in ["tensorrt_llm", "ensemble"] {
        let mut cum = 0;
        for (le, n) in ["10", "100", "+Inf"].iter().zip(first_ms) {
            cum += n;
            s.push_str(&format!(
                "nv_inference_first_response_histogram_ms_bucket{{model=\"{model}\",version=\"1\",le=\"{le}\"}} {cum}\n"
            ));
        }
        s.push_str(&format!(
            "nv_inference_first_response_histogram_ms_count{{model=\"{model}\",version=\"1\"}} {cum}\n\
             nv_inference_first_response_histogram_ms_sum{{model=\"{model}\",version=\"1\"}} {}\n",
            cum * 50
        ));
    }
    s
}

#[test]
fn triton_trt_llm_backend_state_and_first_response_in_milliseconds() {
    let s = window(Engine::Triton, &[triton([0, 0, 0]), triton([0, 10, 0])]);
    assert_eq!(s.engine, "triton");
    assert_eq!(s.running.unwrap().mean, 5.0, "active requests");
    assert_eq!(s.waiting.unwrap().mean, 2.0);
    assert_eq!(s.kv_usage.unwrap().mean, 0.5);
    let ttft = s.ttft_ms.unwrap();
    assert_eq!(
        ttft.n, 10,
        "the tensorrt_llm model's only, not the ensemble's too"
    );
    assert!(
        (ttft.mean - 50.0).abs() < 1e-9,
        "milliseconds stay milliseconds: {ttft:?}"
    );
    assert!(ttft.p50 > 10.0 && ttft.p50 <= 100.0, "{ttft:?}");
}

/// Dynamo's HTTP frontend (`dynamo_frontend_*`, label `model`).
fn dynamo(requests: u64) -> String {
    let m = "model=\"qwen/qwen3-0.6b\"";
    let mut s = format!(
        "# TYPE dynamo_frontend_inflight_requests gauge\ndynamo_frontend_inflight_requests{{{m}}} 3\n\
         # TYPE dynamo_frontend_queued_requests gauge\ndynamo_frontend_queued_requests{{{m}}} 1\n\
         # TYPE dynamo_frontend_requests_total counter\n\
         dynamo_frontend_requests_total{{endpoint=\"completions\",{m},request_type=\"stream\",status=\"success\"}} {requests}\n\
         # TYPE dynamo_frontend_output_tokens_total counter\ndynamo_frontend_output_tokens_total{{{m}}} {}\n\
         # TYPE dynamo_frontend_input_sequence_tokens histogram\n\
         dynamo_frontend_input_sequence_tokens_bucket{{{m},le=\"+Inf\"}} {requests}\n\
         dynamo_frontend_input_sequence_tokens_sum{{{m}}} {}\n\
         dynamo_frontend_input_sequence_tokens_count{{{m}}} {requests}\n\
         # TYPE dynamo_frontend_time_to_first_token_seconds histogram\n",
        requests * 16,
        requests * 128
    );
    for (le, c) in [("0.01", 0), ("0.1", requests), ("+Inf", requests)] {
        s.push_str(&format!(
            "dynamo_frontend_time_to_first_token_seconds_bucket{{{m},le=\"{le}\"}} {c}\n"
        ));
    }
    s.push_str(&format!(
        "dynamo_frontend_time_to_first_token_seconds_sum{{{m}}} {}\n\
         dynamo_frontend_time_to_first_token_seconds_count{{{m}}} {requests}\n",
        requests as f64 * 0.05
    ));
    s
}

#[test]
fn dynamo_frontend_running_waiting_tokens_and_ttft() {
    let s = window(Engine::Dynamo, &[dynamo(0), dynamo(10)]);
    assert_eq!(s.engine, "dynamo");
    assert_eq!(
        (s.running.unwrap().mean, s.waiting.unwrap().mean),
        (3.0, 1.0)
    );
    assert_eq!(s.requests, Some(10));
    assert_eq!(
        (s.prompt_tokens, s.generation_tokens),
        (Some(1280), Some(160))
    );
    let ttft = s.ttft_ms.unwrap();
    assert_eq!(ttft.n, 10);
    assert!((ttft.mean - 50.0).abs() < 1e-9);
}
