//! Reading records for summarize: every source in order, `request` lines through a fast path
//! (a million of them must summarize in seconds), everything else through the shared parser.
//! Requests are folded into the shared [`PointStats`] as they arrive, so memory stays bounded
//! by the number of points, not requests.
//!
//! Why a fast path: `Record::parse` peeks the kind, then deserializes the whole record with a
//! flattened `extra` map (serde buffers every field for that). For `request` lines, which
//! loadgen writes with `"kind":"request"` first, summarize uses the schema's lean read
//! ([`RequestRecord::parse_lean`]: the same fields, unknown ones skipped). A line it cannot
//! read goes through `Record::parse`, which names the problem.

pub mod energy;
pub mod kept;
pub mod metrics;
pub mod noise;
pub mod param;
pub mod points;

use crate::input::param::Params;
use servbench::cli;
use servbench::files::{LineRead, read_line_within};
use servbench::jsonl::{InputError, MAX_RECORD_LINE_BYTES, Source, excerpt, line_text};
use servbench::record::{
    CollRecord, CollRunRecord, DecodeRecord, DeviceLimitsRecord, GemmRecord, GemmStepRecord,
    KillRecord, Labels, P2pRecord, PointStop, RampRecord, Record, RequestRecord, SCHEMA_VERSION,
    SearchRecord, ServerRecord, SummaryRecord,
};
use servbench::stats::{PointStats, Slo};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};

/// One measurement of one point: its labels (all of them), parameters and repeat.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccKey {
    pub labels: Labels,
    pub params: Params,
    pub repeat: u32,
}

/// Statistics gathered for one [`AccKey`].
#[derive(Debug, Default)]
pub struct Acc {
    /// From `request` records (exact, with the steady-state window).
    pub from_requests: Option<PointStats>,
    /// From `summary` records of this key, merged.
    pub from_summaries: Option<PointStats>,
    /// Any summary of this key said the point was cut short.
    pub partial: bool,
    /// A summary said the server went down during the point: why.
    pub server_down: Option<String>,
    /// The first summary seen, for fields only summaries carry (client CPU, SLO text).
    pub first_summary: Option<Box<SummaryRecord>>,
    /// The sources this key's records came from (more than one: two runs look alike).
    pub sources: Vec<String>,
    /// `loadgen --record-text`: each successful request's reply, its pieces as they came, by id
    /// (`summarize --compare`'s greedy agreement).
    pub texts: BTreeMap<u64, Vec<String>>,
}

impl Acc {
    /// Requests win over summaries of the same key: loadgen writes both, and the summary is
    /// computed from exactly those requests (so nothing is counted twice).
    pub fn stats(&self) -> Option<&PointStats> {
        self.from_requests.as_ref().or(self.from_summaries.as_ref())
    }
}

/// Everything read from a set of sources.
#[derive(Debug, Default)]
pub struct Inputs {
    pub points: BTreeMap<AccKey, Acc>,
    pub coll: Vec<CollRecord>,
    pub coll_runs: Vec<CollRunRecord>,
    pub kills: Vec<KillRecord>,
    pub servers: Vec<ServerRecord>,
    /// collbench's `decode` records (allreduce per decode step).
    pub decode: Vec<DecodeRecord>,
    /// loadgen's `ramp` records (the end of a `--ramp`).
    pub ramps: Vec<RampRecord>,
    /// loadgen's `search` records (the end of a `--find-max`).
    pub searches: Vec<SearchRecord>,
    /// collbench's compute half: GEMMs one by one, per decode step, and the device's limits.
    pub gemms: Vec<GemmRecord>,
    pub gemm_steps: Vec<GemmStepRecord>,
    pub limits: Vec<DeviceLimitsRecord>,
    /// collbench p2p's ordered pairs (bandwidth and latency matrices).
    pub p2p: Vec<P2pRecord>,
    /// Every other kind, whole, for the table section that reads it (`tables::SECTIONS` names
    /// the kinds each section reads; one no section reads is counted as ignored): a new record
    /// kind needs no field here. srv-sim's `--dry-run` plans (`sim_plan`) come this way.
    pub records: Vec<Record>,
    /// Records summarize does not tabulate, by kind (`kind vN` for a newer schema it cannot
    /// read).
    pub ignored: BTreeMap<String, u64>,
    pub malformed: u64,
    pub request_lines: u64,
    pub summary_lines: u64,
    /// The requests kept whole for the timeline, where one was asked for.
    pub kept: Option<kept::Kept>,
    /// loadgen rank 0's merged summaries (`ranks.merged`), held until every source is read:
    /// used only for a point whose per-rank records are not among the inputs.
    rank_merged: Vec<(String, Box<SummaryRecord>)>,
}

