//! The requests kept whole for the timeline (`--plot-kind timeline`): one point's, within a
//! window of its wall time. Every other request is only folded into its point's statistics, so
//! memory stays bounded: at most [`MAX_KEPT`] records are held.

use servbench::record::{Labels, RequestRecord};
use std::collections::BTreeSet;

/// The most requests held for one timeline: more lanes than a picture shows apart.
pub const MAX_KEPT: usize = 1000;

/// Which requests to keep.
#[derive(Debug, Clone, Default)]
pub struct Select {
    /// The point's index (`point.index`); None: the first point read.
    pub point: Option<u32>,
    /// Seconds from the point's start: a request is kept when its span (intended send to end)
    /// meets the window.
    pub window_s: Option<(f64, f64)>,
    /// Labels that do not tell runs apart (`--merge-label`: hosts, loadgen ranks).
    pub merge_labels: Vec<String>,
}

/// One point's requests, as [`Select`] chose them.
#[derive(Debug, Default)]
pub struct Kept {
    pub select: Select,
    /// The point drawn: its index, repeat and labels (less the merged ones), once one is read.
    pub chosen: Option<(u32, u32, Labels)>,
    pub requests: Vec<RequestRecord>,
    /// The point's requests outside the window.
    pub outside: u64,
    /// The point's requests in the window past [`MAX_KEPT`].
    pub over_cap: u64,
    /// Requests of the same index under other labels or repeats (another run): not drawn.
    pub other_runs: u64,
    /// Every point index read.
    pub indices: BTreeSet<u32>,
}

impl Kept {
    pub fn new(select: Select) -> Kept {
        Kept {
            select,
            ..Kept::default()
        }
    }

    /// The labels that tell runs apart.
    fn identity(&self, labels: &Labels) -> Labels {
        let mut l = labels.clone();
        l.retain(|k, _| !self.select.merge_labels.contains(k));
        l
    }

    /// A request read: kept when it is of the chosen point and in the window.
    pub fn offer(&mut self, r: &RequestRecord) {
        self.indices.insert(r.point.index);
        if self.select.point.is_some_and(|p| p != r.point.index) {
            return;
        }
        let me = (r.point.index, r.point.repeat, self.identity(&r.labels));
        match &self.chosen {
            None => self.chosen = Some(me),
            Some((index, _, _)) if *index != me.0 => return,
            Some(chosen) if *chosen != me => {
                self.other_runs += 1;
                return;
            }
            Some(_) => {}
        }
        let start = r.intended_ms / 1e3;
        let end = (r.intended_ms + r.e2e_ms.unwrap_or(r.send_lag_ms.max(0.0))) / 1e3;
        if let Some((from, to)) = self.select.window_s
            && (end < from || start > to)
        {
            self.outside += 1;
            return;
        }
        if self.requests.len() >= MAX_KEPT {
            self.over_cap += 1;
            return;
        }
        self.requests.push(r.clone());
    }
}
