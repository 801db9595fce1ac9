//! `--cancel-rate P --cancel-after DUR`: which requests of a point the client abandons on
//! purpose, and when. The choice is spread evenly and exact: of any `n` consecutive requests,
//! `floor(n P)` or `ceil(n P)` are cancelled (exactly `n P` when that is whole), which ones
//! set by the point's seed, so a run with `--seed` cancels the same requests again.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use servbench::load::Think;
use std::time::Duration;

/// The flags, validated: `rate` in (0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cancel {
    pub rate: f64,
    /// How long after it left a cancelled request is abandoned: one duration, or a uniform
    /// range drawn per request.
    pub after: Think,
}

impl Cancel {
    /// Request `id` of a point whose seed is `seed`: how long after it left the client
    /// disconnects, or `None` when it runs to its end.
    pub fn after(&self, seed: u64, id: u64) -> Option<Duration> {
        // A phase in [0, 1) from the seed: request id is cancelled when the running count
        // `(id + 1) P + phase` passes a whole number.
        let phase = StdRng::seed_from_u64(seed).random_range(0.0..1.0);
        let count = |i: u64| (i as f64 * self.rate + phase).floor();
        if count(id + 1) <= count(id) {
            return None;
        }
        let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        Some(self.after.draw(&mut rng))
    }

    /// The flag `--cancel-rate` as a share in (0, 1].
    pub fn parse_rate(s: &str) -> Result<f64, String> {
        match s.trim().parse::<f64>() {
            Ok(p) if p > 0.0 && p <= 1.0 => Ok(p),
            _ => Err(format!(
                "'{s}': the share of requests to cancel, above 0 and at most 1 (0.25)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cancel(rate: f64) -> Cancel {
        Cancel {
            rate,
            after: Think::parse("100ms..300ms").unwrap(),
        }
    }

    #[test]
    fn the_share_cancelled_is_exact_over_any_run_of_requests() {
        for seed in [0, 1, 42, u64::MAX] {
            let c = cancel(0.25);
            let picked: Vec<u64> = (0..40).filter(|&i| c.after(seed, i).is_some()).collect();
            assert_eq!(picked.len(), 10, "seed {seed}: {picked:?}");
            // Evenly spread: one in each four.
            for w in picked.windows(2) {
                assert_eq!(w[1] - w[0], 4, "seed {seed}: {picked:?}");
            }
            let c = cancel(0.3);
            let n = (0..100).filter(|&i| c.after(seed, i).is_some()).count();
            assert_eq!(n, 30, "seed {seed}");
        }
    }

    #[test]
    fn the_same_seed_cancels_the_same_requests_after_the_same_time() {
        let c = cancel(0.5);
        let a: Vec<_> = (0..20).map(|i| c.after(7, i)).collect();
        let b: Vec<_> = (0..20).map(|i| c.after(7, i)).collect();
        assert_eq!(a, b);
        for d in a.into_iter().flatten() {
            assert!((100..=300).contains(&d.as_millis()), "{d:?}");
        }
        assert_eq!(
            (0..8)
                .filter(|&i| cancel(1.0).after(3, i).is_some())
                .count(),
            8
        );
    }

    #[test]
    fn a_rate_outside_zero_to_one_is_refused() {
        for bad in ["0", "-0.1", "1.5", "NaN", "x"] {
            assert!(Cancel::parse_rate(bad).is_err(), "{bad}");
        }
        assert_eq!(Cancel::parse_rate("0.25"), Ok(0.25));
    }
}
