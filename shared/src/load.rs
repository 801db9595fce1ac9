//! The load a workload applies, declared once for loadgen (which drives it in real time) and
//! srv-sim's `--predict` (which drives it in virtual time): the flags ([`flags::LoadArgs`], one
//! `--help` text and one rule each), the points they make ([`points`]), open-loop arrival
//! processes (`--arrival`), conversation turns (`--turns`) and think times (`--think-time`), the
//! rules of `--ramp` ([`ramp`]) and `--find-max` ([`search`]). One definition of each, so a
//! prediction applies the load loadgen does. Trace files (`--trace`) are read by [`trace`].

pub mod eval;
pub mod flags;
pub mod points;
pub mod ramp;
pub mod schema;
pub mod search;
pub mod trace;

pub use flags::LoadArgs;
pub use points::{Budget, Load};
use rand::Rng;
use rand_distr::{Distribution, Exp1, Gamma};
use std::time::Duration;

/// Open-loop inter-arrival process.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arrival {
    Poisson,
    Constant,
    /// Gamma-distributed gaps with this shape (1 = Poisson; below 1 burstier, above smoother).
    Gamma(f64),
}

/// As a summary's `arrival`.
impl From<Arrival> for crate::record::ArrivalProcess {
    fn from(a: Arrival) -> crate::record::ArrivalProcess {
        use crate::record::ArrivalProcess;
        match a {
            Arrival::Poisson => ArrivalProcess::Poisson,
            Arrival::Constant => ArrivalProcess::Constant,
            Arrival::Gamma(k) => ArrivalProcess::Gamma(k),
        }
    }
}

impl Arrival {
    pub fn parse(s: &str) -> Result<Arrival, String> {
        match s.trim() {
            "poisson" => Ok(Arrival::Poisson),
            "constant" => Ok(Arrival::Constant),
            other => match other
                .strip_prefix("gamma:")
                .map(|k| k.trim().parse::<f64>())
            {
                Some(Ok(k)) if k.is_finite() && k > 0.0 => Ok(Arrival::Gamma(k)),
                _ => Err(format!(
                    "arrival '{s}': use poisson, constant or gamma:SHAPE (SHAPE > 0, e.g. gamma:0.5)"
                )),
            },
        }
    }

    pub fn name(&self) -> String {
        match self {
            Arrival::Poisson => "poisson".into(),
            Arrival::Constant => "constant".into(),
            Arrival::Gamma(k) => format!("gamma:{k}"),
        }
    }

    /// One gap in units of the mean gap (mean 1): what [`next_send`] scales by the rate.
    pub fn draw(&self, rng: &mut impl Rng) -> f64 {
        match *self {
            Arrival::Constant => 1.0,
            Arrival::Poisson => Exp1.sample(rng),
            Arrival::Gamma(k) => Gamma::new(k, 1.0 / k).map_or(1.0, |g| g.sample(rng)),
        }
    }
}

/// `--turns`: turns per conversation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Turns {
    Fixed(u32),
    /// Drawn uniformly from `lo..=hi` for each session.
    Range(u32, u32),
    /// A file's conversations with all their turns.
    All,
}

impl Turns {
    /// `3`, `2..6` or `all`.
    pub fn parse(s: &str) -> Result<Turns, String> {
        let s = s.trim();
        if s == "all" {
            return Ok(Turns::All);
        }
        let num = |x: &str| -> Result<u32, String> {
            match x.trim().parse::<u32>() {
                Ok(n) if n >= 1 => Ok(n),
                _ => Err(format!(
                    "'{s}': turns are a count of at least 1 (3), a range (2..6) or all"
                )),
            }
        };
        match s.split_once("..") {
            Some((a, b)) => {
                let (lo, hi) = (num(a)?, num(b)?);
                if hi < lo {
                    return Err(format!("'{s}': the range must go up, e.g. 2..6"));
                }
                Ok(Turns::Range(lo, hi))
            }
            None => Ok(Turns::Fixed(num(s)?)),
        }
    }

    pub fn text(&self) -> String {
        match *self {
            Turns::Fixed(n) => n.to_string(),
            Turns::Range(a, b) => format!("{a}..{b}"),
            Turns::All => "all".into(),
        }
    }

    /// The most turns a session can have (`None`: as many as a file's conversation has).
    pub fn most(&self) -> Option<u32> {
        match *self {
            Turns::Fixed(n) | Turns::Range(_, n) => Some(n),
            Turns::All => None,
        }
    }

