//! What a note is, and what it reads. A note is one function from the [`Facts`] to its
//! sentences (none when it has nothing to say), named and placed under a table by its line in
//! the notes list (`notes::NOTES`). The table sections read the same facts.

use crate::input::Inputs;
use crate::input::points::{Keys, Point};
use crate::roofline::Roofline;
use crate::roofline::measured::with_measured_bandwidth;
use crate::roofline::step::{PointStep, judge_points};
use servbench::presets::Hardware;
use std::sync::LazyLock;

/// Everything a note or a table section reads: the records, the points and their keys, the
/// roofline and each point's judged decode step.
pub struct Facts<'a> {
    pub inputs: &'a Inputs,
    pub points: &'a [Point],
    pub keys: Keys,
    /// `--roofline`, its memory bandwidth the one collbench measured on the GPU where
    /// `device_limits` records say it.
    pub roofline: Option<Roofline>,
    /// Which bandwidth the roofline's limits use, where `device_limits` records were read.
    pub bandwidth: Option<String>,
    /// `--hardware` alone: the card of the collectives' link share.
    pub link_hw: Option<&'a Hardware>,
    /// Each point's decode step, judged once: the budget notes and the decode table print it.
    pub steps: Vec<PointStep>,
}

/// No records: the facts of points alone.
static NO_INPUTS: LazyLock<Inputs> = LazyLock::new(Inputs::default);

impl<'a> Facts<'a> {
    pub fn new(
        inputs: &'a Inputs,
        points: &'a [Point],
        roofline: Option<&Roofline>,
        link_hw: Option<&'a Hardware>,
    ) -> Facts<'a> {
        // A bandwidth measured on the GPU replaces the card's in every roofline figure.
        let (roofline, bandwidth) = match roofline {
            Some(r) => {
                let (r, said) = with_measured_bandwidth(r, &inputs.limits);
                (Some(r), said)
            }
            None => (None, None),
        };
        let steps = judge_points(points, inputs, roofline.as_ref());
        Facts {
            inputs,
            points,
            keys: Keys::of(points),
            roofline,
            bandwidth,
            link_hw,
            steps,
        }
    }

    /// The facts of points alone: no other records, no roofline (a note on its fixture).
    pub fn of_points(points: &'a [Point]) -> Facts<'a> {
        Facts::new(&NO_INPUTS, points, None, None)
    }

    /// The hardware card: the roofline's, else `--hardware`'s.
    pub fn card(&self) -> Option<&Hardware> {
        self.roofline.as_ref().map(|r| &r.hw).or(self.link_hw)
    }
}

/// The table a note prints under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Under {
    Servers,
    Points,
    Collectives,
}

/// A note: its name (tests and documentation use it: a note's fixture is `NAME.jsonl`), the
/// table it prints under, and what it says.
#[derive(Clone, Copy)]
pub struct Note {
    pub name: &'static str,
    pub under: Under,
    pub says: fn(&Facts) -> Vec<String>,
}

/// The sentences of `notes` under one table, in the list's order.
pub fn under(notes: &[Note], table: Under, facts: &Facts) -> Vec<String> {
    notes
        .iter()
        .filter(|n| n.under == table)
        .flat_map(|n| (n.says)(facts))
        .collect()
}
