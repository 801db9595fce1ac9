//! A GPU's energy counter over one point: the energy is its last reading minus its first,
//! when there are two and the counter never went backwards in between (a reset: the driver
//! reloaded, or the counter wrapped). Otherwise the point's energy for that GPU is its sampled
//! power integrated over the point, and the window says why.

use crate::record::EnergySource;

/// One GPU's counter readings over a point (millijoules since the driver loaded).
#[derive(Debug, Clone, Default)]
pub(crate) struct CounterTrack {
    first: Option<f64>,
    last: Option<f64>,
    readings: u64,
    /// Reads that gave no number (`[N/A]`, `[Not Supported]`, not finite).
    missing: u64,
    /// The first step backwards: (before, after).
    backwards: Option<(f64, f64)>,
}

impl CounterTrack {
    /// One read of the counter; `None` where the GPU gave no number.
    pub(crate) fn add(&mut self, mj: Option<f64>) {
        let Some(mj) = mj.filter(|v| v.is_finite() && *v >= 0.0) else {
            self.missing += 1;
            return;
        };
        if let Some(last) = self.last
            && mj < last
            && self.backwards.is_none()
        {
            self.backwards = Some((last, mj));
        }
        self.first.get_or_insert(mj);
        self.last = Some(mj);
        self.readings += 1;
    }

    /// The point's energy in joules from the counter, else why not in words (`None` when
    /// the counter was never read).
    pub(crate) fn energy_j(&self) -> Result<f64, Option<String>> {
        if let Some((before, after)) = self.backwards {
            return Err(Some(format!(
                "its energy counter went backwards from {before} to {after} mJ (reset)"
            )));
        }
        match (self.first, self.last, self.readings) {
            (Some(first), Some(last), 2..) => Ok((last - first) / 1000.0),
            _ if self.missing > 0 => Err(Some(
                "its energy counter gave no number ([N/A] or [Not Supported])".into(),
            )),
            (_, _, 1) => Err(Some(
                "its energy counter was read once only (not at both the start and the end)".into(),
            )),
            _ => Err(None),
        }
    }

    /// The point's energy and where it comes from, given whether power was sampled.
    pub(crate) fn verdict(&self, has_power: bool) -> (Option<f64>, Option<EnergySource>) {
        match self.energy_j() {
            Ok(j) => (Some(j), Some(EnergySource::Counter)),
            Err(_) => (None, has_power.then_some(EnergySource::SampledPower)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_read_twice_gives_the_difference_in_joules() {
        let mut t = CounterTrack::default();
        t.add(Some(1_000_000.0));
        t.add(Some(1_250_500.0));
        assert_eq!(t.energy_j(), Ok(250.5));
        assert_eq!(t.verdict(false), (Some(250.5), Some(EnergySource::Counter)));
    }

    #[test]
    fn a_counter_that_goes_backwards_is_not_believed() {
        let mut t = CounterTrack::default();
        for mj in [5_000.0, 9_000.0, 100.0, 4_000.0] {
            t.add(Some(mj));
        }
        let why = t.energy_j().unwrap_err().unwrap();
        assert!(why.contains("backwards from 9000 to 100"), "{why}");
        assert_eq!(t.verdict(true), (None, Some(EnergySource::SampledPower)));
    }

    #[test]
    fn a_counter_without_numbers_falls_back_and_says_so() {
        let mut t = CounterTrack::default();
        t.add(None);
        t.add(None);
        assert!(t.energy_j().unwrap_err().unwrap().contains("[N/A]"));
        assert_eq!(t.verdict(false), (None, None));
        let never = CounterTrack::default();
        assert_eq!(never.energy_j(), Err(None));
    }
}