    /// Turns of one session, given the conversation's own count where it has one.
    pub fn draw(&self, rng: &mut impl Rng, own: Option<u32>) -> u32 {
        let n = match *self {
            Turns::Fixed(n) => n,
            Turns::Range(a, b) => rng.random_range(a..=b),
            Turns::All => own.unwrap_or(1),
        };
        own.map_or(n, |o| n.min(o)).max(1)
    }
}

/// `--think-time`: the pause between a reply's end and the next turn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Think {
    pub lo: Duration,
    pub hi: Duration,
}

impl Think {
    /// `2s`, or `500ms..3s` (uniform).
    pub fn parse(s: &str) -> Result<Think, String> {
        let d = crate::cli::parse_duration;
        match s.split_once("..") {
            Some((a, b)) => {
                let (lo, hi) = (d(a)?, d(b)?);
                if hi < lo {
                    return Err(format!("'{s}': the range must go up, e.g. 500ms..3s"));
                }
                Ok(Think { lo, hi })
            }
            None => {
                let t = d(s)?;
                Ok(Think { lo: t, hi: t })
            }
        }
    }

    pub fn text(&self) -> String {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if self.lo == self.hi {
            show(self.lo)
        } else {
            format!("{}..{}", show(self.lo), show(self.hi))
        }
    }

    pub fn draw(&self, rng: &mut impl Rng) -> Duration {
        if self.hi <= self.lo {
            return self.lo;
        }
        Duration::from_secs_f64(rng.random_range(self.lo.as_secs_f64()..=self.hi.as_secs_f64()))
    }
}

/// Requests per closed-loop point when `-n` is not given: max(100, 4 x concurrency); with
/// conversations, sessions: max(16, 2 x concurrency).
pub fn default_closed_requests(concurrency: u32, conversations: bool) -> u64 {
    if conversations {
        (u64::from(concurrency) * 2).max(16)
    } else {
        (u64::from(concurrency) * 4).max(100)
    }
}

/// Requests (or sessions) per open-loop point when `-n` is not given: 10 s of the rate, at
/// least 10.
pub fn default_open_requests(rate_rps: f64) -> u64 {
    ((rate_rps * 10.0).ceil() as u64).max(10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_summary_arrival_is_spelled_as_the_flag_that_gave_it() {
        for a in [
            Arrival::Poisson,
            Arrival::Constant,
            Arrival::Gamma(0.5),
            Arrival::Gamma(2.0),
        ] {
            let wire = crate::record::ArrivalProcess::from(a);
            assert_eq!(wire.to_wire(), a.name());
            assert_eq!(crate::record::ArrivalProcess::from_wire(&a.name()), wire);
        }
    }

    #[test]
    fn draws_have_unit_mean() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for arrival in [
            Arrival::Poisson,
            Arrival::Constant,
            Arrival::Gamma(0.5),
            Arrival::Gamma(4.0),
        ] {
            let n = 200_000;
            let mean = (0..n).map(|_| arrival.draw(&mut rng)).sum::<f64>() / f64::from(n);
            assert!((mean - 1.0).abs() < 0.02, "{arrival:?}: mean {mean}");
        }
    }

    #[test]
    fn arrivals_parse() {
        assert_eq!(Arrival::parse("poisson").unwrap(), Arrival::Poisson);
        assert_eq!(Arrival::parse("gamma:0.5").unwrap(), Arrival::Gamma(0.5));
        assert!(Arrival::parse("gamma:-1").is_err());
        assert!(Arrival::parse("burst").is_err());
    }

    #[test]
    fn turns_and_think_times_parse() {
        assert_eq!(Turns::parse("3").unwrap(), Turns::Fixed(3));
        assert_eq!(Turns::parse("2..6").unwrap(), Turns::Range(2, 6));
        assert_eq!(Turns::parse("all").unwrap(), Turns::All);
        for bad in ["0", "6..2", "x", "1..0"] {
            assert!(Turns::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Turns::Range(2, 6).text(), "2..6");
        let t = Think::parse("500ms..2s").unwrap();
        assert_eq!(
            (t.lo, t.hi),
            (Duration::from_millis(500), Duration::from_secs(2))
        );
        assert_eq!(t.text(), "500ms..2s");
        assert_eq!(Think::parse("0").unwrap().text(), "0s");
        assert!(Think::parse("2s..1s").is_err());
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        for _ in 0..100 {
            let d = t.draw(&mut rng);
            assert!(d >= t.lo && d <= t.hi);
            let n = Turns::Range(2, 6).draw(&mut rng, None);
            assert!((2..=6).contains(&n));
            assert_eq!(
                Turns::Fixed(5).draw(&mut rng, Some(3)),
                3,
                "a file's own turns"
            );
            assert_eq!(Turns::All.draw(&mut rng, Some(4)), 4);
        }
    }
}
