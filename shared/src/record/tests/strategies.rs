//! Generators of every record kind for the round-trip properties: random but schema-valid
//! records, unknown fields included (prefix `zz_`, never colliding with known ones).

use super::super::*;
use proptest::prelude::*;
use serde_json::json;
pub(super) fn labels() -> impl Strategy<Value = Labels> {
    prop::collection::btree_map("[a-z]{1,6}", "[ -~]{0,8}", 0..4)
}

/// Unknown fields a newer tool might add: never colliding with known ones (prefix `zz_`).
pub(super) fn extra() -> impl Strategy<Value = Extra> {
    prop::collection::btree_map(
        "zz_[a-z]{1,6}",
        prop_oneof![
            any::<i64>().prop_map(|n| json!(n)),
            "[ -~]{0,10}".prop_map(|s| json!(s)),
            any::<bool>().prop_map(|b| json!({"nested": b, "list": [1, 2]})),
        ],
        0..4,
    )
    .prop_map(|m| m.into_iter().collect())
}

pub(super) fn finite() -> impl Strategy<Value = f64> {
    (0u32..10_000_000).prop_map(|n| f64::from(n) / 1000.0)
}

pub(super) fn dist() -> impl Strategy<Value = Dist> {
    (any::<u32>(), finite(), finite()).prop_map(|(n, a, b)| Dist {
        n: u64::from(n),
        mean: a,
        stddev: b,
        min: a,
        p50: a,
        p90: b,
        p95: b,
        p99: b,
        p999: b,
        max: a + b,
    })
}

pub(super) fn point() -> impl Strategy<Value = PointKey> {
    (
        any::<u16>(),
        prop::option::of(1u32..5000),
        prop::option::of(finite()),
        prop::option::of(1u32..200_000),
        prop::option::of(1u32..10_000),
        0u32..5,
        prop::option::of(finite()),
    )
        .prop_map(
            |(index, concurrency, rate_rps, input_len, max_tokens, repeat, trace_speed)| PointKey {
                index: u32::from(index),
                concurrency,
                rate_rps,
                input_len,
                max_tokens,
                repeat,
                trace_speed,
                images: None,
            },
        )
}

pub(super) fn server() -> impl Strategy<Value = Record> {
    (labels(), extra(), any::<u32>(), any::<u16>(), finite()).prop_map(
        |(labels, extra, pid, port, ready_s)| {
            Record::Server(ServerRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                engine: "sim".into(),
                model: Some("llama-3.1-8b".into()),
                host: "localhost".into(),
                pid,
                pgid: pid,
                start_ticks: u64::from(pid) * 7,
                port,
                url: format!("http://127.0.0.1:{port}"),
                command: "srv-sim --port 8000".into(),
                log: "/tmp/x.log".into(),
                ready_s,
                launch_id: Some(format!("{pid}-1")),
                served_model: Some("llama-3.1-8b".into()),
                gpus: (port % 2 == 0).then(|| "0,1".to_string()),
                name: None,
                argv: vec!["srv-sim".into(), "--port".into(), port.to_string()],
                env: (port % 3 == 0).then(|| ServerEnv {
                    engine_version: Some("0.1.0".into()),
                    gpu_model: Some("NVIDIA H100 80GB HBM3".into()),
                    gpu_count: Some(2),
                    driver_version: Some("550.54.15".into()),
                    cuda_version: Some("12.4".into()),
                    kernel: Some("6.1.0-18-amd64".into()),
                    cpu_model: Some("AMD EPYC 9654".into()),
                    hostname: Some("gpu1".into()),
                    host: (port % 2 == 0).then(|| {
                        Box::new(HostEnv {
                            cpu_count: Some(128),
                            cpu_governors: vec!["performance".into()],
                            numa_balancing: Some(false),
                            gpus: vec![HostGpu {
                                index: 0,
                                pcie_gen_current: Some(1),
                                throttle_reasons: Some(vec!["gpu_idle".into()]),
                                ..HostGpu::default()
                            }],
                            ..HostEnv::default()
                        })
                    }),
                }),
                self_report: false,
                self_report_flags: Vec::new(),
                startup: (port % 5 != 0).then(|| Startup {
                    ready_s,
                    phases: (port % 7 != 0)
                        .then(|| StartupPhase {
                            name: if port % 2 == 0 {
                                StartupPhaseName::Weights
                            } else {
                                StartupPhaseName::Other("newer_phase".into())
                            },
                            at_s: ready_s / 2.0,
                            took_s: (port % 3 == 0).then_some(ready_s / 4.0),
                        })
                        .into_iter()
                        .collect(),
                    log_cut: port % 11 == 0,
                }),
                killed: port % 2 == 0,
                pd: (port % 4 == 1).then(|| PdMember {
                    group: format!("{pid}-g"),
                    layout: PdLayout {
                        prefill: 1 + u32::from(port % 3),
                        decode: 1,
                    },
                    role: [PdRole::Prefill, PdRole::Decode, PdRole::Proxy][usize::from(port % 3)],
                    index: 0,
                }),
                extra,
            })
        },
    )
}

