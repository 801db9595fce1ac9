//! A point's busy window: the wall time with at least one request in flight, the union of the
//! requests' intervals from send to end. An engine only steps while it has work, so its steps
//! over this window are its step rate (`engine_steps`), and the gaps between requests of an
//! open loop at a low rate are not counted as steps that took long.

use std::collections::BTreeMap;

/// Disjoint busy periods kept at most: a point of more (an open loop of very short requests
/// far apart) has a new period joined to the one before it, the gap counted busy.
const MAX_PERIODS: usize = 100_000;

/// The union of intervals, fed in any order.
#[derive(Debug, Clone, Default)]
pub struct BusyWindow {
    /// Start (as ordered bits of a non-negative time) to (start, end), disjoint.
    periods: BTreeMap<u64, (f64, f64)>,
}

fn key(t: f64) -> u64 {
    t.max(0.0).to_bits()
}

impl BusyWindow {
    pub fn new() -> BusyWindow {
        BusyWindow::default()
    }

    /// One request in flight from `start` to `end` (any unit, the same for all; times before
    /// 0 count from 0). An interval that is not finite or ends before it starts is ignored.
    pub fn add(&mut self, start: f64, end: f64) {
        if !(start.is_finite() && end.is_finite()) || end < start {
            return;
        }
        let (mut s, mut e) = (start.max(0.0), end.max(0.0));
        // Every period that overlaps or touches [s, e] joins it.
        let touching: Vec<u64> = self
            .periods
            .range(..=key(e))
            .rev()
            .take_while(|(_, (_, pe))| *pe >= s)
            .map(|(k, _)| *k)
            .collect();
        for k in touching {
            if let Some((ps, pe)) = self.periods.remove(&k) {
                s = s.min(ps);
                e = e.max(pe);
            }
        }
        if self.periods.len() >= MAX_PERIODS
            && let Some((&k, &(ps, _))) = self.periods.range(..key(s)).next_back()
        {
            self.periods.remove(&k);
            s = ps;
        }
        self.periods.insert(key(s), (s, e));
    }

    /// The busy time: the length of the union.
    pub fn total(&self) -> f64 {
        self.periods.values().map(|(s, e)| e - s).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_and_touching_requests_are_one_busy_period_and_gaps_are_not_busy() {
        let mut b = BusyWindow::new();
        b.add(5.0, 7.0);
        b.add(0.0, 2.0);
        b.add(1.0, 3.0);
        b.add(3.0, 4.0);
        b.add(6.0, 6.5);
        assert_eq!(b.total(), 6.0);
        b.add(-1.0, 10.0);
        assert_eq!(b.total(), 10.0);
        b.add(f64::NAN, 1.0);
        b.add(12.0, 11.0);
        assert_eq!(b.total(), 10.0);
    }

    #[test]
    fn a_flood_of_tiny_periods_stays_bounded() {
        let mut b = BusyWindow::new();
        for i in 0..(MAX_PERIODS as u64 + 10) {
            b.add(i as f64 * 2.0, i as f64 * 2.0 + 1.0);
        }
        assert!(b.periods.len() <= MAX_PERIODS);
        assert!(b.total() >= (MAX_PERIODS as f64) - 1.0);
    }
}
