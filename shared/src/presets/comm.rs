//! Tensor-parallel communication: what one allreduce costs, from a model of the node's topology
//! (the algorithm NCCL would pick) or from a curve measured by collbench on the real box. A
//! measured curve beats the model.
//!
//! The model follows NCCL's own cost model (src/graph/tuning.cc): every (algorithm, protocol)
//! pair costs `base + steps x hop + bytes / bandwidth`, and NCCL runs the cheapest. An
//! allreduce over n ranks takes 2(n-1) steps (ring, and tree inside a node, which is a chain).
//! The ranks step in lockstep, so each step waits for the slowest link any rank crosses: the
//! hop of the outermost topology level the group spans (a PCIe switch, a socket, the link
//! between sockets). Protocols: LL (low latency, half the bandwidth), LL128 (NVLink only) and
//! Simple (full bandwidth, ~5.7x the hop latency); NVLS (NVSwitch multicast) costs a flat
//! 25 µs whatever n.

use super::cards::{Interconnect, LinkKind};
use crate::jsonl::{self, Source};
use crate::record::{CollBackend, CollMode, CollOp, CollRecord, Record};

/// How an allreduce ran or would run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    RingLl,
    RingLl128,
    RingSimple,
    TreeLl,
    TreeSimple,
    Nvls,
    /// Read off a measured curve.
    Measured,
}

impl Algo {
    /// As a `sim_plan.allreduce_algo`.
    pub fn wire(self) -> crate::record::AllreduceAlgo {
        crate::record::AllreduceAlgo::parse(self.name())
    }

    pub fn name(self) -> &'static str {
        match self {
            Algo::RingLl => "ring/LL",
            Algo::RingLl128 => "ring/LL128",
            Algo::RingSimple => "ring/Simple",
            Algo::TreeLl => "tree/LL",
            Algo::TreeSimple => "tree/Simple",
            Algo::Nvls => "nvls",
            Algo::Measured => "measured",
        }
    }
}

/// One allreduce's cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AllreduceCost {
    pub us: f64,
    pub algo: Algo,
}

/// NCCL's base latencies, µs (tuning.cc `baseLatencies`): Ring LL, LL128, Simple; Tree LL,
/// Simple.
const BASE_RING: [f64; 3] = [6.6, 14.0, 8.4];
const BASE_TREE: [f64; 2] = [6.8, 8.4];
/// Per-hop latency of each protocol relative to LL (tuning.cc `hwLatencies`, PCI row: Ring
/// 1.0/2.5/5.7, Tree 1.0/-/4.0; NVLink LL128 1.9 against LL 0.6).
const HOP_LL128: f64 = 1.9 / 0.6;
const HOP_RING_SIMPLE: f64 = 5.7;
const HOP_TREE_SIMPLE: f64 = 4.0;
/// NVLS's latency, µs, flat in n (tuning.cc: the NVLS hop is 25 µs and its base 0).
const NVLS_US: f64 = 25.0;

impl Interconnect {
    /// The modelled allreduce of `bytes` over `ranks` consecutive GPUs: the cheapest
    /// (algorithm, protocol) NCCL could run.
    pub fn allreduce(&self, ranks: u32, bytes: f64) -> AllreduceCost {
        if ranks <= 1 {
            return AllreduceCost {
                us: 0.0,
                algo: Algo::RingLl,
            };
        }
        let level = self.level_for(ranks);
        let n = f64::from(ranks);
        let steps = 2.0 * (n - 1.0);
        let hop = level.hop_us;
        // Bytes each rank moves in a ring allreduce, over the protocol's bus bandwidth (GB/s is
        // 1e3 bytes per µs).
        let ring_bytes = bytes * steps / n;
        let bw = level.busbw_gbps * 1e3;
        let mut options = vec![
            (
                Algo::RingLl,
                BASE_RING[0] + steps * hop + ring_bytes / (0.5 * bw),
            ),
            (
                Algo::RingSimple,
                BASE_RING[2] + steps * hop * HOP_RING_SIMPLE + ring_bytes / bw,
            ),
            // Tree: half the algorithm bandwidth; LL's tree bandwidth is a further /3.8.
            (
                Algo::TreeLl,
                BASE_TREE[0] + steps * hop + bytes / (0.92 * bw / 3.8 * 0.5),
            ),
            (
                Algo::TreeSimple,
                BASE_TREE[1] + steps * hop * HOP_TREE_SIMPLE + bytes / (0.92 * bw * 0.5),
            ),
        ];
        if self.kind == LinkKind::Nvlink {
            options.push((
                Algo::RingLl128,
                BASE_RING[1] + steps * hop * HOP_LL128 + ring_bytes / (0.92 * bw),
            ));
        }
        if let Some(nvls) = self.nvls_busbw_gbps {
            options.push((Algo::Nvls, NVLS_US + ring_bytes / (nvls * 1e3)));
        }
        let (algo, us) = options
            .into_iter()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("options is never empty");
        AllreduceCost { us, algo }
    }

