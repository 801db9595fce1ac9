//! `--lora NAME,... --lora-assignment`: which LoRA adapter each request names as its `model`,
//! so a run measures a server juggling several adapters (their swap into the engine's slots)
//! rather than one model. The choice is a pure function of the run's seed and the request's id
//! in its point: the body (`client::body::Bodies`) and the record name the same
//! adapter without passing it along, and a rerun with the same `--seed` sends the same mix.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// How requests are spread over the adapters (`--lora-assignment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Assignment {
    /// Request i names adapter i mod N: every adapter in turn, exactly.
    #[default]
    RoundRobin,
    /// Each request an adapter drawn uniformly (by --seed).
    Random,
    /// Adapter k (from 1, in --lora's order) drawn with weight 1 / k^S
    /// (--lora-zipf-exponent S): a few hot adapters and a long tail.
    Zipf,
}

/// The zipf exponent when `--lora-zipf-exponent` is not given: the law's classic form, whose
/// first adapter takes 1 / H(N) of the requests (48% of 4).
pub const DEFAULT_ZIPF_EXPONENT: f64 = 1.0;

/// A run's LoRA mix.
#[derive(Debug, Clone)]
pub struct LoraMix {
    /// The adapters, in the flag's order.
    pub names: Arc<[String]>,
    pub assignment: Assignment,
    /// Zipf: the exponent S.
    pub exponent: f64,
    /// The draws' cumulative shares, the last 1 (random: equal; zipf: 1 / k^S normalised).
    cumulative: Vec<f64>,
}

impl LoraMix {
    pub fn new(names: Vec<String>, assignment: Assignment, exponent: f64) -> LoraMix {
        let weight = |k: usize| match assignment {
            Assignment::Zipf => 1.0 / ((k + 1) as f64).powf(exponent),
            Assignment::Random | Assignment::RoundRobin => 1.0,
        };
        let total: f64 = (0..names.len()).map(weight).sum();
        let mut run = 0.0;
        let cumulative = (0..names.len())
            .map(|k| {
                run += weight(k) / total;
                run
            })
            .collect();
        LoraMix {
            names: names.into(),
            assignment,
            exponent,
            cumulative,
        }
    }

    /// The adapter (its index in `names`) request `id` of a point of a run seeded `seed` names.
    pub fn pick(&self, seed: u64, id: u64) -> usize {
        let n = self.names.len().max(1);
        if self.assignment == Assignment::RoundRobin {
            return (id % n as u64) as usize;
        }
        let mut rng = StdRng::seed_from_u64(seed ^ id.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let u: f64 = rng.random_range(0.0..1.0);
        self.cumulative.partition_point(|&c| c <= u).min(n - 1)
    }

    /// The adapter request `id` names.
    pub fn name(&self, seed: u64, id: u64) -> &str {
        &self.names[self.pick(seed, id)]
    }

    /// The assignment as the summary's `workload` records it: `zipf:1.2` with its exponent.
    pub fn assignment_text(&self) -> String {
        match self.assignment {
            Assignment::RoundRobin => "round-robin".into(),
            Assignment::Random => "random".into(),
            Assignment::Zipf => format!("zipf:{}", self.exponent),
        }
    }

    /// `--lora`'s names: each non-empty, at most 256 characters, none twice.
    pub fn parse_name(s: &str) -> Result<String, String> {
        let name = s.trim();
        if name.is_empty() || name.len() > 256 || name.chars().any(char::is_control) {
            return Err(format!(
                "'{s}': a LoRA adapter's name as the server serves it (1 to 256 characters)"
            ));
        }
        Ok(name.to_string())
    }

    /// `--lora-zipf-exponent`: a finite number above 0 and at most 10.
    pub fn parse_exponent(s: &str) -> Result<f64, String> {
        match s.trim().parse::<f64>() {
            Ok(x) if x > 0.0 && x <= 10.0 => Ok(x),
            _ => Err(format!(
                "'{s}': the zipf exponent S (adapter k drawn with weight 1/k^S), above 0 and at most 10 (1.0)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(n: usize, a: Assignment, s: f64) -> LoraMix {
        LoraMix::new((0..n).map(|i| format!("a{i}")).collect(), a, s)
    }

    #[test]
    fn round_robin_names_every_adapter_in_turn() {
        let m = mix(3, Assignment::RoundRobin, 1.0);
        let names: Vec<&str> = (0..7).map(|i| m.name(9, i)).collect();
        assert_eq!(names, ["a0", "a1", "a2", "a0", "a1", "a2", "a0"]);
    }

    #[test]
    fn zipf_shares_follow_the_law_and_the_seed() {
        let m = mix(4, Assignment::Zipf, 1.0);
        let n = 40_000;
        let mut counts = [0u32; 4];
        for id in 0..n {
            counts[m.pick(42, id)] += 1;
        }
        let h: f64 = (1..=4).map(|k| 1.0 / k as f64).sum();
        for (k, &c) in counts.iter().enumerate() {
            let want = 1.0 / (k + 1) as f64 / h;
            let got = f64::from(c) / n as f64;
            assert!((got - want).abs() < 0.01, "adapter {k}: {got} vs {want}");
        }
        let again = mix(4, Assignment::Zipf, 1.0);
        assert!((0..500).all(|id| again.pick(42, id) == m.pick(42, id)));
        assert!((0..500).any(|id| m.pick(43, id) != m.pick(42, id)));
    }

    #[test]
    fn random_is_uniform_over_the_adapters() {
        let m = mix(5, Assignment::Random, 1.0);
        let mut counts = [0u32; 5];
        for id in 0..25_000 {
            counts[m.pick(1, id)] += 1;
        }
        for c in counts {
            assert!((4_700..5_300).contains(&c), "{counts:?}");
        }
        assert_eq!(m.assignment_text(), "random");
        assert_eq!(mix(2, Assignment::Zipf, 1.5).assignment_text(), "zipf:1.5");
    }

    #[test]
    fn bad_names_and_exponents_are_refused() {
        for bad in ["", "  ", "a\nb"] {
            assert!(LoraMix::parse_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(LoraMix::parse_name(" sql "), Ok("sql".into()));
        for bad in ["0", "-1", "NaN", "inf", "11", "x"] {
            assert!(LoraMix::parse_exponent(bad).is_err(), "{bad}");
        }
        assert_eq!(LoraMix::parse_exponent("1.2"), Ok(1.2));
    }
}
