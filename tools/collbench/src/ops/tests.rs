use super::*;
use crate::dtype::Dtype;

fn op(name: &str) -> Op {
    Op::named(name).unwrap_or_else(|| panic!("{name} is not registered"))
}

/// nccl-tests' definitions (src/*.cu `*GetBw`, doc/PERFORMANCE.md), restated independently:
/// algbw = S / t with S as nccl-tests prints `size`; busbw = algbw x factor.
fn nccl_tests_busbw(op: Op, per_rank_or_count_bytes: f64, n: f64, t_s: f64) -> (f64, f64) {
    match op.name() {
        // all_reduce.cu: baseBw = count*typesize / sec; busBw = baseBw * 2*(n-1)/n
        "allreduce" => {
            let alg = per_rank_or_count_bytes / t_s;
            (alg, alg * 2.0 * (n - 1.0) / n)
        }
        // all_gather.cu: baseBw = sendcount*typesize*n / sec; factor (n-1)/n
        "allgather" | "reduce_scatter" | "alltoall" => {
            let alg = per_rank_or_count_bytes * n / t_s;
            (alg, alg * (n - 1.0) / n)
        }
        "broadcast" | "sendrecv" => {
            let alg = per_rank_or_count_bytes / t_s;
            (alg, alg)
        }
        other => panic!("restate nccl-tests' bandwidth for {other} here"),
    }
}

#[test]
fn busbw_matches_nccl_tests_definitions() {
    for &op in COLLECTIVES {
        for n in [2usize, 3, 4, 8] {
            let requested = 64u64 << 20;
            let shape = op.shape(requested, Dtype::F32, n);
            let t_s = 0.0123;
            let per = match op.name() {
                "allgather" => shape.send_elems as f64 * 4.0,
                "reduce_scatter" => shape.recv_elems as f64 * 4.0,
                "alltoall" => shape.send_elems as f64 * 4.0 / n as f64,
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
    assert_eq!(op("allreduce").bus_factor(4), 1.5);
    assert_eq!(op("allreduce").bus_factor(1), 0.0);
    assert_eq!(op("allgather").bus_factor(4), 0.75);
    assert_eq!(op("reduce_scatter").bus_factor(2), 0.5);
    assert_eq!(op("alltoall").bus_factor(8), 0.875);
    assert_eq!(op("broadcast").bus_factor(8), 1.0);
    assert_eq!(op("sendrecv").bus_factor(8), 1.0);
}

#[test]
fn the_registry_has_every_collective_once_under_its_flag() {
    let names: Vec<&str> = COLLECTIVES.iter().map(|op| op.name()).collect();
    assert_eq!(
        names,
        [
            "allreduce",
            "allgather",
            "reduce_scatter",
            "broadcast",
            "alltoall",
            "sendrecv"
        ]
    );
    for &op in COLLECTIVES {
        // clap spells values with dashes, records with underscores.
        assert_eq!(op.flag(), op.name().replace('_', "-"), "{op:?}");
        assert_eq!(Op::from_str(op.flag(), false), Ok(op));
        assert!(!op.algos().is_empty(), "{op:?} has no tcp algorithm");
    }
    assert_eq!(
        COLLECTIVES.iter().filter(|op| op.rooted()).count(),
        1,
        "only broadcast has a root"
    );
}

#[test]
fn shapes_round_like_nccl_tests() {
    let s = op("allreduce").shape(28, Dtype::F32, 3);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (7, 7, 7, 28)
    );
    let s = op("allgather").shape(28, Dtype::F32, 3);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (2, 6, 6, 24)
    );
    let s = op("reduce_scatter").shape(4, Dtype::F32, 4);
    assert_eq!(
        (s.send_elems, s.recv_elems, s.count, s.bytes),
        (4, 1, 4, 16)
    );
    let s = op("alltoall").shape(8, Dtype::Bf16, 2);
    assert_eq!((s.send_elems, s.recv_elems, s.count, s.bytes), (4, 4, 4, 8));
    let s = op("sendrecv").shape(3, Dtype::F32, 2);
    assert_eq!(s.count, 1);
}

#[test]
fn auto_picks_by_size_and_forcing_checks_the_op() {
    assert_eq!(
        op("allreduce").resolve_algo(Algo::Auto, 8),
        Ok(Algo::RecursiveDoubling)
    );
    assert_eq!(
        op("allreduce").resolve_algo(Algo::Auto, 64 << 20),
        Ok(Algo::Ring)
    );
    assert_eq!(op("broadcast").resolve_algo(Algo::Auto, 8), Ok(Algo::Tree));
    assert_eq!(op("allreduce").resolve_algo(Algo::Ring, 8), Ok(Algo::Ring));
    let err = op("allreduce").resolve_algo(Algo::Tree, 8).unwrap_err();
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
