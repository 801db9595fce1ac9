//! `--compare` of two disaggregated (P/D) layouts, `run-1p1d.jsonl` against `run-2p1d.jsonl`:
//! per load point both layouts' rows side by side (throughput, throughput per GPU, TTFT p50
//! and p90 with its five parts, TPOT), and a note per point naming which layout wins there
//! and what limits each. A run's layout comes from its servers' `pd` (srv-launch `--pd`),
//! else from its points' `pd` label; a run of one server alone is `colocated`.

use super::{Change, Pairing, Verdict, change, change_scaled, key_cells, key_column, key_columns};
use crate::input::metrics::{DistName, Metric, Stat};
use crate::input::points::{Point, point_name};
use crate::notes::pd::{PdSplit, TtftPart};
use crate::render::{Cell, Column, Table, human};
use servbench::presets::Layout;
use servbench::record::{PdLayout, PdRole, ServerRecord, label};
use std::collections::{BTreeMap, BTreeSet};

const TTFT_P90: Metric = Metric::Dist(DistName::Ttft, Stat::P90);

/// The columns a text table fitted to its width drops first.
pub const DROPPABLE: [&str; 2] = ["ttft_p90", "tok_s"];

/// One run's layout: its P/D layout (None: a server alone) and the GPUs that serve it (the
/// prefill and decode servers'; the proxy holds none).
#[derive(Debug, Clone, PartialEq)]
pub struct RunLayout {
    pub pd: Option<PdLayout>,
    pub gpus: u32,
}

impl RunLayout {
    /// From the run's server records (each member's GPUs: its `--gpus` list, else tp x pp of
    /// its labels), else from its points' labels (`pd`, tp x pp per server). None when the
    /// run's records name several layouts.
    pub fn of(servers: &[ServerRecord], points: &[Point]) -> Option<RunLayout> {
        // srv-kill passes each record on after its kill: one per member.
        let mut members: BTreeMap<(String, PdRole, u32), &ServerRecord> = BTreeMap::new();
        let mut alone = BTreeSet::new();
        for s in servers {
            match &s.pd {
                Some(m) => {
                    members.insert((m.group.clone(), m.role, m.index), s);
                }
                None => {
                    alone.insert((s.host.clone(), s.port, s.pid));
                }
            }
        }
        let layouts: BTreeSet<String> = members
            .values()
            .filter_map(|s| s.pd.as_ref().map(|m| m.layout.to_string()))
            .collect();
        let point_gpus = || {
            points
                .first()
                .map_or(1, |p| Layout::from_labels(&p.labels).gpus())
        };
        match (layouts.len(), alone.len()) {
            (1, 0) => {
                let layout = members.values().find_map(|s| s.pd.as_ref())?.layout;
                let serving: Vec<&&ServerRecord> = members
                    .values()
                    .filter(|s| s.pd.as_ref().is_some_and(|m| m.role != PdRole::Proxy))
                    .collect();
                let expected = layout.prefill + layout.decode;
                let gpus = if serving.len() == expected as usize {
                    serving.iter().map(|s| server_gpus(s)).sum()
                } else {
                    expected * point_gpus()
                };
                Some(RunLayout {
                    pd: Some(layout),
                    gpus,
                })
            }
            (0, 1) => Some(RunLayout {
                pd: None,
                gpus: servers.iter().find(|s| s.pd.is_none()).map(server_gpus)?,
            }),
            (0, 0) => {
                let labels: BTreeSet<Option<&String>> =
                    points.iter().map(|p| p.labels.get(label::PD)).collect();
                let pd = match labels.into_iter().collect::<Vec<_>>().as_slice() {
                    [Some(text)] => Some(text.parse::<PdLayout>().ok()?),
                    [None] => None,
                    _ => return None,
                };
                let servers = pd.map_or(1, |l| l.prefill + l.decode);
                Some(RunLayout {
                    pd,
                    gpus: servers * point_gpus(),
                })
            }
            _ => None,
        }
    }

    pub fn name(&self) -> String {
        self.pd.map_or("colocated".into(), |l| l.to_string())
    }
}