    /// A point-to-point hand-off of `bytes` from GPU `from` to GPU `to` (pipeline stages), µs.
    pub fn p2p_us(&self, from: u32, to: u32, bytes: f64) -> f64 {
        let level = self.level_between(from, to);
        BASE_RING[0] + level.hop_us + bytes / (0.5 * level.busbw_gbps * 1e3)
    }
}

/// The statistic a measured allreduce time is read as. A decode step waits for every one of
/// its allreduces, so what a step pays is their sum: n x the mean. The mean, not the median.
pub const STATISTIC: &str = "mean";

/// Allreduce time against message size, measured by collbench (`coll` records): one rank
/// count, one backend, the latency mode when present. Read with log-log interpolation between
/// the measured sizes, flat below the smallest and linear in bytes beyond the largest.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredCurve {
    /// (bytes, mean µs), by size.
    points: Vec<(f64, f64)>,
    pub ranks: u32,
    pub backend: CollBackend,
    pub mode: CollMode,
}

impl MeasuredCurve {
    /// The allreduce curve for `ranks` ranks from `coll` records. With `exact` false and no
    /// records at that rank count, the curve of the nearest rank count measured (the caller
    /// says so). None without allreduce records.
    pub fn from_records(coll: &[CollRecord], ranks: u32, exact: bool) -> Option<MeasuredCurve> {
        // Records that are no measurement are refused where a file is read; here they are
        // left out, so no curve holds a point that is not a time.
        let all: Vec<&CollRecord> = coll
            .iter()
            .filter(|c| c.op == CollOp::Allreduce && unusable(c).is_none())
            .collect();
        let nearest = all
            .iter()
            .map(|c| c.ranks)
            .min_by_key(|r| (r.abs_diff(ranks), *r))?;
        if exact && nearest != ranks {
            return None;
        }
        let mut pts: Vec<&CollRecord> = all.into_iter().filter(|c| c.ranks == nearest).collect();
        // A decode step waits for each allreduce: prefer the latency mode when both are there,
        // then the backend most records have (one curve, one backend).
        if pts.iter().any(|c| c.mode == CollMode::Latency) {
            pts.retain(|c| c.mode == CollMode::Latency);
        }
        let nccl = pts.iter().any(|c| c.backend == CollBackend::Nccl);
        let backend = if nccl {
            CollBackend::Nccl
        } else {
            pts[0].backend.clone()
        };
        pts.retain(|c| c.backend == backend);
        let mode = pts[0].mode.clone();
        let mut points: Vec<(f64, f64)> = pts
            .iter()
            .map(|c| (c.bytes as f64, c.time_us.mean))
            .collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        // One value per size: several runs of a size average.
        let mut merged: Vec<(f64, f64, u32)> = Vec::new();
        for (b, t) in points {
            match merged.last_mut() {
                Some(last) if last.0 == b => {
                    last.1 += t;
                    last.2 += 1;
                }
                _ => merged.push((b, t, 1)),
            }
        }
        Some(MeasuredCurve {
            points: merged
                .into_iter()
                .map(|(b, t, k)| (b, t / f64::from(k)))
                .collect(),
            ranks: nearest,
            backend,
            mode,
        })
    }

    /// Sizes measured.
    pub fn sizes(&self) -> usize {
        self.points.len()
    }

