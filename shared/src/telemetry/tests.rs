use super::prom::parse;
use super::vocab::{Engine, Figure};
use super::window::{GpuWindow, Window, solve_alpha};
use crate::exec::gpu::GpuReading;

/// A vLLM scrape as prometheus_client writes it (`_total`, `_created` gauges, two engines).
fn vllm(
    prompt: u64,
    generated: u64,
    running: u64,
    kv: f64,
    ttft: [u64; 3],
    per_pos: [u64; 3],
) -> String {
    let drafts = 100;
    format!(
        r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m \"q\", x=y"}} {running}.0
vllm:num_requests_running{{engine="1",model_name="m \"q\", x=y"}} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
vllm:kv_cache_usage_perc{{engine="1",model_name="m"}} {kv}
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{engine="0",model_name="m"}} {prompt}.0
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{{engine="0",model_name="m"}} 1.7e+09
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}.0
vllm:generation_tokens_total{{engine="1",model_name="m"}} 5.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine="0",finished_reason="length",model_name="m"}} 7.0
vllm:request_success_total{{engine="0",finished_reason="abort",model_name="m"}} 2.0
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}.0
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {}.0
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {}.0
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {}.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {}.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {}.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.01",model_name="m"}} {}.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="0.1",model_name="m"}} {}.0
vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf",model_name="m"}} {}.0
vllm:time_to_first_token_seconds_count{{engine="0",model_name="m"}} {}.0
vllm:time_to_first_token_seconds_sum{{engine="0",model_name="m"}} 0.5
"#,
        drafts * 3,
        per_pos.iter().sum::<u64>(),
        per_pos[0],
        per_pos[1],
        per_pos[2],
        ttft[0],
        ttft[0] + ttft[1],
        ttft[0] + ttft[1] + ttft[2],
        ttft[0] + ttft[1] + ttft[2],
    )
}

#[test]
fn vllm_scrape_reads_into_our_figures() {
    let x = parse(&vllm(10, 20, 3, 0.5, [1, 2, 3], [7, 5, 3])).unwrap();
    assert_eq!(x.engine(), Some(Engine::Vllm));
    let r = x.read(Engine::Vllm);
    assert_eq!(r.get(Figure::Running), Some(4.0), "summed over engines");
    assert_eq!(r.get(Figure::KvUsage), Some(0.5), "averaged over engines");
    assert_eq!(r.get(Figure::GenerationTokens), Some(25.0));
    assert_eq!(r.get(Figure::Requests), Some(9.0));
    assert_eq!(r.get(Figure::Aborted), Some(2.0));
    assert_eq!(r.by_label[&Figure::SpecAcceptedPerPos].len(), 3);
    let ttft = &r.hists[&Figure::TtftSeconds];
    assert_eq!(ttft.cumulative.len(), 3);
    assert!(ttft.cumulative[2].0.is_infinite());
    assert_eq!(ttft.count, 6.0);
}

#[test]
fn a_window_differences_counters_and_averages_gauges() {
    let start = parse(&vllm(10, 20, 0, 0.0, [1, 0, 0], [0, 0, 0]))
        .unwrap()
        .read(Engine::Vllm);
    let mut w = Window::start(Engine::Vllm, start);
    w.sample(
        parse(&vllm(50, 60, 7, 0.9, [1, 0, 0], [0, 0, 0]))
            .unwrap()
            .read(Engine::Vllm),
    );
    w.sample(
        parse(&vllm(80, 90, 3, 0.5, [1, 0, 0], [0, 0, 0]))
            .unwrap()
            .read(Engine::Vllm),
    );
    // 100 verify steps of 3 drafts, position 0 accepted 70 times, 1: 49, 2: 34.
    let end = parse(&vllm(110, 220, 0, 0.0, [1, 80, 20], [70, 49, 34]))
        .unwrap()
        .read(Engine::Vllm);
    let s = w.finish(Some(end));
    assert_eq!(s.engine, "vllm");
    // The first and last scrapes are gauge samples too.
    assert_eq!((s.scrapes, s.gauge_samples), (4, 4));
    assert_eq!(s.prompt_tokens, Some(100));
    assert_eq!(s.generation_tokens, Some(200));
    let running = s.running.unwrap();
    assert_eq!((running.mean, running.max), (3.5, 8.0));
    let kv = s.kv_usage.unwrap();
    assert!((kv.mean - 0.35).abs() < 1e-9 && kv.max == 0.9);
    assert!(!s.incomplete && s.notes.is_empty(), "{s:?}");
    assert!(!s.counter_reset);
    // The drafts counter did not move (100 at both ends): no speculative figures.
    assert!(s.spec.is_none());
    let ttft = s.ttft_ms.unwrap();
    assert_eq!(ttft.n, 100);
    // 80 of 100 in (10, 100] ms: the median is 10 + 90 x 50/80 ms.
    assert!(
        (ttft.p50 - (10.0 + 90.0 * 50.0 / 80.0)).abs() < 1e-6,
        "{ttft:?}"
    );
    // p99 falls in +Inf: the largest finite bound.
    assert_eq!(ttft.p99, 100.0);
}

