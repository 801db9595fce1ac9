//! What collbench refuses before it starts anything: more local ranks than one host should
//! run, more timed iterations than it should keep samples of, and buffers larger than the
//! memory free where they go (collective buffers, GEMM operands, `limits` buffers: one bound,
//! [`refuse_beyond`]). Each is one usage line naming the flag and the bound (exit 2), instead
//! of thousands of processes or an allocation abort.

use crate::harness::RunConfig;
use servbench::cli;

/// Most ranks `-np` (or `decode --tp` on the tcp backend) starts on this host: each is a
/// process with a connection to every other, so 256 ranks hold 65,280 sockets.
pub const MAX_LOCAL_RANKS: usize = 256;

/// Refuses a rank count above [`MAX_LOCAL_RANKS`]; `flag` names where it came from.
pub fn check_local_ranks(flag: &str, n: usize) -> anyhow::Result<()> {
    if n > MAX_LOCAL_RANKS {
        return Err(cli::usage(format!(
            "{flag} {n}: at most {MAX_LOCAL_RANKS} ranks on one host (for more, spread them over hosts: --hosts, mpirun)"
        )));
    }
    Ok(())
}

/// Most iterations of any loop collbench times (`-n`, `-w`, `--step-iters`): one sample of
/// 8 bytes is kept per timed iteration (8 MB at the bound; on a GPU also one event each).
pub const MAX_ITERS: u32 = 1_000_000;

/// Refuses a count of iterations above [`MAX_ITERS`]; `flag` names it.
pub fn check_iters(flag: &str, n: u32) -> anyhow::Result<()> {
    if n > MAX_ITERS {
        return Err(cli::usage(format!(
            "{flag} {n}: at most {MAX_ITERS} iterations (each timed one keeps a sample; for a longer measurement run collbench again)"
        )));
    }
    Ok(())
}

/// Refuses `need` bytes of buffers beyond `available` bytes free in `place` (`this host`,
/// `GPU 0`): `FLAG: WHAT need X of buffers but PLACE has Y available: lower FLAG[HINT]`,
/// exit 2.
pub fn refuse_beyond(
    flag: &str,
    what: &str,
    need: u128,
    (available, place): (u64, &str),
    hint: &str,
) -> anyhow::Result<()> {
    if need > u128::from(available) {
        return Err(cli::usage(format!(
            "{flag}: {what} need {} of buffers but {place} has {} available: lower {flag}{hint}",
            human(need),
            human(u128::from(available))
        )));
    }
    Ok(())
}

/// Bytes one rank holds for the largest size of `cfg` in a world of `world`: its input and
/// output buffers, and scratch (staging and a working copy) as large again.
pub fn rank_bytes(cfg: &RunConfig, world: usize) -> u128 {
    let esz = cfg.dtype.size() as u128;
    cfg.sizes
        .iter()
        .map(|&size| {
            let shape = cfg.op.shape(size, cfg.dtype, world);
            2 * (shape.send_elems as u128 + shape.recv_elems as u128) * esz
        })
        .max()
        .unwrap_or(0)
}

/// Refuses a sweep whose buffers (`ranks_here` ranks on this host) exceed the memory this host
/// has available (`MemAvailable`, when it can be read); `flag` names the size's source.
pub fn check_memory(
    cfg: &RunConfig,
    world: usize,
    ranks_here: usize,
    available: Option<u64>,
    flag: &str,
) -> anyhow::Result<()> {
    let Some(available) = available else {
        return Ok(());
    };
    let need = rank_bytes(cfg, world) * ranks_here as u128;
    let largest = cfg.sizes.iter().max().copied().unwrap_or(0);
    refuse_beyond(
        flag,
        &format!(
            "at {}, {ranks_here} rank(s) here",
            human(u128::from(largest))
        ),
        need,
        (available, "this host"),
        " (or run fewer ranks here)",
    )
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

/// Bytes in binary units, as -b/-e take them (`100 GiB`).
pub fn human(bytes: u128) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::{Dtype, RedOp};
    use crate::measure::{Iters, Mode};
    use crate::ops::{Algo, Op, allreduce::Allreduce};

    fn cfg(max: u64) -> RunConfig {
        RunConfig {
            op: Op::new(&Allreduce),
            algo: Algo::Auto,
            sizes: vec![8, max],
            iters: Iters {
                warmup: 0,
                timed: 1,
            },
            dtype: Dtype::F32,
            redop: RedOp::Sum,
            root: 0,
            mode: Mode::Pipelined,
            check: true,
            timeout: std::time::Duration::from_secs(1),
            labels: Default::default(),
        }
    }

    #[test]
    fn buffers_beyond_the_memory_available_are_refused_naming_the_size() {
        let gib = 1u64 << 30;
        // Allreduce: input and output of the message size, scratch as large again.
        assert_eq!(rank_bytes(&cfg(gib), 2), 4 * u128::from(gib));
        assert!(check_memory(&cfg(gib), 2, 2, Some(8 * gib), "-e").is_ok());
        let e = check_memory(&cfg(100 * gib), 2, 2, Some(16 * gib), "-e")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("-e: at 100.0 GiB,") && e.contains("800.0 GiB") && e.contains("16.0 GiB"),
            "{e}"
        );
        assert!(check_memory(&cfg(100 * gib), 2, 2, None, "-e").is_ok());
        assert!(check_local_ranks("-np", 256).is_ok());
        assert!(
            check_local_ranks("--tp", 100_000)
                .unwrap_err()
                .to_string()
                .starts_with("--tp 100000: at most 256")
        );
    }
}