pub(super) fn kill() -> impl Strategy<Value = Record> {
    (labels(), extra(), any::<u32>(), any::<bool>(), finite()).prop_map(
        |(labels, extra, pid, ok, elapsed_s)| {
            Record::Kill(KillRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                target: format!("server pid {pid}"),
                host: "localhost".into(),
                matched: vec![KilledProcess {
                    pid,
                    command: "srv-sim".into(),
                }],
                signals: vec!["TERM".into()],
                survivors: if ok { vec![] } else { vec![pid] },
                port: Some(8000),
                port_free: Some(ok),
                gpu_used_before_bytes: None,
                gpu_used_after_bytes: Some(vec![Some(1 << 30), None]),
                gpu_released: Some(ok),
                gpu_warning: None,
                refused: None,
                dry_run: !ok,
                elapsed_s,
                ok,
                error: (!ok).then(|| "survivors".to_string()),
                extra,
            })
        },
    )
}

pub(super) fn request() -> impl Strategy<Value = Record> {
    (
        labels(),
        extra(),
        point(),
        any::<u32>(),
        prop::option::of(finite()),
        prop::collection::vec(finite(), 0..6),
        any::<bool>(),
    )
        .prop_map(|(labels, extra, point, id, ttft_ms, itl_ms, failed)| {
            Record::Request(Box::new(RequestRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                point,
                id: u64::from(id),
                intended_ms: 12.5,
                send_lag_ms: 0.013,
                ttft_ms,
                ttft_reasoning_ms: None,
                ttfo_ms: None,
                reasoning_tokens: None,
                e2e_ms: ttft_ms.map(|t| t + 100.0),
                tpot_ms: Some(10.0),
                chunks: itl_ms.len() as u32 + 1,
                itl_ms,
                output_tokens: 7,
                output_tokens_source: Some(TokenSource::Usage),
                output_tokens_chunks: None,
                prompt_tokens: Some(3000),
                prompt_tokens_target: Some(3000),
                max_tokens: Some(7),
                inputs: None,
                images: None,
                error: failed.then(|| RequestError {
                    class: ErrorClass::Http5xx,
                    message: "HTTP 503: overloaded".into(),
                    http_status: Some(503),
                }),
                cancelled_after_ms: (!failed && id % 5 == 0).then_some(250.0),
                adapter: (id % 4 == 1).then(|| format!("lora-{}", id % 3)),
                session: (id % 3 == 0).then_some(u64::from(id) / 3),
                turn: (id % 3 == 0).then_some(id % 7 + 1),
                cached_tokens: (id % 2 == 0).then_some(2048),
                server_timing: (id % 2 == 1).then(|| ServerTiming {
                    source: "vllm".into(),
                    queue_ms: Some(1.5),
                    prefill_ms: Some(4.0),
                    ttft_ms: Some(5.5),
                    generation_ms: Some(40.0),
                    mean_itl_ms: Some(10.0),
                    forward_ms: (id % 4 == 1).then_some(44.0),
                    kv_transfer_ms: (id % 4 == 3).then_some(0.5),
                    decode_queue_ms: (id % 4 == 3).then_some(0.25),
                    first_decode_ms: (id % 4 == 3).then_some(7.0),
                    proxy_ms: (id % 4 == 3).then_some(0.125),
                    cached_tokens: (id % 4 == 1).then_some(16),
                    draft_tokens: (id % 4 == 3).then_some(12),
                    draft_accepted_tokens: (id % 4 == 3).then_some(9),
                }),
                response_id: (id % 3 == 1).then(|| format!("chatcmpl-{id}")),
                output_pieces: (id % 4 == 1).then(|| vec![" a".into(), "\u{e9}\"".into()]),
                eval: (id % 5 == 2).then(|| EvalVerdict {
                    line: 3,
                    verdict: Verdict::Wrong,
                    got: Some("12".into()),
                }),
                json: (id % 5 == 3).then(|| JsonVerdict {
                    valid: Some(false),
                    error: Some("/age: -1 is less than the minimum of 0".into()),
                }),
                extra,
            }))
        })
}

