//! A GPU's energy counter over one point: the energy is its last reading minus its first,
//! when there are two, the counter never went backwards in between (a reset: the driver
//! reloaded, or the counter wrapped), and it agrees with the GPU's sampled power over the same
//! time. Otherwise the point's energy for that GPU is its sampled power integrated over the
//! point, and the window says why.
//!
//! The agreement check is ENERGY-FROZEN's (tried-to-break-it-4.md, BROKE 3): a counter that
//! read the same at both edges of a point (all ones, 18446744073709551615, both times) gave
//! 0 J beside 300 W of sampled power, and halved J/tok without a word.

use crate::record::EnergySource;
use std::time::Instant;

/// Counter readings at or past this are no reading (2^53 mJ: every integer below it is exact
/// in an f64; 285 years at 1 kW; a driver's all-ones "no value" is far past it).
pub(crate) const MAX_COUNTER_MJ: f64 = 9_007_199_254_740_992.0;

/// How far the counter's energy may be from the sampled power's over the same time before the
/// counter is not believed: 2x either way. Power is sampled now and then, the counter
/// integrates everything: they differ by tens of percent on a bursty load, not by 2x.
const AGREEMENT: f64 = 2.0;

/// Below this much time between the counter's first and last read the sampled power says too
/// little to judge the counter's amount by (a standing counter is still judged).
const JUDGED_FROM_S: f64 = 1.0;

/// One GPU's counter readings over a point (millijoules since the driver loaded).
#[derive(Debug, Clone, Default)]
pub(crate) struct CounterTrack {
    first: Option<(f64, Instant)>,
    last: Option<(f64, Instant)>,
    readings: u64,
    /// Reads that gave no number (`[N/A]`, `[Not Supported]`, not finite, past
    /// [`MAX_COUNTER_MJ`]), and the first such value when it was a number.
    missing: u64,
    implausible: Option<f64>,
    /// The first step backwards: (before, after).
    backwards: Option<(f64, f64)>,
}

impl CounterTrack {
    /// One read of the counter at `at`; `None` where the GPU gave no number.
    pub(crate) fn add(&mut self, mj: Option<f64>, at: Instant) {
        let Some(mj) = mj.filter(|v| v.is_finite() && *v >= 0.0 && *v < MAX_COUNTER_MJ) else {
            if let Some(v) = mj.filter(|v| v.is_finite() && *v >= MAX_COUNTER_MJ) {
                self.implausible.get_or_insert(v);
            }
            self.missing += 1;
            return;
        };
        if let Some((last, _)) = self.last
            && mj < last
            && self.backwards.is_none()
        {
            self.backwards = Some((last, mj));
        }
        self.first.get_or_insert((mj, at));
        self.last = Some((mj, at));
        self.readings += 1;
    }

    /// The point's energy in joules from the counter, judged against `power_w` (the GPU's
    /// mean sampled power over the point, when it has one); else why not in words (`None`
    /// when the counter was never read).
    pub(crate) fn energy_j(&self, power_w: Option<f64>) -> Result<f64, Option<String>> {
        if let Some((before, after)) = self.backwards {
            return Err(Some(format!(
                "its energy counter went backwards from {before} to {after} mJ (reset)"
            )));
        }
        if let Some(v) = self.implausible {
            return Err(Some(format!(
                "its energy counter read {v:e} mJ, past any GPU's lifetime (a driver's \"no value\")"
            )));
        }
        let (Some((first, t0)), Some((last, t1)), 2..) = (self.first, self.last, self.readings)
        else {
            return Err(match (self.missing, self.readings) {
                (1.., _) => {
                    Some("its energy counter gave no number ([N/A] or [Not Supported])".into())
                }
                (_, 1) => Some(
                    "its energy counter was read once only (not at both the start and the end)"
                        .into(),
                ),
                _ => None,
            });
        };
        let joules = (last - first) / 1000.0;
        let secs = t1.duration_since(t0).as_secs_f64();
        let Some(power) = power_w.filter(|w| *w > 0.0 && secs > 0.0) else {
            return Ok(joules);
        };
        let sampled = power * secs;
        if joules == 0.0 {
            return Err(Some(format!(
                "its energy counter stood still at {last} mJ for {secs:.1} s while its power read {power:.0} W"
            )));
        }
        let ratio = joules / sampled;
        if secs >= JUDGED_FROM_S && !(1.0 / AGREEMENT..=AGREEMENT).contains(&ratio) {
            return Err(Some(format!(
                "its energy counter gave {joules:.1} J over {secs:.1} s where its sampled power ({power:.0} W) gives {sampled:.1} J ({ratio:.2}x: more than {AGREEMENT}x apart)"
            )));
        }
        Ok(joules)
    }