impl Inputs {
    /// The records of one kind kept whole (see [`Inputs::records`]), as `pick` takes them out of
    /// a record (`|r| match r { Record::SimPlan(p) => Some(p), _ => None }`), in reading order.
    pub fn kept<'a, T>(&'a self, pick: impl Fn(&'a Record) -> Option<&'a T>) -> Vec<&'a T> {
        self.records.iter().filter_map(pick).collect()
    }
}

/// How many malformed lines to describe before only counting them (as the shared reader does).
const MALFORMED_SHOWN: u64 = 3;

/// Reads sources into [`Inputs`]. A missing file or, with `strict`, a malformed line is a
/// usage error naming it.
pub fn load(sources: &[Source], strict: bool, slo: Option<&Slo>) -> anyhow::Result<Inputs> {
    load_keeping(sources, strict, slo, None)
}

/// [`load`], keeping the requests `keep` selects whole (the timeline's).
pub fn load_keeping(
    sources: &[Source],
    strict: bool,
    slo: Option<&Slo>,
    keep: Option<kept::Select>,
) -> anyhow::Result<Inputs> {
    let mut inputs = Inputs {
        kept: keep.map(kept::Kept::new),
        ..Inputs::default()
    };
    for source in sources {
        let reader: Box<dyn BufRead> = match source {
            // After a Ctrl-C, read on to upstream's end (or not, per servbench::interrupt).
            Source::Stdin => servbench::jsonl::stdin_reader(),
            Source::File(path) => Box::new(BufReader::with_capacity(
                1 << 16,
                File::open(path).map_err(|e| {
                    cli::usage(format!(
                        "cannot read {}: {e} (give a file of records, or - for stdin)",
                        path.display()
                    ))
                })?,
            )),
        };
        load_one(&source.name(), reader, strict, slo, &mut inputs)?;
    }
    settle_rank_merges(&mut inputs)?;
    warn_lookalikes(&inputs);
    if servbench::interrupt::interrupted() {
        mark_unsummarized_partial(&mut inputs);
    }
    Ok(inputs)
}

/// After a Ctrl-C, a point with requests and no summary is one loadgen never finished (a
/// second Ctrl-C ends loadgen before its partial summary): it is marked partial, not shown
/// as a whole point.
fn mark_unsummarized_partial(inputs: &mut Inputs) {
    for acc in inputs.points.values_mut() {
        if acc.from_requests.is_some() && acc.from_summaries.is_none() {
            acc.partial = true;
        }
    }
}

/// Two sources with records of the same point under the same labels are merged as one
/// measurement, which is right for a file split in two and wrong for two runs: say so.
fn warn_lookalikes(inputs: &Inputs) {
    let shared: Vec<&AccKey> = inputs
        .points
        .iter()
        .filter(|(_, acc)| acc.sources.len() > 1)
        .map(|(k, _)| k)
        .collect();
    if let Some(first) = shared.first() {
        let acc = &inputs.points[*first];
        cli::warn(format!(
            "{} point(s) appear with the same labels in several inputs ({}): each is merged as one measurement; if these are different runs, label them apart (loadgen --label run=NAME) or compare them (--compare)",
            shared.len(),
            acc.sources.join(", ")
        ));
    }
}

/// Warns once per source about records from a newer schema (as the shared reader does).
fn warn_newer(warned: &mut bool, v: u32, name: &str, line_no: usize) {
    if v > SCHEMA_VERSION && !*warned {
        *warned = true;
        cli::warn(format!(
            "{name}:{line_no}: record schema v{v} is newer than this tool's v{SCHEMA_VERSION}: fields it does not know are ignored"
        ));
    }
}

