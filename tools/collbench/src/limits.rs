//! What collbench refuses before it starts anything: more local ranks than one host should
//! run, and buffers larger than the host's free memory. Each is one usage line naming the flag
//! and the bound (exit 2), instead of thousands of processes or an allocation abort.

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
    if need > u128::from(available) {
        let largest = cfg.sizes.iter().max().copied().unwrap_or(0);
        return Err(cli::usage(format!(
            "{flag}: at {}, {ranks_here} rank(s) here need {} of buffers but this host has {} available: lower {flag} (or run fewer ranks here)",
            human(u128::from(largest)),
            human(need),
            human(u128::from(available))
        )));
    }
    Ok(())
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
fn human(bytes: u128) -> String {
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
    use crate::harness::Mode;
    use crate::ops::{Algo, Op, allreduce::Allreduce};

    fn cfg(max: u64) -> RunConfig {
        RunConfig {
            op: Op::new(&Allreduce),
            algo: Algo::Auto,
            sizes: vec![8, max],
            iters: 1,
            warmup: 0,
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