#[test]
fn per_position_counters_give_the_acceptance_chain_exactly() {
    let start = parse(&vllm(0, 0, 0, 0.0, [0, 0, 0], [0, 0, 0]))
        .unwrap()
        .read(Engine::Vllm);
    // Pretend the start had no spec counters at all (they appear with the first draft).
    let mut start = start;
    for f in [
        Figure::SpecDrafts,
        Figure::SpecDraftTokens,
        Figure::SpecAccepted,
    ] {
        start.scalars.remove(&f);
    }
    start.by_label.clear();
    let w = Window::start(Engine::Vllm, start);
    let end = parse(&vllm(0, 0, 0, 0.0, [0, 0, 0], [70, 49, 34]))
        .unwrap()
        .read(Engine::Vllm);
    let spec = w.finish(Some(end)).spec.unwrap();
    assert_eq!(spec.from, "counters");
    assert_eq!(spec.drafts, Some(100));
    assert!(
        (spec.chain_alpha.unwrap() - (70.0 + 49.0 + 34.0) / (100.0 + 70.0 + 49.0)).abs() < 1e-12
    );
    assert!((spec.mean_accepted_len.unwrap() - 2.53).abs() < 1e-12);
    assert!((spec.draft_acceptance.unwrap() - 153.0 / 300.0).abs() < 1e-12);
    assert_eq!(spec.per_position.len(), 3);
    assert!((spec.per_position[1] - 0.7).abs() < 1e-12);
}

#[test]
fn sglang_gauges_are_sampled_and_alpha_solved() {
    let text = |len: f64, rate: f64, prompt: u64, cached: u64| {
        format!(
            "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{model_name=\"m\"}} 4\n\
             # TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{{model_name=\"m\"}} {len}\n\
             # TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{{model_name=\"m\"}} {rate}\n\
             # TYPE sglang:prompt_tokens_total counter\nsglang:prompt_tokens_total{{model_name=\"m\"}} {prompt}\n\
             # TYPE sglang:cached_tokens_total counter\nsglang:cached_tokens_total{{model_name=\"m\"}} {cached}\n"
        )
    };
    let read = |t: String| parse(&t).unwrap().read(Engine::Sglang);
    assert_eq!(
        parse(&text(0.0, 0.0, 0, 0)).unwrap().engine(),
        Some(Engine::Sglang)
    );
    let mut w = Window::start(Engine::Sglang, read(text(0.0, 0.0, 100, 0)));
    w.sample(read(text(0.0, 0.0, 150, 0))); // before SGLang's first window: unset, skipped
    w.sample(read(text(2.5, 0.5, 200, 40)));
    w.sample(read(text(2.566, 0.522, 300, 80)));
    let s = w.finish(Some(read(text(2.533, 0.511, 500, 100))));
    let spec = s.spec.unwrap();
    assert_eq!(spec.from, "gauges");
    assert!((spec.mean_accepted_len.unwrap() - 2.533).abs() < 1e-9);
    assert_eq!(spec.draft_len, Some(3.0));
    assert!((spec.chain_alpha.unwrap() - 0.7).abs() < 0.002, "{spec:?}");
    assert_eq!(s.prefix_hit_rate, Some(0.25));
    assert_eq!(s.prefix_queried_tokens, Some(400));
    assert_eq!(s.prompt_tokens, Some(400));
}

#[test]
fn a_counter_that_goes_down_is_a_restart() {
    let text = |n: u64| {
        format!(
            "# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {n}\n"
        )
    };
    let read = |n| parse(&text(n)).unwrap().read(Engine::LlamaCpp);
    let s = Window::start(Engine::LlamaCpp, read(500)).finish(Some(read(40)));
    assert!(s.counter_reset);
    assert_eq!(s.generation_tokens, Some(40));
    // Without an end scrape and no sample in between there are no counters.
    let s = Window::start(Engine::LlamaCpp, read(5)).finish(None);
    assert_eq!((s.generation_tokens, s.scrapes), (None, 1));
}

#[test]
fn not_prometheus_text_is_an_error_in_words() {
    let e = parse("{\"iterations\": []}").unwrap_err();
    assert!(e.starts_with("not Prometheus text"), "{e}");
    assert_eq!(parse("# TYPE x gauge\nx 1\n").unwrap().engine(), None);
}

#[test]
fn alpha_inverts_the_chain_sum() {
    for a in [0.1, 0.5, 0.7, 0.95] {
        let sum: f64 = (1..=3).map(|i| f64::powi(a, i)).sum();
        assert!((solve_alpha(3.0, sum) - a).abs() < 1e-9);
    }
    assert_eq!(solve_alpha(3.0, 0.0), 0.0);
    assert_eq!(solve_alpha(3.0, 3.0), 1.0);
}

#[test]
fn dcgm_fields_per_gpu_without_blank_sentinels() {
    let text = "# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"h\"} 87\n\
        DCGM_FI_DEV_GPU_UTIL{gpu=\"1\",UUID=\"GPU-b\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"h\"} 9223372036854775794\n\
        # TYPE DCGM_FI_DEV_POWER_USAGE gauge\n\
        DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\"} 512.5\n\
        # TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge\n\
        DCGM_FI_PROF_PCIE_TX_BYTES{gpu=\"0\",UUID=\"GPU-a\",modelName=\"NVIDIA H100 80GB HBM3\"} 1.5e9\n";
    let gpus = parse(text).unwrap().dcgm_gpus();
    assert_eq!(gpus.len(), 1, "{gpus:?}");
    assert_eq!(gpus[0].util_pct, Some(87.0));
    assert_eq!(gpus[0].pcie_tx_bytes_s, Some(1.5e9));
    let mut w = GpuWindow::default();
    w.add(&gpus);
    w.add(&[GpuReading {
        index: 0,
        util_pct: Some(13.0),
        ..GpuReading::default()
    }]);
    let stats = w.finish();
    assert_eq!(stats[0].samples, 2);
    assert_eq!(stats[0].util_pct.unwrap().mean, 50.0);
    assert_eq!(stats[0].name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
}