/// Reads one source; see [`load`].
pub fn load_one(
    name: &str,
    mut reader: impl BufRead,
    strict: bool,
    slo: Option<&Slo>,
    inputs: &mut Inputs,
) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(4096);
    let mut line_no = 0usize;
    let mut malformed_here = 0u64;
    let mut warned_version = false;
    let mut appended = Appended::default();
    loop {
        buf.clear();
        let read = read_line_within(&mut reader, &mut buf, MAX_RECORD_LINE_BYTES)
            .map_err(|e| cli::usage(format!("{name}: read failed: {e}")))?;
        if read == LineRead::End {
            break;
        }
        line_no += 1;
        if read == LineRead::TooLong {
            // As the shared reader: where the next line begins is unknown.
            let msg = InputError::TooLong {
                source_name: name.to_string(),
                line_no,
            }
            .to_string();
            if strict {
                return Err(cli::usage(msg));
            }
            cli::warn(format!("{msg}: the rest of {name} is not read"));
            break;
        }
        let bytes = buf.trim_ascii_end();
        if bytes.is_empty() {
            continue;
        }
        // A record whose content is unusable (a summary's histogram that does not decode, a
        // request's negative latency) is a malformed line like one that does not parse: named
        // by its place, and skipped.
        let added = match RequestRecord::parse_lean(bytes) {
            Some(request) => {
                warn_newer(&mut warned_version, request.v, name, line_no);
                add_request(inputs, request, slo, name, &mut appended)
            }
            None => line_text(bytes)
                .and_then(|text| Record::parse(text).map_err(|e| e.to_string()))
                .and_then(|record| {
                    warn_newer(&mut warned_version, record.version(), name, line_no);
                    add_record(inputs, record, slo, name, &mut appended)
                }),
        };
        if let Some(why) = appended.found.take() {
            let msg = format!(
                "{name}:{line_no}: {why}: two runs in one input (appended with >>, or a line repeated); each later run is kept apart as label {INPUT_RUN}=2, 3, ... (label runs apart with --label run=NAME, or write each to a file of its own)"
            );
            if strict {
                return Err(cli::usage(msg));
            }
            if !appended.warned {
                appended.warned = true;
                cli::warn(msg);
            }
        }
        match added {
            Ok(()) => {}
            Err(reason) => {
                let text = String::from_utf8_lossy(bytes);
                let msg = format!("{name}:{line_no}: {reason} (line: {})", excerpt(&text, 60));
                if strict {
                    return Err(cli::usage(msg));
                }
                inputs.malformed += 1;
                malformed_here += 1;
                if malformed_here <= MALFORMED_SHOWN {
                    cli::warn(format!("skipping malformed line: {msg}"));
                }
            }
        }
    }
    if malformed_here > 0 {
        cli::warn(format!(
            "{name}: skipped {malformed_here} malformed line(s) (--strict makes this an error)"
        ));
    }
    Ok(())
}

fn note_source(acc: &mut Acc, source: &str) {
    if acc.sources.last().is_none_or(|s| s != source) && !acc.sources.iter().any(|s| s == source) {
        acc.sources.push(source.to_string());
    }
}

/// The label that keeps a second run of a point in one input apart from the first.
pub const INPUT_RUN: &str = "input_run";

/// A p2p matrix of one run: method, ranks, bytes, labels.
type P2pMatrix = (String, u32, u64, Labels);

/// The points of one source seen so far, to notice a second run of one of them in the same
/// source: a request id of the point again, or a second summary of it (loadgen numbers a
/// run's requests once, and writes one summary per point after its requests); likewise a p2p
/// pair again in its matrix (collbench p2p measures each pair once a run).
#[derive(Default)]
struct Appended {
    points: HashMap<AccKey, Segment>,
    /// Each p2p matrix: its current run and the pairs seen in it.
    p2p: HashMap<P2pMatrix, (u32, HashSet<(u32, u32)>)>,
    /// What the line just read showed (a second run begins), for its warning.
    found: Option<String>,
    warned: bool,
}

