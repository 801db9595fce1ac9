//! Example telemetry values for the record round-trip tests (kept apart: tests.rs stays short).

use super::*;

pub fn server_stats() -> ServerStats {
    ServerStats {
        engine: "vllm".into(),
        scrapes: 4,
        gauge_samples: 2,
        running: Some(GaugeStats {
            mean: 3.5,
            max: 4.0,
        }),
        kv_usage: Some(GaugeStats {
            mean: 0.5,
            max: 0.97,
        }),
        preemptions: Some(3),
        prefix_hit_rate: Some(0.25),
        prefix_queried_tokens: Some(100),
        spec: Some(SpecStats {
            chain_alpha: Some(0.7),
            draft_acceptance: Some(0.511),
            mean_accepted_len: Some(2.533),
            draft_len: Some(3.0),
            per_position: vec![0.7, 0.7, 0.7],
            drafts: Some(300),
            from: "counters".into(),
        }),
        prompt_tokens: Some(100),
        generation_tokens: Some(900),
        ttft_ms: Some(BucketDist {
            n: 10,
            mean: 12.0,
            p50: 10.0,
            p90: 20.0,
            p99: 25.0,
        }),
        counter_reset: true,
        ..Default::default()
    }
}

pub fn gpu_stats() -> GpuStats {
    GpuStats {
        index: 1,
        name: Some("NVIDIA H100 80GB HBM3".into()),
        samples: 5,
        util_pct: Some(GaugeStats {
            mean: 55.0,
            max: 99.0,
        }),
        power_w: Some(GaugeStats {
            mean: 300.5,
            max: 650.0,
        }),
        ..Default::default()
    }
}