/// A server's GPUs: its `--gpus` list, else tp x pp of its labels.
fn server_gpus(s: &ServerRecord) -> u32 {
    let listed = s
        .gpus
        .as_deref()
        .map_or(0, |g| g.split(',').filter(|x| !x.trim().is_empty()).count());
    u32::try_from(listed)
        .ok()
        .filter(|n| *n > 0)
        .unwrap_or_else(|| Layout::from_labels(&s.labels).gpus())
}

/// One side of the comparison: its name (the file), layout and points.
pub struct Run<'a> {
    pub name: String,
    pub layout: RunLayout,
    pub points: &'a [Point],
}

/// One layout at one point.
struct At<'a> {
    name: String,
    point: &'a Point,
    gpus: f64,
    split: Option<PdSplit>,
}

impl At<'_> {
    fn tok_s_per_gpu(&self) -> Option<f64> {
        Some(self.point.mean(Metric::TOK_S)? / self.gpus)
    }

    fn limit(&self) -> Option<(TtftPart, f64)> {
        self.split.as_ref().map(PdSplit::largest)
    }
}

/// The P:D comparison of two runs, where at least one is a P/D layout and their points match.
pub fn table(base: &Run, new: &Run) -> Option<Table> {
    if base.layout.pd.is_none() && new.layout.pd.is_none() {
        return None;
    }
    let (pairing, _) = super::pair_sides(base.points, new.points);
    if pairing.pairs.is_empty() {
        return None;
    }
    let same = base.layout.name() == new.layout.name();
    let name = |run: &Run, side: &str| match same {
        true => format!("{} {side}", run.layout.name()),
        false => run.layout.name(),
    };
    let (bname, nname) = (name(base, "base"), name(new, "new"));
    let at = |name: &str, run: &Run, point| At {
        name: name.to_string(),
        point,
        gpus: f64::from(run.layout.gpus.max(1)),
        split: PdSplit::of(point),
    };
    let key_cols = key_columns(&pairing);
    let mut t = Table::new("P:D layouts, times in ms", columns(&key_cols));
    t.context = vec![
        ("base".into(), format!("{bname}:{}", base.name)),
        ("new".into(), format!("{nname}:{}", new.name)),
    ];
    for (group, (_, b, n)) in pairing.pairs.iter().enumerate() {
        let (b, n) = (at(&bname, base, b), at(&nname, new, n));
        for side in [&b, &n] {
            let mut row = key_cells(b.point, &key_cols);
            row.extend(cells(side));
            t.push(row, group);
        }
        t.notes
            .push(point_note(&point_at(&pairing, b.point), &b, &n));
    }
    t.notes.push(format!(
        "P queue, prefill: the prefill servers' queue and prefill; KV xfer: the KV transfer (its link's queue included); D queue, 1st step: the decode servers' queue and first step: means over each point's requests, from the engines' own per-request timing; tok/s/GPU over each layout's serving GPUs ({bname} {}, {nname} {}; the proxy holds none)",
        base.layout.gpus, new.layout.gpus
    ));
    Some(t)
}

/// How the notes name a base point: by the keys that vary over the compared points.
fn point_at(pairing: &Pairing, p: &Point) -> String {
    let all: Vec<Point> = pairing.pairs.iter().map(|(_, b, _)| (*b).clone()).collect();
    point_name(p, &crate::input::points::Keys::of(&all).varying)
}

fn columns(key_cols: &[String]) -> Vec<Column> {
    let col = |name: &str, header: &str| Column {
        name: name.into(),
        header: header.into(),
    };
    let mut cols: Vec<Column> = key_cols.iter().map(|k| key_column(k)).collect();
    cols.extend([
        col("layout", "layout"),
        col("gpus", "GPUs"),
        col(&Metric::TOK_S.name(), "out tok/s"),
        col(&Metric::TOK_S_PER_GPU.name(), "tok/s/GPU"),
        col(&Metric::TTFT_P50.name(), "TTFT p50"),
        col(&TTFT_P90.name(), "TTFT p90"),
        col("prefill_queue_ms", "P queue"),
        col("prefill_ms", "prefill"),
        col("kv_transfer_ms", "KV xfer"),
        col("decode_queue_ms", "D queue"),
        col("first_decode_ms", "1st step"),
        col(&Metric::TPOT_P50.name(), "TPOT p50"),
    ]);
    cols
}