/// One point's current run within a source.
struct Segment {
    run: u32,
    ids: HashSet<u64>,
    summary: bool,
}

impl Appended {
    fn segment(&mut self, key: &AccKey) -> &mut Segment {
        self.points.entry(key.clone()).or_insert_with(|| Segment {
            run: 1,
            ids: HashSet::new(),
            summary: false,
        })
    }

    /// Labels the key of a later run with its number.
    fn place(run: u32, key: &mut AccKey) {
        if run > 1 {
            key.labels.insert(INPUT_RUN.into(), run.to_string());
        }
    }

    fn request(&mut self, key: &mut AccKey, id: u64) {
        let seg = self.segment(key);
        let again = !seg.ids.insert(id);
        if again {
            (seg.run, seg.summary) = (seg.run + 1, false);
            seg.ids.clear();
            seg.ids.insert(id);
        }
        let run = seg.run;
        if again {
            self.found = Some(format!("request id {id} of this point again"));
        }
        Appended::place(run, key);
    }

    fn summary(&mut self, key: &mut AccKey) {
        let seg = self.segment(key);
        let again = seg.summary;
        if again {
            seg.run += 1;
            seg.ids.clear();
        }
        seg.summary = true;
        let run = seg.run;
        if again {
            self.found = Some("a second summary of this point".into());
        }
        Appended::place(run, key);
    }

    /// A pair of a matrix seen again starts the matrix's next run, labelled apart: the later
    /// figure silently replaced the first (999 GB/s over a measured 2.45).
    fn p2p(&mut self, p: &mut P2pRecord) {
        let key = (
            format!("{} {}", p.backend, p.method.name()),
            p.ranks,
            p.bytes,
            p.labels.clone(),
        );
        let (run, pairs) = self.p2p.entry(key).or_insert_with(|| (1, HashSet::new()));
        if !pairs.insert((p.src, p.dst)) {
            *run += 1;
            pairs.clear();
            pairs.insert((p.src, p.dst));
            self.found = Some(format!(
                "p2p pair {} -> {} of this matrix again",
                p.src, p.dst
            ));
        }
        if *run > 1 {
            p.labels.insert(INPUT_RUN.into(), run.to_string());
        }
    }
}

/// One request into its point; `Err`: its times cannot be real.
fn add_request(
    inputs: &mut Inputs,
    mut r: RequestRecord,
    slo: Option<&Slo>,
    source: &str,
    appended: &mut Appended,
) -> Result<(), String> {
    if let Some(why) = r.implausible() {
        return Err(why);
    }
    inputs.request_lines += 1;
    if let Some(kept) = inputs.kept.as_mut() {
        kept.offer(&r);
    }
    // The labels move into the key: statistics do not read them.
    let mut key = AccKey {
        labels: std::mem::take(&mut r.labels),
        params: Params::of(&r.point),
        repeat: r.point.repeat,
    };
    appended.request(&mut key, r.id);
    let acc = inputs.points.entry(key).or_default();
    note_source(acc, source);
    if r.is_ok()
        && let Some(pieces) = r.output_pieces.take()
    {
        acc.texts.insert(r.id, pieces);
    }
    acc.from_requests
        .get_or_insert_with(PointStats::new)
        .add_request(&r, slo);
    Ok(())
}

