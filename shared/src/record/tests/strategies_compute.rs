//! Generators of collbench's compute-side kinds (`gemm`, `gemm_step`, `device_limits`) for
//! the round-trip properties, beside [`super::strategies`]'s of every other kind.

use super::super::*;
use super::strategies::{dist, extra, finite, labels};
use proptest::prelude::*;

pub(super) fn gemm() -> impl Strategy<Value = Record> {
    (
        labels(),
        extra(),
        dist(),
        1u32..512,
        finite(),
        any::<bool>(),
    )
        .prop_map(|(labels, extra, d, batch, x, custom)| {
            Record::Gemm(GemmRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                backend: "cpu".into(),
                device: "AMD EPYC, 2 threads".into(),
                model: (!custom).then(|| "llama-3.1-8b".into()),
                hardware: "h100".into(),
                tp: 2,
                batch,
                name: if custom { "custom" } else { "gate_up" }.into(),
                m: batch,
                n: 14336,
                k: 4096,
                per_step: 32,
                dtype: "f32".into(),
                card_dtype: (!custom).then(|| "bf16".into()),
                time_us: d,
                timing: if custom { "per_call" } else { "back_to_back" }.into(),
                calls_per_sample: if custom { 1 } else { 20 },
                tflops: x / 1000.0,
                gbps: x,
                peak_tflops: 989.0,
                peak_mem_gbps: 3350.0,
                weight_copies: 3,
                iters: 20,
                warmup: 5,
                extra,
            })
        })
}

pub(super) fn gemm_step() -> impl Strategy<Value = Record> {
    (labels(), extra(), dist(), 1u32..512, finite()).prop_map(|(labels, extra, d, batch, us)| {
        Record::GemmStep(GemmStepRecord {
            v: 1,
            ts: "2026-11-30T17:00:00.123Z".into(),
            labels,
            backend: "cublas".into(),
            device: "NVIDIA H200".into(),
            model: "llama-3.1-8b".into(),
            hardware: "h200".into(),
            tp: 1,
            batch,
            dtype: "bf16".into(),
            gemms_per_step: 128,
            flops_per_step: 1.4e10 * f64::from(batch),
            bytes_per_step: 1.4e10,
            gemm_us_per_step: us,
            sequence_us: d,
            graph_us: (batch % 2 == 0).then_some(d),
            launch_overhead_us_per_step: us / 10.0,
            roofline_us_per_step: us / 2.0,
            extra,
        })
    })
}

pub(super) fn device_limits() -> impl Strategy<Value = Record> {
    (labels(), extra(), dist(), finite(), any::<bool>()).prop_map(
        |(labels, extra, d, gbps, gpu)| {
            Record::DeviceLimits(DeviceLimitsRecord {
                v: 1,
                ts: "2026-11-30T17:00:00.123Z".into(),
                labels,
                backend: if gpu { "cublas" } else { "cpu" }.into(),
                device: "NVIDIA H200".into(),
                hardware: "h200".into(),
                bytes: 1 << 30,
                copy_us: d,
                copy_gbps: gbps,
                read_us: d,
                read_gbps: gbps * 1.2,
                launch_us: d,
                launch_sync_us: gpu.then_some(d),
                datasheet_mem_gbps: 4800.0,
                iters: 20,
                warmup: 5,
                extra,
            })
        },
    )
}