    /// The point's energy and where it comes from, given the GPU's mean sampled power.
    pub(crate) fn verdict(&self, power_w: Option<f64>) -> (Option<f64>, Option<EnergySource>) {
        match self.energy_j(power_w) {
            Ok(j) => (Some(j), Some(EnergySource::Counter)),
            Err(_) => (None, power_w.map(|_| EnergySource::SampledPower)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Readings `secs` apart from one start.
    fn track(readings: &[Option<f64>], secs: f64) -> CounterTrack {
        let t0 = Instant::now();
        let mut t = CounterTrack::default();
        for (i, mj) in readings.iter().enumerate() {
            t.add(*mj, t0 + Duration::from_secs_f64(secs * i as f64));
        }
        t
    }

    #[test]
    fn a_counter_read_twice_gives_the_difference_in_joules() {
        let t = track(&[Some(1_000_000.0), Some(1_250_500.0)], 1.0);
        assert_eq!(t.energy_j(None), Ok(250.5));
        assert_eq!(t.verdict(None), (Some(250.5), Some(EnergySource::Counter)));
        // 250.5 J over 1 s beside 200 W sampled: within 2x, believed.
        assert_eq!(
            t.verdict(Some(200.0)),
            (Some(250.5), Some(EnergySource::Counter))
        );
    }

    #[test]
    fn a_counter_that_goes_backwards_is_not_believed() {
        let t = track(
            &[Some(5_000.0), Some(9_000.0), Some(100.0), Some(4_000.0)],
            1.0,
        );
        let why = t.energy_j(Some(1.0)).unwrap_err().unwrap();
        assert!(why.contains("backwards from 9000 to 100"), "{why}");
        assert_eq!(
            t.verdict(Some(1.0)),
            (None, Some(EnergySource::SampledPower))
        );
    }

    #[test]
    fn a_counter_without_numbers_falls_back_and_says_so() {
        let t = track(&[None, None], 1.0);
        assert!(t.energy_j(None).unwrap_err().unwrap().contains("[N/A]"));
        assert_eq!(t.verdict(None), (None, None));
        let never = CounterTrack::default();
        assert_eq!(never.energy_j(None), Err(None));
    }

    /// ENERGY-FROZEN (tried-to-break-it-4.md BROKE 3): all ones at both edges while the power
    /// reads 300 W gave 0 J from the counter.
    #[test]
    fn energy_frozen_a_counter_reading_all_ones_falls_back_to_sampled_power() {
        let all_ones = u64::MAX as f64;
        let t = track(&[Some(all_ones), Some(all_ones)], 2.0);
        let why = t.energy_j(Some(300.0)).unwrap_err().unwrap();
        assert!(why.contains("past any GPU's lifetime"), "{why}");
        assert_eq!(
            t.verdict(Some(300.0)),
            (None, Some(EnergySource::SampledPower))
        );
    }

    #[test]
    fn energy_frozen_a_counter_that_stands_still_while_power_is_drawn_falls_back() {
        let t = track(&[Some(2_477_213.0), Some(2_477_213.0)], 2.0);
        let why = t.energy_j(Some(300.0)).unwrap_err().unwrap();
        assert!(
            why.contains("stood still at 2477213 mJ for 2.0 s while its power read 300 W"),
            "{why}"
        );
        assert_eq!(
            t.verdict(Some(300.0)),
            (None, Some(EnergySource::SampledPower))
        );
        // Without any power sampled there is nothing to hold it to: 0 J is what it says.
        assert_eq!(t.energy_j(None), Ok(0.0));
    }

    #[test]
    fn a_counter_more_than_twice_off_the_sampled_power_falls_back() {
        // 1000 J over 2 s where 300 W gives 600 J: 1.67x, believed; 3000 J: 5x, not.
        let near = track(&[Some(0.0), Some(1_000_000.0)], 2.0);
        assert_eq!(near.energy_j(Some(300.0)), Ok(1000.0));
        let far = track(&[Some(0.0), Some(3_000_000.0)], 2.0);
        let why = far.energy_j(Some(300.0)).unwrap_err().unwrap();
        assert!(why.contains("5.00x: more than 2x apart"), "{why}");
        // Too short to judge the amount by: the counter stands.
        let short = track(&[Some(0.0), Some(3_000_000.0)], 0.2);
        assert_eq!(short.energy_j(Some(300.0)), Ok(3000.0));
    }
}