pub(super) fn summary() -> impl Strategy<Value = Record> {
    (labels(), extra(), point(), dist(), any::<bool>()).prop_map(
        |(labels, extra, point, d, partial)| {
            Record::Summary(Box::new(SummaryRecord {
                v: SCHEMA_VERSION,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                point,
                partial,
                stopped_by: partial.then_some(PointStop::ServerDown),
                stop_reason: partial.then(|| "server down: refused".to_string()),
                requests: 12,
                ok: 9,
                errors: 1,
                cancelled: 2,
                errors_by_class: [("reset".to_string(), 1)].into_iter().collect(),
                duration_s: 1.5,
                output_tokens: 900,
                prompt_tokens: 100,
                req_s: 6.0,
                output_tok_s: 600.0,
                total_tok_s: 666.6,
                inputs: partial.then_some(9),
                inputs_s: partial.then_some(6.0),
                steady_output_tok_s: Some(610.0),
                goodput_req_s: None,
                slo: None,
                ttft_ms: Some(d),
                ttfo_ms: partial.then_some(d),
                itl_ms: Some(d),
                tpot_ms: None,
                e2e_ms: Some(d),
                send_lag_ms: None,
                tokens_per_chunk: Some(1.0),
                reasoning_share: partial.then_some(0.25),
                prompt_len_exact: 9,
                prompt_len_targeted: 10,
                output_len_mismatch: 0,
                client_cpu_s: Some(0.01),
                telemetry_cpu_s: Some(0.001),
                server: partial.then(telemetry_tests::server_stats),
                gpus: if partial {
                    Vec::new()
                } else {
                    vec![telemetry_tests::gpu_stats()]
                },
                pd_members: (partial.then_some(PdMemberStats {
                    role: PdRole::Decode,
                    index: 0,
                    url: "http://127.0.0.1:8200".into(),
                    server: Some(telemetry_tests::server_stats()),
                }))
                .into_iter()
                .collect(),
                model: Some("llama".into()),
                workload: Workload {
                    api: Some("chat".into()),
                    seed: Some(7),
                    arrival: Some("poisson".into()),
                    turns: partial.then(|| "2..6".into()),
                    think_time: partial.then(|| "500ms".into()),
                    sessions: partial.then_some(4),
                    trace: (!partial).then(|| "mooncake.jsonl".into()),
                    trace_rows: (!partial).then_some(12031),
                    cancel_rate: partial.then_some(0.25),
                    cancel_after: partial.then(|| "100ms..300ms".into()),
                    eval: (!partial).then(|| "arith-12.jsonl".into()),
                    response_format: partial.then(|| "person.schema.json".into()),
                    lora: if partial {
                        Vec::new()
                    } else {
                        vec!["sql-lora".into(), "chat-lora".into()]
                    },
                    lora_assignment: (!partial).then(|| "zipf:1.2".into()),
                    // A newer tool's workload field survives the trip.
                    extra: if partial {
                        Extra::new()
                    } else {
                        [("zz_new".to_string(), json!({"a": 1}))]
                            .into_iter()
                            .collect()
                    },
                    ..Workload::default()
                },
                by_turn: if partial {
                    vec![TurnSummary {
                        turn: 2,
                        requests: 4,
                        ok: 4,
                        ttft_ms: Some(d),
                        e2e_ms: None,
                        prompt_tokens_mean: Some(612.5),
                        cached_tokens_mean: None,
                    }]
                } else {
                    Vec::new()
                },
                by_adapter: if partial {
                    Vec::new()
                } else {
                    vec![AdapterSummary {
                        adapter: "sql-lora".into(),
                        requests: 5,
                        ok: 5,
                        ttft_ms: Some(d),
                        tpot_ms: None,
                        output_tokens: 640,
                        output_tok_s: 426.7,
                    }]
                },
                ranks: None,
                ttft_split: partial.then(|| TtftSplit {
                    source: "vllm".into(),
                    requests: 4,
                    client_ttft_ms: 12.0,
                    engine_queue_ms: Some(2.0),
                    engine_prefill_ms: 6.0,
                    outside_ms: 4.0,
                    engine_generation_ms: None,
                    kv_transfer_ms: Some(1.5),
                    decode_queue_ms: Some(0.5),
                    first_decode_ms: Some(2.0),
                    proxy_ms: Some(0.25),
                    server_over_client: 1,
                    server_over_client_max_ms: Some(0.3),
                }),
                engine_steps: partial.then(|| {
                    let mut e = EngineSteps::of_steps(
                        "vllm",
                        &[Step {
                            engine: Some(1),
                            count: 1,
                            ctx_requests: 1,
                            ctx_tokens: 64,
                            gen_requests: 3,
                            gen_tokens: 3,
                            result_wait_ms: Some(27.5),
                            ..Step::default()
                        }],
                        0.5,
                        0.25,
                    );
                    e.malformed_lines = 1;
                    e.per_second = Some(StepsPerSecond {
                        first_s: -0.25,
                        steps: vec![120, 0, 200],
                    });
                    e
                }),
                eval: (!partial).then_some(EvalSummary {
                    correct: 3,
                    judged: 4,
                    not_judged: 1,
                    accuracy: Some(0.75),
                }),
                json_validity: partial.then_some(EvalSummary {
                    correct: 7,
                    judged: 10,
                    not_judged: 0,
                    accuracy: Some(0.7),
                }),
                noise: (!partial).then(|| BatchNoise {
                    blocks: 8,
                    block_s: 1.5,
                    independent_requests: 40,
                    hw95: [("output_tok_s".to_string(), 12.5)].into(),
                }),
                hist: [("ttft_ms".to_string(), "HISTFAAAAB".to_string())]
                    .into_iter()
                    .collect(),
                extra,
            }))
        },
    )
}