/// One parsed record into `inputs`; `Err`: why its content is unusable.
fn add_record(
    inputs: &mut Inputs,
    record: Record,
    slo: Option<&Slo>,
    source: &str,
    appended: &mut Appended,
) -> Result<(), String> {
    match record {
        Record::Request(r) => add_request(inputs, *r, slo, source, appended)?,
        Record::Summary(s) => {
            if let Some(why) = s.implausible() {
                return Err(format!(
                    "implausible summary record of point {}: {why}",
                    s.point.index
                ));
            }
            if s.ranks.as_ref().is_some_and(|r| r.merged) {
                // Checked now, where its line is known; used (or not) once every source is read.
                PointStats::from_summary(&s).map_err(|e| bad_histogram(&s, e))?;
                inputs.summary_lines += 1;
                inputs.rank_merged.push((source.to_string(), s));
            } else {
                inputs.summary_lines += 1;
                add_summary(inputs, s, source, Some(appended))?;
            }
        }
        Record::Coll(c) => inputs.coll.push(c),
        Record::CollRun(c) => inputs.coll_runs.push(c),
        Record::Kill(k) => inputs.kills.push(k),
        Record::Server(s) => inputs.servers.push(s),
        Record::Decode(d) => inputs.decode.push(d),
        Record::Ramp(r) => inputs.ramps.push(plausible("ramp", r.implausible(), r)?),
        Record::Search(s) => inputs
            .searches
            .push(plausible("search", s.implausible(), s)?),
        Record::Gemm(g) => inputs.gemms.push(plausible("gemm", g.implausible(), g)?),
        Record::GemmStep(g) => inputs
            .gemm_steps
            .push(plausible("gemm_step", g.implausible(), g)?),
        Record::DeviceLimits(l) => {
            inputs
                .limits
                .push(plausible("device_limits", l.implausible(), l)?)
        }
        Record::P2p(mut p) => {
            p = plausible("p2p", p.implausible(), p)?;
            appended.p2p(&mut p);
            inputs.p2p.push(p);
        }
        // A known kind kept whole: a newer schema this build cannot read as typed.
        other if other.version() > SCHEMA_VERSION => {
            let name = format!("{} v{}", other.kind(), other.version());
            *inputs.ignored.entry(name).or_default() += 1;
        }
        unknown @ Record::Other(_) => {
            *inputs
                .ignored
                .entry(unknown.kind().to_string())
                .or_default() += 1
        }
        kept => inputs.records.push(kept),
    }
    Ok(())
}

/// The record, or why it cannot be a measurement (a malformed line).
fn plausible<T>(kind: &str, why: Option<String>, record: T) -> Result<T, String> {
    match why {
        None => Ok(record),
        Some(why) => Err(format!("implausible {kind} record: {why}")),
    }
}

fn bad_histogram(s: &SummaryRecord, e: impl std::fmt::Display) -> String {
    format!(
        "summary record of point {} has a bad histogram: {e}",
        s.point.index
    )
}

/// One `summary` record into its point's accumulator; `Err`: its histograms do not decode.
fn add_summary(
    inputs: &mut Inputs,
    s: Box<SummaryRecord>,
    source: &str,
    appended: Option<&mut Appended>,
) -> Result<(), String> {
    let stats = PointStats::from_summary(&s).map_err(|e| bad_histogram(&s, e))?;
    let mut key = AccKey {
        labels: s.labels.clone(),
        params: Params::of(&s.point),
        repeat: s.point.repeat,
    };
    if let Some(a) = appended {
        a.summary(&mut key);
    }
    let acc = inputs.points.entry(key).or_default();
    note_source(acc, source);
    acc.partial |= s.partial;
    if s.stopped_by == Some(PointStop::ServerDown) && acc.server_down.is_none() {
        acc.server_down = Some(
            s.stop_reason
                .clone()
                .unwrap_or_else(|| "server down".into()),
        );
    }
    match &mut acc.from_summaries {
        Some(existing) => existing.merge(&stats),
        None => acc.from_summaries = Some(stats),
    }
    if acc.first_summary.is_none() {
        acc.first_summary = Some(s);
    }
    Ok(())
}

/// A merged summary of loadgen ranks stands for its point only when none of the ranks' own
/// records of that point were read: beside them, it would count every request twice.
fn settle_rank_merges(inputs: &mut Inputs) -> anyhow::Result<()> {
    for (source, s) in std::mem::take(&mut inputs.rank_merged) {
        let params = Params::of(&s.point);
        let covered = inputs.points.keys().any(|k| {
            k.labels.contains_key(servbench::record::label::RANK)
                && k.params == params
                && k.repeat == s.point.repeat
                && s.labels
                    .iter()
                    .all(|(name, v)| k.labels.get(name) == Some(v))
        });
        if !covered {
            // Its histograms were checked when it was read.
            add_summary(inputs, s, &source, None)
                .map_err(|e| cli::usage(format!("{source}: {e}")))?;
        }
    }
    Ok(())
}
