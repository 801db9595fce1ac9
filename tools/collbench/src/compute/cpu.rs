//! The CPU backend: f32 GEMMs through the `gemm` crate on this machine's cores, memory
//! bandwidth by memcpy and a summing pass on every thread. It runs the same harness, shapes and
//! records as a GPU, so they are tested anywhere; its figures say `backend: cpu`.
//!
//! Weights are laid out as a linear layer stores them (`W[n x k]`, row-major) and used
//! transposed, `Y = X . W^T`, as `x @ w.T` does in numpy and torch.

use super::shapes::GemmShape;
use super::{Device, GemmDtype, Limits};
use crate::measure::Iters;
use gemm::Parallelism;
use servbench::record::GemmTiming;
use std::hint::black_box;
use std::time::Instant;

/// Operands of one shape.
struct Operands {
    shape: GemmShape,
    x: Vec<f32>,
    /// `copies` weight matrices, cycled through call by call.
    w: Vec<Vec<f32>>,
    y: Vec<f32>,
    next: usize,
}

pub struct Cpu {
    threads: usize,
    loaded: Vec<Operands>,
}

/// Values in [-0.5, 0.5): deterministic, not all alike (a GEMM's speed must not depend on
/// zeros), and small enough that sums stay finite.
fn fill(len: usize, seed: u64) -> Vec<f32> {
    let mut v = vec![0.0f32; len];
    huge_pages(&mut v);
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for x in &mut v {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *x = (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
    }
    v
}

impl Cpu {
    pub fn new(threads: Option<usize>) -> Cpu {
        let threads = threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        Cpu {
            threads,
            loaded: Vec::new(),
        }
    }

    fn parallelism(&self) -> Parallelism {
        if self.threads > 1 {
            Parallelism::Rayon(self.threads)
        } else {
            Parallelism::None
        }
    }

    /// One call of `o`'s GEMM with its next weight copy.
    fn call(o: &mut Operands, par: Parallelism) {
        let (m, n, k) = (o.shape.m as usize, o.shape.n as usize, o.shape.k as usize);
        let w = &o.w[o.next];
        o.next = (o.next + 1) % o.w.len();
        // SAFETY: x is m x k row-major, w is n x k row-major read as its transpose (k x n with
        // column stride k, row stride 1), y is m x n row-major: every index the strides reach
        // lies inside its vector, and y does not alias x or w.
        unsafe {
            gemm::gemm(
                m,
                n,
                k,
                o.y.as_mut_ptr(),
                1,
                n as isize,
                false,
                o.x.as_ptr(),
                1,
                k as isize,
                w.as_ptr(),
                k as isize,
                1,
                0.0,
                1.0,
                false,
                false,
                false,
                par,
            );
        }
        black_box(&o.y);
    }
}

/// The CPU's model name from /proc/cpuinfo.
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

/// Asks for transparent huge pages on a large buffer, as numpy does for its arrays: with 4 KiB
/// pages a pass over hundreds of MiB spends much of its time on TLB misses (measured here:
/// 7-9 GB/s against numpy's 11-12 for the same memcpy).
fn huge_pages<T>(buf: &mut [T]) {
    const PAGE: usize = 4096;
    let start = buf.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(buf);
    let aligned = start.div_ceil(PAGE) * PAGE;
    if end > aligned + (2 << 20) {
        // SAFETY: the range lies inside `buf`'s allocation and is page-aligned; MADV_HUGEPAGE
        // only changes how the kernel backs it (a refusal is harmless and ignored).
        unsafe {
            libc::madvise(
                aligned as *mut libc::c_void,
                (end - aligned) / PAGE * PAGE,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

/// A buffer of `len` values made by `f`, on huge pages where the kernel allows.
fn buffer<T: Copy + Default>(len: usize, f: impl Fn(usize) -> T) -> Vec<T> {
    let mut v = vec![T::default(); len];
    huge_pages(&mut v);
    for (i, x) in v.iter_mut().enumerate() {
        *x = f(i);
    }
    v
}

/// Splits `len` into `parts` nearly equal ranges.
fn ranges(len: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.max(1);
    (0..parts)
        .map(|i| (len * i / parts)..(len * (i + 1) / parts))
        .collect()
}

/// Sums a slice eight lanes at a time, so the compiler vectorizes the read.
fn sum_lanes(data: &[u64]) -> u64 {
    let mut acc = [0u64; 8];
    let chunks = data.chunks_exact(8);
    let tail: u64 = chunks.remainder().iter().fold(0, |a, &b| a.wrapping_add(b));
    for c in chunks {
        for (a, &b) in acc.iter_mut().zip(c) {
            *a = a.wrapping_add(b);
        }
    }
    acc.iter().fold(tail, |a, &b| a.wrapping_add(b))
}

/// `iters.timed` timed copies of `src` into `dst` and read passes over `src` on `threads`
/// threads, after `iters.warmup` untimed ones: microseconds each.
fn passes(src: &[u64], dst: &mut [u64], threads: usize, iters: Iters) -> (Vec<f64>, Vec<f64>) {
    let Iters { warmup, timed } = iters;
    let parts = ranges(src.len(), threads);
    let copy = |dst: &mut [u64]| {
        std::thread::scope(|s| {
            let mut rest = dst;
            for r in &parts {
                let (mine, tail) = rest.split_at_mut(r.len());
                rest = tail;
                let from = &src[r.clone()];
                s.spawn(move || mine.copy_from_slice(from));
            }
        });
    };
    let read = || {
        std::thread::scope(|s| {
            let handles: Vec<_> = parts
                .iter()
                .map(|r| {
                    let from = &src[r.clone()];
                    s.spawn(move || sum_lanes(from))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(0))
                .fold(0u64, u64::wrapping_add)
        })
    };
    let (mut copies, mut reads) = (Vec::new(), Vec::new());
    for i in 0..warmup + timed {
        let t = Instant::now();
        copy(dst);
        let copy_us = t.elapsed().as_secs_f64() * 1e6;
        let t = Instant::now();
        black_box(read());
        let read_us = t.elapsed().as_secs_f64() * 1e6;
        if i >= warmup {
            copies.push(copy_us);
            reads.push(read_us);
        }
    }
    (copies, reads)
}

impl Device for Cpu {
    fn backend(&self, _: GemmDtype) -> &'static str {
        "cpu"
    }

    fn name(&self) -> String {
        format!("{}, {} threads", cpu_model(), self.threads)
    }

    fn cache_bytes(&self) -> u64 {
        // Three times a large server L3 slice (32 MiB): enough that a weight read is a DRAM read.
        96 << 20
    }

    fn load(
        &mut self,
        shapes: &[GemmShape],
        copies: &[u32],
        dtype: GemmDtype,
    ) -> anyhow::Result<()> {
        if dtype != GemmDtype::F32 {
            return Err(servbench::cli::usage(format!(
                "--compute-backend cpu computes in f32, not {}: drop --dtype (the record names the card's type)",
                dtype.name()
            )));
        }
        self.loaded.clear();
        for (i, (shape, &copies)) in shapes.iter().zip(copies).enumerate() {
            let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
            self.loaded.push(Operands {
                shape: shape.clone(),
                x: fill(m * k, i as u64 + 1),
                w: (0..copies)
                    .map(|c| fill(n * k, 1000 + 64 * i as u64 + u64::from(c)))
                    .collect(),
                y: vec![0.0; m * n],
                next: 0,
            });
        }
        Ok(())
    }

    fn gemm_timing(&self) -> (GemmTiming, u32) {
        // Two clock reads cost tens of nanoseconds beside a GEMM on the cores: each call alone.
        (GemmTiming::PerCall, 1)
    }

    fn time_gemm(&mut self, i: usize, iters: Iters) -> anyhow::Result<Vec<f64>> {
        let par = self.parallelism();
        let o = &mut self.loaded[i];
        for _ in 0..iters.warmup {
            Cpu::call(o, par);
        }
        let mut samples = Vec::with_capacity(iters.timed as usize);
        for _ in 0..iters.timed {
            let t = Instant::now();
            Cpu::call(o, par);
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(samples)
    }

    fn time_sequence(&mut self, order: &[usize], reps: u32) -> anyhow::Result<Vec<f64>> {
        let par = self.parallelism();
        let mut samples = Vec::with_capacity(reps as usize);
        for rep in 0..=reps {
            let t = Instant::now();
            for &i in order {
                Cpu::call(&mut self.loaded[i], par);
            }
            // The first run is the warm-up.
            if rep > 0 {
                samples.push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
        Ok(samples)
    }

    fn memory_available(&self) -> Option<(u64, String)> {
        crate::limits::mem_available().map(|a| (a, "this host".into()))
    }

    fn limits(&mut self, bytes: u64, iters: Iters) -> anyhow::Result<Limits> {
        self.loaded.clear();
        let words = (bytes / 8) as usize;
        let src: Vec<u64> = buffer(words, |i| i as u64);
        let mut dst: Vec<u64> = buffer(words, |_| 0);
        let mut out = Limits::default();
        // One thread, then doubling up to --threads: the fastest is the machine's bandwidth
        // (on small VMs more threads can copy slower than one).
        let mut counts: Vec<usize> = std::iter::successors(Some(1), |&n| Some(n * 2))
            .take_while(|&n| n < self.threads)
            .collect();
        counts.push(self.threads);
        let (mut copy_best, mut read_best) = (1, 1);
        for &threads in &counts {
            let (copy_us, read_us) = passes(&src, &mut dst, threads, iters);
            let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
            if out.copy_us.is_empty() || mean(&copy_us) < mean(&out.copy_us) {
                (out.copy_us, copy_best) = (copy_us, threads);
            }
            if out.read_us.is_empty() || mean(&read_us) < mean(&out.read_us) {
                (out.read_us, read_best) = (read_us, threads);
            }
        }
        out.note = Some(format!(
            "copy fastest on {copy_best} thread(s), read on {read_best}"
        ));
        black_box(&dst);
        // No kernel launch on a CPU: the per-call overhead of the GEMM library on a 1x1x1
        // product is the nearest thing.
        let tiny = super::shapes::parse_shape("1x1x1").map_err(anyhow::Error::msg)?;
        self.load(&[tiny], &[1], GemmDtype::F32)?;
        let calls = Iters {
            warmup: iters.warmup * 10,
            timed: iters
                .timed
                .saturating_mul(50)
                .clamp(100, crate::limits::MAX_ITERS),
        };
        out.launch_us = self.time_gemm(0, calls)?;
        self.loaded.clear();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_gemm_computes_x_times_w_transposed() {
        let mut cpu = Cpu::new(Some(1));
        let shape = super::super::shapes::parse_shape("2x3x4").unwrap();
        cpu.load(std::slice::from_ref(&shape), &[1], GemmDtype::F32)
            .unwrap();
        let o = &mut cpu.loaded[0];
        o.x = (1..=8).map(|v| v as f32).collect();
        o.w[0] = (1..=12).map(|v| v as f32).collect();
        Cpu::call(o, Parallelism::None);
        // y[i][j] = sum_k x[i][k] w[j][k]
        let mut want = vec![0.0f32; 6];
        for i in 0..2 {
            for j in 0..3 {
                want[i * 3 + j] = (0..4).map(|k| o.x[i * 4 + k] * o.w[0][j * 4 + k]).sum();
            }
        }
        assert_eq!(o.y, want);
    }

    #[test]
    fn the_read_pass_sums_every_word() {
        let data: Vec<u64> = (0..1003).collect();
        assert_eq!(sum_lanes(&data), 1002 * 1003 / 2);
        let r = ranges(10, 3);
        assert_eq!(r.iter().map(|r| r.len()).sum::<usize>(), 10);
    }
}