pub(super) fn coll() -> impl Strategy<Value = Record> {
    (labels(), extra(), dist(), 1u64..1 << 30).prop_map(|(labels, extra, d, bytes)| {
        Record::Coll(CollRecord {
            v: 1,
            ts: "2026-11-30T17:00:00.123Z".into(),
            labels,
            op: "allreduce".into(),
            backend: "tcp".into(),
            algo: "ring".into(),
            ranks: 4,
            hosts: 1,
            bytes,
            count: bytes / 4,
            dtype: "f32".into(),
            redop: "sum".into(),
            mode: "pipelined".into(),
            time_us: d,
            algbw_gbps: 1.5,
            busbw_gbps: 2.25,
            wrong: 0,
            checked: bytes % 2 == 0,
            iters: 20,
            warmup: 5,
            root: (bytes % 3 == 0).then_some(1),
            lost_core_waits: (bytes % 5 == 0).then_some(bytes % 7),
            extra,
        })
    })
}

pub(super) fn coll_run() -> impl Strategy<Value = Record> {
    (labels(), extra()).prop_map(|(labels, extra)| {
        Record::CollRun(CollRunRecord {
            v: 1,
            ts: "2026-11-30T17:00:00.123Z".into(),
            labels,
            op: "allreduce".into(),
            backend: "tcp".into(),
            ranks: 2,
            sizes: 20,
            avg_busbw_gbps: 3.5,
            wrong: 0,
            hosts: 2,
            error: Some("rank 1 died".into()),
            extra,
        })
    })
}

pub(super) fn decode() -> impl Strategy<Value = Record> {
    (labels(), extra(), dist(), 1u32..512, finite()).prop_map(|(labels, extra, d, batch, us)| {
        Record::Decode(DecodeRecord {
            v: 1,
            ts: "2026-11-30T17:00:00.123Z".into(),
            labels,
            model: "llama-3.1-70b".into(),
            hardware: "h100-sxm".into(),
            backend: "tcp".into(),
            algo: "recursive_doubling".into(),
            tp: 8,
            hosts: 1,
            batch,
            layers: 80,
            hidden: 8192,
            dtype: "bf16".into(),
            allreduce_bytes: u64::from(batch) * 8192 * 2,
            allreduces_per_step: 160,
            allreduce_us: d,
            comm_us_per_token: us,
            comm_us_per_token_p99: us * 2.0,
            step_compute_us: us / 3.0,
            step_memory_us: us + 1.0,
            step_roofline_us: us + 1.0,
            comm_fraction: 0.5,
            wrong: 0,
            context_tokens: 4096,
            modeled_comm_us_per_token: us / 2.0,
            extra,
        })
    })
}

pub(super) fn ramp() -> impl Strategy<Value = Record> {
    (labels(), extra(), point(), finite(), 0u32..3).prop_map(|(labels, extra, point, tok_s, n)| {
        Record::Ramp(RampRecord {
            v: 1,
            ts: "2026-11-30T17:00:00.123Z".into(),
            labels,
            point,
            levels: (0..n)
                .map(|i| RampLevel {
                    concurrency: 1 << i,
                    output_tok_s: tok_s,
                    req_s: tok_s / 100.0,
                    error_rate: 0.0,
                    slo_attainment: (i == 1).then_some(0.95),
                })
                .collect(),
            stopped_by: "saturated".into(),
            reason: "gain 2% < 5%".into(),
            best_concurrency: (n > 0).then_some(1),
            best_output_tok_s: (n > 0).then_some(tok_s),
            min_gain: (n > 1).then_some(0.05),
            extra,
        })
    })
}