fn cells(a: &At) -> Vec<Cell> {
    let mut row = vec![
        Cell::Text(a.name.clone()),
        Cell::int(a.gpus as i64),
        Cell::num(a.point.mean(Metric::TOK_S)),
        Cell::num(a.tok_s_per_gpu()),
        Cell::num(a.point.mean(Metric::TTFT_P50)),
        Cell::num(a.point.mean(TTFT_P90)),
    ];
    match &a.split {
        Some(s) => row.extend(s.parts().map(|(_, ms)| Cell::num(Some(ms)))),
        None => row.extend([(); 5].map(|_| Cell::Empty)),
    }
    row.push(Cell::num(a.point.mean(Metric::TPOT_P50)));
    row
}

fn signed_pct(ratio: f64) -> String {
    format!("{:+.0}%", (ratio - 1.0) * 100.0)
}

fn share(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Which layout wins at the point, by how much, and what limits each.
fn point_note(at: &str, b: &At, n: &At) -> String {
    let ttft = change(Metric::TTFT_P50, b.point, n.point);
    let (winner, loser) = match ttft.map(|c| c.verdict) {
        Some(Verdict::Better) => (Some(n), Some(b)),
        Some(Verdict::Worse) => (Some(b), Some(n)),
        _ => (None, None),
    };
    let ms = |a: &At| {
        a.point
            .mean(Metric::TTFT_P50)
            .map_or("-".into(), |v| format!("{} ms", human(v)))
    };
    let mut text = match (winner, loser, ttft) {
        (Some(w), Some(l), Some(c)) => {
            let ratio = if std::ptr::eq(w, n) {
                c.ratio
            } else {
                1.0 / c.ratio
            };
            format!(
                "{}: TTFT p50 {} at {at} against {} ({} vs {})",
                w.name,
                signed_pct(ratio),
                l.name,
                ms(w),
                ms(l)
            )
        }
        (
            _,
            _,
            Some(Change {
                verdict: Verdict::Unknown,
                ..
            }),
        ) => format!(
            "At {at} too few samples to tell the layouts' TTFT p50 apart ({} {}, {} {})",
            b.name,
            ms(b),
            n.name,
            ms(n)
        ),
        _ => format!(
            "At {at} neither layout's TTFT p50 is lower beyond the runs' noise ({} {}, {} {})",
            b.name,
            ms(b),
            n.name,
            ms(n)
        ),
    };
    let per_gpu = change_scaled(
        Metric::TOK_S,
        (b.point, 1.0 / b.gpus),
        (n.point, 1.0 / n.gpus),
    );
    if let Some(c) = per_gpu {
        let figures = format!("{} {}, {} {}", b.name, human(c.base), n.name, human(c.new));
        text.push_str(&match c.verdict {
            Verdict::Better | Verdict::Worse => format!(
                "; tok/s per GPU {} with {} ({figures})",
                signed_pct(c.ratio),
                n.name
            ),
            Verdict::Noise => format!("; tok/s per GPU within noise ({figures})"),
            Verdict::Unknown => format!("; tok/s per GPU {figures}"),
        });
    }
    match (winner, loser) {
        (Some(w), Some(l)) => {
            if let Some((part, s)) = w.limit() {
                text.push_str(&format!(
                    ". {}: {} now {} of TTFT: {}",
                    w.name,
                    part.name(),
                    share(s),
                    part.remedy()
                ));
            }
            if let Some((part, s)) = l.limit() {
                text.push_str(&format!(
                    ". {} loses there to its {} ({} of TTFT): {}",
                    l.name,
                    part.name(),
                    share(s),
                    part.remedy()
                ));
            }
        }
        _ => match (b.limit(), n.limit()) {
            (Some((pb, sb)), Some((pn, sn))) if pb == pn => text.push_str(&format!(
                ". Both: {} ({} {}, {} {} of TTFT): {}",
                pb.name(),
                b.name,
                share(sb),
                n.name,
                share(sn),
                pb.remedy()
            )),
            (lb, ln) => {
                for (a, limit) in [(b, lb), (n, ln)] {
                    if let Some((part, s)) = limit {
                        text.push_str(&format!(
                            ". {}: {} {} of TTFT: {}",
                            a.name,
                            part.name(),
                            share(s),
                            part.remedy()
                        ));
                    }
                }
            }
        },
    }
    text
}
