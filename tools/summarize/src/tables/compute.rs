//! The compute half of a decode step, from collbench's `gemm` and `device_limits` records: their
//! tables. The bandwidth the roofline may take from them is `roofline::measured`; the decode
//! budget `gemm_step` records feed is judged in `roofline::step`.

use crate::notes::note::Facts;
use crate::render::{Cell, Column, Table};
use crate::tables::view::View;
use servbench::record::{DeviceLimitsRecord, GemmBackend, GemmRecord};

/// The GEMMs timed one by one.
pub fn gemms(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.gemms.as_slice() {
        [] => Vec::new(),
        gemms => vec![gemm_table(gemms)],
    }
}

/// The device's measured limits.
pub fn limits(facts: &Facts, _view: &View) -> Vec<Table> {
    match facts.inputs.limits.as_slice() {
        [] => Vec::new(),
        limits => vec![limits_table(limits)],
    }
}

fn col(name: &str, header: &str) -> Column {
    Column {
        name: name.into(),
        header: header.into(),
    }
}

/// One row per timed GEMM: time, TFLOP/s and bytes/s against the card's peaks.
pub fn gemm_table(gemms: &[GemmRecord]) -> Table {
    let mut t = Table::new(
        "gemms",
        vec![
            col("backend", "backend"),
            col("model", "model"),
            col("tp", "TP"),
            col("batch", "batch"),
            col("gemm", "gemm"),
            col("mnk", "m x n x k"),
            col("dtype", "dtype"),
            col("per_step", "per step"),
            col("time_us_p50", "p50 us"),
            col("tflops", "TFLOP/s"),
            col("gbps", "GB/s"),
            col("peak_pct", "% peak FLOP/s"),
            col("bw_pct", "% peak BW"),
        ],
    );
    for g in gemms {
        t.push(
            vec![
                Cell::Text(g.backend.to_string()),
                Cell::Text(g.model.clone().unwrap_or_default()),
                Cell::int(g.tp),
                Cell::int(g.batch),
                Cell::Text(g.name.to_string()),
                Cell::Text(format!("{}x{}x{}", g.m, g.n, g.k)),
                Cell::Text(g.dtype.to_string()),
                Cell::int(g.per_step),
                Cell::num(Some(g.time_us.p50)),
                Cell::num(Some(g.tflops)),
                Cell::num(Some(g.gbps)),
                Cell::pct(Some(100.0 * g.tflops / g.peak_tflops.max(1e-9))),
                Cell::pct(Some(100.0 * g.gbps / g.peak_mem_gbps.max(1e-9))),
            ],
            0,
        );
    }
    if gemms.iter().any(|g| g.backend == GemmBackend::Cpu) {
        t.notes.push(
            "backend cpu: these GEMMs ran on this machine's cores in f32; the peaks are the hardware card's, for scale only".into(),
        );
    }
    t
}

/// One row per measurement of the device's limits.
pub fn limits_table(limits: &[DeviceLimitsRecord]) -> Table {
    let mut t = Table::new(
        "device limits",
        vec![
            col("backend", "backend"),
            col("device", "device"),
            col("bytes", "bytes"),
            col("copy_gbps", "copy GB/s"),
            col("read_gbps", "read GB/s"),
            col("datasheet_gbps", "datasheet GB/s"),
            col("launch_us", "launch us"),
            col("launch_sync_us", "launch+sync us"),
        ],
    );
    for l in limits {
        t.push(
            vec![
                Cell::Text(l.backend.to_string()),
                Cell::Text(l.device.clone()),
                Cell::int(l.bytes),
                Cell::num(Some(l.copy_gbps)),
                Cell::num(Some(l.read_gbps)),
                Cell::num(Some(l.datasheet_mem_gbps)),
                Cell::num(Some(l.launch_us.p50)),
                Cell::num(l.launch_sync_us.map(|d| d.p50)),
            ],
            0,
        );
    }
    t
}