    /// The warning a figure read off this curve at sizes up to `needed_bytes` carries, when the
    /// curve cannot hold it up: one size measured (every other one is extrapolated from it),
    /// or a need more than [`EXTRAPOLATION_FACTOR`] times the largest size measured.
    pub fn extrapolation_warning(&self, needed_bytes: f64) -> Option<String> {
        let (smallest, largest) = (self.points[0].0, self.points[self.points.len() - 1].0);
        let fix = format!(
            "measure the sizes it needs: collbench -np {} --mode latency -b 1K -e {}",
            self.ranks,
            size_flag(needed_bytes.max(largest))
        );
        if self.points.len() == 1 {
            return Some(format!(
                "one size measured ({smallest} B): every other size is extrapolated from it (flat below, linear in bytes above); {fix}"
            ));
        }
        (needed_bytes > EXTRAPOLATION_FACTOR * largest).then(|| {
            format!(
                "the largest size measured is {largest} B but a step here needs up to {needed_bytes} B: extrapolated linearly past {EXTRAPOLATION_FACTOR}x the curve; {fix}"
            )
        })
    }

    /// The measured time of one allreduce of `bytes`, µs.
    pub fn us_at(&self, bytes: f64) -> f64 {
        let pts = &self.points;
        let (first, last) = (pts[0], pts[pts.len() - 1]);
        if bytes <= first.0 {
            return first.1;
        }
        for w in pts.windows(2) {
            let ((xa, ya), (xb, yb)) = (w[0], w[1]);
            if bytes <= xb {
                let (lxa, lxb) = (xa.ln(), xb.ln());
                let (lya, lyb) = (ya.max(1e-9).ln(), yb.max(1e-9).ln());
                let f = if lxb > lxa {
                    (bytes.ln() - lxa) / (lxb - lxa)
                } else {
                    0.0
                };
                return (lya + f * (lyb - lya)).exp();
            }
        }
        // Beyond the largest size: bandwidth-bound, linear in bytes.
        last.1 * bytes / last.0
    }

    /// `tcp, 2 ranks, latency mode, mean`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} ranks, {} mode, {STATISTIC}",
            self.backend, self.ranks, self.mode
        )
    }

    /// The caveat a figure from the tcp backend carries.
    pub fn tcp_caveat(&self) -> Option<&'static str> {
        (self.backend == CollBackend::Tcp).then_some(
            "tcp backend: processes over TCP on this box, which says nothing about NCCL on GPUs",
        )
    }
}

/// The longest one measured collective may take, µs (an hour): beyond it a time is not a
/// measurement, and a step of 160 of them overflows every duration downstream.
pub const MAX_COLL_US: f64 = 3.6e9;

/// Why a `coll` record cannot be a point of a measured curve, if it cannot: its mean is not a
/// finite positive time (at most [`MAX_COLL_US`]), it moved no bytes, or the collective
/// computed wrong results.
pub fn unusable(c: &CollRecord) -> Option<String> {
    let mean = c.time_us.mean;
    if !mean.is_finite() || mean <= 0.0 || mean > MAX_COLL_US {
        // 1e308 as 1e308, not 309 digits.
        let shown = if mean.abs() >= 1e15 {
            format!("{mean:e}")
        } else {
            mean.to_string()
        };
        return Some(format!(
            "time_us.mean is {shown}: a measured time is finite, positive and under an hour ({MAX_COLL_US} us)"
        ));
    }
    if c.bytes == 0 {
        return Some("bytes is 0: a measured collective moves at least one element".into());
    }
    if c.wrong > 0 {
        return Some(format!(
            "wrong is {}: the collective computed wrong results, so its times are not those of a working {}",
            c.wrong, c.op
        ));
    }
    None
}

/// How far past its largest size a measured curve is read without a warning.
pub const EXTRAPOLATION_FACTOR: f64 = 4.0;

/// `bytes` as collbench's -e takes it: the next power of two in K/M/G.
fn size_flag(bytes: f64) -> String {
    let pow = (bytes.max(1.0).log2().ceil() as u32).min(40);
    match pow {
        0..=9 => format!("{}", 1u64 << pow),
        10..=19 => format!("{}K", 1u64 << (pow - 10)),
        20..=29 => format!("{}M", 1u64 << (pow - 20)),
        _ => format!("{}G", 1u64 << (pow - 30)),
    }
}

