use super::*;
use crate::dtype::Dtype;

/// nccl-tests' definitions (src/*.cu `*GetBw`, doc/PERFORMANCE.md), restated independently:
/// algbw = S / t with S as nccl-tests prints `size`; busbw = algbw x factor.
fn nccl_tests_busbw(op: OpKind, per_rank_or_count_bytes: f64, n: f64, t_s: f64) -> (f64, f64) {
    match op {
        // all_reduce.cu: baseBw = count*typesize / sec; busBw = baseBw * 2*(n-1)/n
        OpKind::Allreduce => {
            let alg = per_rank_or_count_bytes / t_s;
            (alg, alg * 2.0 * (n - 1.0) / n)
        }
        // all_gather.cu: baseBw = sendcount*typesize*n / sec; factor (n-1)/n
        OpKind::Allgather | OpKind::ReduceScatter | OpKind::Alltoall => {
            let alg = per_rank_or_count_bytes * n / t_s;
            (alg, alg * (n - 1.0) / n)
        }
        OpKind::Broadcast | OpKind::Sendrecv => {
            let alg = per_rank_or_count_bytes / t_s;
            (alg, alg)
        }
    }
}

#[test]
fn busbw_matches_nccl_tests_definitions() {
    let ops = [
        OpKind::Allreduce,
        OpKind::Allgather,
        OpKind::ReduceScatter,
        OpKind::Broadcast,
        OpKind::Alltoall,
        OpKind::Sendrecv,
    ];
    for op in ops {
        for n in [2usize, 3, 4, 8] {
            let requested = 64u64 << 20;
            let shape = op.shape(requested, Dtype::F32, n);
            let t_s = 0.0123;
            let per = match op {
                OpKind::Allgather => shape.send_elems as f64 * 4.0,
                OpKind::ReduceScatter => shape.recv_elems as f64 * 4.0,
                OpKind::Alltoall => shape.send_elems as f64 * 4.0 / n as f64,
                _ => shape.count as f64 * 4.0,
            };
            let (alg_ref, bus_ref) = nccl_tests_busbw(op, per, n as f64, t_s);
            let (alg, bus) = crate::harness::bandwidths(op, &shape, n, t_s * 1e6);
            assert!(
                (alg - alg_ref / 1e9).abs() < 1e-9 * alg,
                "{op:?} n={n} algbw {alg} vs {alg_ref}"
            );
            assert!(
                (bus - bus_ref / 1e9).abs() < 1e-9 * bus,
                "{op:?} n={n} busbw {bus} vs {bus_ref}"
            );
        }
    }
    // The factors themselves, as the README documents them.
    assert_eq!(OpKind::Allreduce.bus_factor(4), 1.5);
    assert_eq!(OpKind::Allreduce.bus_factor(1), 0.0);
    assert_eq!(OpKind::Allgather.bus_factor(4), 0.75);
    assert_eq!(OpKind::ReduceScatter.bus_factor(2), 0.5);
    assert_eq!(OpKind::Alltoall.bus_factor(8), 0.875);
    assert_eq!(OpKind::Broadcast.bus_factor(8), 1.0);
    assert_eq!(OpKind::Sendrecv.bus_factor(8), 1.0);
}

#[test]
fn shapes_round_like_nccl_tests() {
    let s = OpKind::Allreduce.shape(28, Dtype::F32, 3);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (7, 7, 7, 28)
    );
    let s = OpKind::Allgather.shape(28, Dtype::F32, 3);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (2, 6, 6, 24)
    );
    let s = OpKind::ReduceScatter.shape(4, Dtype::F32, 4);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (4, 1, 4, 16)
    );
    let s = OpKind::Alltoall.shape(8, Dtype::Bf16, 2);
    assert_eq!((s.send_elems, s.recv_elems, s.count, s.bytes), (4, 4, 4, 8));
    let s = OpKind::Sendrecv.shape(3, Dtype::F32, 2);
    assert_eq!(s.count, 1);
}

#[test]
fn auto_picks_by_size_and_forcing_checks_the_op() {
    assert_eq!(
        OpKind::Allreduce.resolve_algo(Algo::Auto, 8),
        Ok(Algo::RecursiveDoubling)
    );
    assert_eq!(
        OpKind::Allreduce.resolve_algo(Algo::Auto, 64 << 20),
        Ok(Algo::Ring)
    );
    assert_eq!(
        OpKind::Broadcast.resolve_algo(Algo::Auto, 8),
        Ok(Algo::Tree)
    );
    assert_eq!(
        OpKind::Allreduce.resolve_algo(Algo::Ring, 8),
        Ok(Algo::Ring)
    );
    let err = OpKind::Allreduce.resolve_algo(Algo::Tree, 8).unwrap_err();
    assert!(err.contains("recursive_doubling, ring"), "{err}");
}

#[test]
fn split_covers_everything_once() {
    for count in [0usize, 1, 5, 7, 100] {
        for parts in [1usize, 2, 3, 4] {
            let ranges = split(count, parts);
            assert_eq!(ranges.len(), parts);
            assert_eq!(ranges.iter().map(|r| r.len()).sum::<usize>(), count);
            for w in ranges.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
        }
    }
}