pub(super) fn search() -> impl Strategy<Value = Record> {
    (labels(), extra(), point(), finite(), 0u32..4, any::<bool>()).prop_map(
        |(labels, extra, point, load, n, rate)| {
            let probes: Vec<SearchProbe> = (0..n)
                .map(|i| SearchProbe {
                    load: load * f64::from(i + 1),
                    points: (0..=i % 2).map(|k| i * 2 + k).collect(),
                    requests: 100,
                    slo_attainment: 1.0 - f64::from(i) / 10.0,
                    error_rate: 0.0,
                    passed: i < 2,
                })
                .collect();
            Record::Search(SearchRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                point,
                var: if rate { "rate_rps" } else { "concurrency" }.into(),
                slo: "ttft_ms=500".into(),
                slo_attainment: 0.9,
                precision: 0.05,
                max_passing: probes
                    .iter()
                    .filter(|p| p.passed)
                    .map(|p| p.load)
                    .reduce(f64::max),
                first_failing: probes.iter().find(|p| !p.passed).map(|p| p.load),
                probes,
                stopped_by: "converged".into(),
                reason: "max 200 req/s met the SLO, 210 did not (within 5%)".into(),
                extra,
            })
        },
    )
}

pub(super) fn sim_plan() -> impl Strategy<Value = Record> {
    (
        labels(),
        extra(),
        finite(),
        prop::option::of(1u64..10_000_000),
        prop::option::of(1u32..65_536),
        any::<bool>(),
    )
        .prop_map(
            |(labels, extra, ms, kv_cache_tokens, compute_bound_batch, spec)| {
                Record::SimPlan(SimPlanRecord {
                    v: 1,
                    ts: "2026-11-30T17:00:00.123Z".into(),
                    labels,
                    model: "llama-3.1-70b".into(),
                    hardware: "h200".into(),
                    tp: 4,
                    pp: 2,
                    data_parallel: 1,
                    max_model_len: 131_072,
                    weight_bytes: 141.2e9,
                    weight_bytes_per_gpu: 17.65e9,
                    active_weight_bytes_per_token: 141.2e9,
                    kv_bytes_per_token: 327_680.0,
                    kv_cache_tokens,
                    context_tokens: 1024,
                    decode_step_ms: ms + 0.1,
                    decode_memory_ms: ms,
                    decode_compute_ms: ms / 100.0,
                    decode_comm_ms: ms / 7.0,
                    step_overhead_ms: 0.1,
                    roofline_tok_s: 1000.0 / (ms + 1.0),
                    single_stream_tok_s: 1000.0 / (ms + 1.1),
                    pipeline_bubble_at_batch_1: 0.5,
                    compute_bound_batch,
                    weight_format: "fp8 + nvfp4 experts".into(),
                    usable_bytes_per_gpu: 86.4e9,
                    fits: kv_cache_tokens.is_some(),
                    fit_note: kv_cache_tokens
                        .is_none()
                        .then(|| "the weights do not fit".into()),
                    max_running_requests: 64,
                    pp_max_micro_batch: spec.then_some(8),
                    memory_bound_tok_s: 1000.0 / ms,
                    allreduces_per_step: 160,
                    allreduce_bytes: 16384.0,
                    allreduce_us: 20.7,
                    allreduce_algo: "ring/LL".into(),
                    comm_level: spec.then(|| "nvswitch".into()),
                    comm_source: "model".into(),
                    compute_source: if spec {
                        "measured: gemm.jsonl".into()
                    } else {
                        "model".into()
                    },
                    decode_gemm_ms: spec.then_some(ms / 2.0),
                    spec_tokens_per_step: spec.then_some(2.19),
                    spec_single_stream_tok_s: spec.then_some(250.0),
                    extra,
                })
            },
        )
}

pub(super) fn other() -> impl Strategy<Value = Record> {
    (labels(), extra(), "[a-z_]{3,10}").prop_map(|(labels, mut extra, kind)| {
        extra.insert("kind".into(), json!(format!("future_{kind}")));
        extra.insert("v".into(), json!(3));
        extra.insert("labels".into(), json!(labels));
        Record::Other(extra)
    })
}