/// The `coll` records of a file of records (other kinds are skipped; a malformed line, or a
/// `coll` record that cannot be a measurement ([`unusable`]), is an error naming FILE:LINE).
pub fn coll_records_from(path: &str) -> anyhow::Result<Vec<CollRecord>> {
    let mut out = Vec::new();
    jsonl::read_all(&[Source::parse(path)], true, |line| {
        let location = line.location();
        if let Record::Coll(c) = line.record {
            if let Some(why) = unusable(&c) {
                return Err(crate::diag::usage(format!(
                    "{location}: {why} (measure again: collbench -np N --mode latency -b 1K -e 4M)"
                )));
            }
            out.push(c);
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::load_hardware;
    use super::*;
    use crate::record::Dist;

    fn us(hw: &str, ranks: u32, bytes: f64) -> AllreduceCost {
        load_hardware(hw)
            .unwrap()
            .interconnect
            .allreduce(ranks, bytes)
    }

    /// The card was once calibrated on the notes' 8.9 ms per step over 122 allreduces (73 us
    /// each), but that 8.9 ms is the BF16 GEMMs and the allreduces together: an upper bound.
    /// The measured dual-socket figures (decode-step costs, rtx6kpro broadcom-switches) are
    /// the calibration now.
    #[test]
    fn rtx_pro_6000_dual_socket_matches_the_measured_57_to_68_us_at_tp8() {
        // Measured, 8 ranks across the sockets: 4 KB 57.2, 8 KB 57.6, 64 KB 67.8 us.
        for (bytes, measured) in [(4096.0, 57.2), (8192.0, 57.6), (65536.0, 67.8)] {
            let c = us("rtx-pro-6000", 8, bytes);
            assert!((c.us - measured).abs() < 0.05 * measured, "{bytes}: {c:?}");
            assert_eq!(c.algo, Algo::RingLl);
        }
        // Kimi-K2 class at batch 1: 7168 x 2 B = 14 KiB, inside the measured range and under
        // the notes' upper bound of 73 us.
        let kimi = us("rtx-pro-6000", 8, 14336.0);
        assert!((57.0..68.0).contains(&kimi.us), "{kimi:?}");
        // Inside one socket: 13-16 us, as measured at 4 ranks.
        let c4 = us("rtx-pro-6000", 4, 10240.0);
        assert!((12.5..16.0).contains(&c4.us), "{c4:?}");
        // The single-CPU switch box: ~24 us at 8 ranks, as measured.
        let sw = us("rtx-pro-6000-switch", 8, 14336.0);
        assert!((22.0..28.0).contains(&sw.us), "{sw:?}");
    }

    #[test]
    fn allreduce_grows_with_ranks_and_switches_protocol_with_size() {
        for hw in ["h200", "rtx-pro-6000", "l40s", "a100-80g"] {
            let t: Vec<f64> = [2, 4, 8].iter().map(|&n| us(hw, n, 16384.0).us).collect();
            assert!(t[0] < t[1] && t[1] < t[2], "{hw}: {t:?}");
            assert_eq!(us(hw, 1, 16384.0).us, 0.0);
        }
        // Small messages take a low-latency protocol, large ones a bandwidth one.
        assert_eq!(us("h200", 8, 16384.0).algo, Algo::RingLl);
        let big = us("h200", 8, 256e6);
        assert!(
            matches!(big.algo, Algo::Nvls | Algo::RingLl128 | Algo::RingSimple),
            "{big:?}"
        );
        assert_eq!(us("rtx-pro-6000", 8, 256e6).algo, Algo::RingSimple);
        // Bandwidth-bound: 256 MB at 480 GB/s NVLS busbw x 14/8 = ~0.93 ms.
        assert!((800.0..1100.0).contains(&big.us), "{big:?}");
    }

    fn coll(ranks: u32, bytes: u64, mean: f64, mode: &str, backend: &str) -> CollRecord {
        let d = Dist {
            n: 5,
            mean,
            stddev: 0.0,
            min: mean,
            p50: mean * 0.9,
            p90: mean,
            p95: mean,
            p99: mean,
            p999: mean,
            max: mean,
        };
        CollRecord {
            v: 1,
            ts: String::new(),
            labels: Default::default(),
            op: "allreduce".into(),
            backend: backend.into(),
            algo: "ring".into(),
            ranks,
            hosts: 1,
            bytes,
            count: bytes / 4,
            dtype: "f32".into(),
            redop: "sum".into(),
            mode: mode.into(),
            time_us: d,
            algbw_gbps: 0.0,
            busbw_gbps: 0.0,
            wrong: 0,
            checked: true,
            iters: 5,
            warmup: 1,
            root: None,
            lost_core_waits: None,
            extra: Default::default(),
        }
    }

    #[test]
    fn measured_curve_reads_the_mean_interpolates_and_prefers_latency_mode() {
        let recs = vec![
            coll(2, 1024, 10.0, "latency", "tcp"),
            coll(2, 4096, 40.0, "latency", "tcp"),
            coll(2, 4096, 1.0, "pipelined", "tcp"),
            coll(4, 1024, 99.0, "latency", "tcp"),
        ];
        let c = MeasuredCurve::from_records(&recs, 2, true).unwrap();
        assert_eq!((c.ranks, c.mode.as_str(), c.sizes()), (2, "latency", 2));
        assert_eq!(c.us_at(512.0), 10.0);
        assert!((c.us_at(2048.0) - 20.0).abs() < 1e-9);
        assert_eq!(c.us_at(8192.0), 80.0);
        assert!(c.tcp_caveat().is_some());
        assert!(MeasuredCurve::from_records(&recs, 8, true).is_none());
        assert_eq!(
            MeasuredCurve::from_records(&recs, 8, false).unwrap().ranks,
            4
        );
        assert!(MeasuredCurve::from_records(&[], 2, false).is_none());
    }

    /// C1-C4: a negative, zero, huge or NaN-making mean, 0 bytes, or wrong results became
    /// 413 tok/s instead of 6.3, nulls, or an engine panic. Each is refused at FILE:LINE.
    #[test]
    fn coll_records_that_are_no_measurement_are_refused_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("coll.jsonl");
        let p = path.to_str().unwrap();
        let good = coll(2, 1024, 10.0, "latency", "tcp");
        type Spoil = fn(&mut CollRecord);
        let cases: [(&str, Spoil); 5] = [
            ("time_us.mean is -1000", |c| c.time_us.mean = -1000.0),
            ("time_us.mean is 0", |c| c.time_us.mean = 0.0),
            ("time_us.mean is 1e20", |c| c.time_us.mean = 1e20),
            ("bytes is 0", |c| c.bytes = 0),
            ("wrong is 12345", |c| c.wrong = 12345),
        ];
        for (want, spoil) in cases {
            let mut bad = good.clone();
            spoil(&mut bad);
            let lines = [&good, &bad]
                .map(|c| crate::record::to_line_with_kind(c).unwrap())
                .join("\n");
            std::fs::write(&path, lines + "\n").unwrap();
            let err = coll_records_from(p).unwrap_err().to_string();
            assert!(err.starts_with(&format!("{p}:2: {want}")), "{want}: {err}");
            // Read off records directly, such a point is left out of the curve.
            let curve = MeasuredCurve::from_records(&[good.clone(), bad], 2, true).unwrap();
            assert_eq!((curve.sizes(), curve.us_at(1024.0)), (1, 10.0));
        }
        std::fs::write(
            &path,
            crate::record::to_line_with_kind(&good).unwrap() + "\n",
        )
        .unwrap();
        assert_eq!(coll_records_from(p).unwrap().len(), 1);
    }

    /// C5: one size measured was extrapolated to megabytes without a word.
    #[test]
    fn a_curve_of_one_size_or_read_far_past_its_largest_size_says_it_is_extrapolated() {
        let one =
            MeasuredCurve::from_records(&[coll(2, 8, 5.0, "latency", "tcp")], 2, true).unwrap();
        let w = one.extrapolation_warning(8.0).unwrap();
        assert!(
            w.starts_with("one size measured (8 B)") && w.contains("collbench -np 2"),
            "{w}"
        );
        let two = MeasuredCurve::from_records(
            &[
                coll(2, 1024, 10.0, "latency", "tcp"),
                coll(2, 4 << 20, 100.0, "latency", "tcp"),
            ],
            2,
            true,
        )
        .unwrap();
        assert_eq!(two.extrapolation_warning(16.0 * 1024.0 * 1024.0), None);
        let far = two.extrapolation_warning(64.0 * 1024.0 * 1024.0).unwrap();
        assert!(far.contains("-e 64M"), "{far}");
    }
}
