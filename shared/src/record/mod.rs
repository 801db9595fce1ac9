//! The record contract: every servbench tool reads and writes these, one JSON object per line.
//!
//! Every record carries a header: `kind` (which struct below), `v` (schema version, [`SCHEMA_VERSION`]),
//! `ts` (RFC 3339 UTC with milliseconds) and `labels` (string to string). Units live in field names
//! (`_ms`, `_us`, `_s`, `_bytes`, `_tok_s`, `_gbps`). Each kind keeps the fields it does not know in
//! `extra`, so a record written by a newer tool survives a trip through an older one; a kind nobody
//! here knows is kept whole as [`Record::Other`]. Pass-through forwards the original line verbatim
//! (see `jsonl`), so nothing is ever reformatted on the way.

// The modules that are not a kind of their own: shared parts and checks.
mod compound;
mod engine_steps;
mod eval;
mod host;
mod pd;
mod plausible;
mod server_timing;
mod telemetry;
mod values;
mod workload;

pub use compound::*;
pub use engine_steps::*;
pub use eval::*;
pub use host::*;
pub use pd::*;
pub use plausible::{MAX_P2P_GBPS, MAX_P2P_RANKS, MAX_REQUEST_TOKENS};
pub use server_timing::*;
pub use telemetry::*;
pub use values::*;
pub use workload::{WORKLOAD_FIELDS, Workload};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The schema version this build writes. Readers warn (once) on records with a higher `v`.
///
/// - v1: the first schema.
/// - v2: a summary's load fields (`api`, `seed`, `arrival`, ..., [`WORKLOAD_FIELDS`]) nested
///   under one `workload` object ([`Workload`]); every other kind is the same as in v1. A v1
///   summary is still read: [`Record::parse`] moves its flat fields in before the typed decode.
/// - v3: a summary's `engine_steps` times the step by the steps themselves (the busy window
///   over them, `step_ms_mean`), keeps vLLM's iteration elapsed time under its meaning
///   (`result_wait_ms`: the engine core's wait for the result) and reads each data-parallel
///   engine apart (`engines`, `per_engine`); v2's `step_ms_*`/`busy_ms` were that wait. A v2
///   summary is still read, its figures moved to their names ([`Record::parse`]).
///
/// A field added where absence keeps its old meaning (a `server` record's `pd`; a `request`'s
/// `server_timing.decode_queue_ms`, `first_decode_ms` and `proxy_ms`, a `summary`'s `ttft_split` P/D means)
/// needs no new version: a build that does not know it keeps it in `extra` and passes it on unchanged.
/// So with a summary's `engine_steps.per_second`, which a build that does not know it skips,
/// and with a `request`'s `output_pieces` and `eval` and a summary's `eval` (`loadgen
/// --record-text`, `--eval`): absent, a run recorded no text and asked no eval questions.
pub const SCHEMA_VERSION: u32 = 3;

/// The schema version whose `engine_steps` time the step by the steps themselves.
const STEP_BY_STEPS_SINCE: u32 = 3;

/// Free-form context that travels with records (`engine`, `model`, `tp`, `host`, ...).
pub type Labels = BTreeMap<String, String>;

/// The well-known label names, each written by one tool and read by others.
pub mod label {
    /// Tensor-parallel degree (srv-launch); read into a `presets::Layout`.
    pub const TP: &str = "tp";
    /// Pipeline-parallel degree (srv-launch).
    pub const PP: &str = "pp";
    /// Expert-parallel degree (given by hand).
    pub const EP: &str = "ep";
    /// The engine preset (srv-launch: `vllm`, `llama-cpp`, ...).
    pub const ENGINE: &str = "engine";
    /// The model the server serves (srv-launch).
    pub const MODEL: &str = "model";
    /// The SSH target the server runs on (srv-launch), or a loadgen rank's machine.
    pub const HOST: &str = "host";
    /// A loadgen rank's index in its job.
    pub const RANK: &str = "rank";
    /// Which run a record belongs to (`summarize --compare`'s sides, `--label run=base`).
    pub const RUN: &str = "run";
    /// A disaggregated group's layout, `2p1d` (srv-launch `--pd`, on every member's record):
    /// what a P:D comparison across runs groups by.
    pub const PD: &str = "pd";
    /// The role of a P/D group's member (`prefill`, `decode`, `proxy`), on its record.
    pub const PD_ROLE: &str = "pd_role";
}

/// Fields a record carries that this build does not know: kept and written back unchanged.
pub type Extra = serde_json::Map<String, Value>;

/// The current time as the records write it: RFC 3339, UTC, milliseconds (`2026-11-30T17:02:03.123Z`).
pub fn now_ts() -> String {
    humantime::format_rfc3339_millis(SystemTime::now()).to_string()
}

/// Labels of `upstream` overlaid with `own` (own wins): how an emitted record inherits context.
pub fn inherit_labels(upstream: &Labels, own: &Labels) -> Labels {
    let mut merged = upstream.clone();
    merged.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    merged
}

/// The fields every kind shares, for code that handles any record.
pub trait RecordKind: Serialize + DeserializeOwned {
    /// The `kind` string on the wire.
    const KIND: &'static str;
    fn labels(&self) -> &Labels;
    fn labels_mut(&mut self) -> &mut Labels;
    fn version(&self) -> u32;
    /// Fields the record carries that this build's schema does not name.
    fn extra(&self) -> &Extra;
    fn extra_mut(&mut self) -> &mut Extra;
    fn into_record(self) -> Record;
}

/// A record struct's `RecordKind` impl, in one place (in scope in every file the `records!` list
/// below names).
macro_rules! record_kind {
    ($ty:ident, $kind:literal, $variant:ident) => {
        impl $crate::record::RecordKind for $ty {
            const KIND: &'static str = $kind;
            fn labels(&self) -> &$crate::record::Labels {
                &self.labels
            }
            fn labels_mut(&mut self) -> &mut $crate::record::Labels {
                &mut self.labels
            }
            fn version(&self) -> u32 {
                self.v
            }
            fn extra(&self) -> &$crate::record::Extra {
                &self.extra
            }
            fn extra_mut(&mut self) -> &mut $crate::record::Extra {
                &mut self.extra
            }
            fn into_record(self) -> $crate::record::Record {
                $crate::record::Record::$variant(self.into())
            }
        }
    };
}

/// Serde helper: the `v` field defaults to the current version when a hand-written record omits it.
pub(crate) fn current_version() -> u32 {
    SCHEMA_VERSION
}

/// Why a line is not a record.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("not a JSON object: {0}")]
    NotJson(serde_json::Error),
    #[error("no \"kind\" field")]
    NoKind,
    #[error("bad {kind} record: {source}")]
    BadField {
        kind: String,
        source: serde_json::Error,
    },
}

#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    v: Option<u64>,
}

/// The one list of record kinds: each line names a kind's file (`shared/src/record/<file>.rs`) and
/// the kinds it defines, as `Variant(TypeRecord)` (`, boxed` for a large one, so [`Record`] stays
/// small). From it come the module and its re-export, the [`Record`] enum and every match over it
/// (parse, kind, version, labels, extra, to_line).
///
/// Adding a record kind (one file plus one line):
/// 1. a file here with the struct (header fields `v`, `ts`, `labels`, then its own, units in the
///    names, `#[serde(flatten)] pub extra: Extra` last) and `record_kind!(FooRecord, "foo", Foo);`;
/// 2. its line in the `records!` list below;
/// 3. then document it in README's record section and have a tool write it, so the contract
///    test (testkit/tests/contract.rs, its `every_kind`) sees it.
macro_rules! records {
    (@payload $ty:ident) => { $ty };
    (@payload $ty:ident boxed) => { Box<$ty> };
    ($( $module:ident: $( $variant:ident($ty:ident $(, $boxed:ident)?) ),+ ; )+) => {
        $(
            mod $module;
            pub use $module::*;
        )+

        /// One record of any kind.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Record {
            $($( $variant(records!(@payload $ty $($boxed)?)), )+)+
            /// A kind this build does not know (or knows only by name): kept whole, `kind` included.
            Other(Extra),
        }

        impl Record {
            /// Parses one line (without its newline).
            pub fn parse(line: &str) -> Result<Record, RecordError> {
                let peek: Peek = serde_json::from_str(line).map_err(RecordError::NotJson)?;
                let kind = peek.kind.ok_or(RecordError::NoKind)?;
                // An older schema's line in this one's shape (the one place that knows them).
                let upgraded = upgrade(&kind, peek.v, line.as_bytes())?;
                let line = upgraded.as_deref().unwrap_or(line);
                let whole = || serde_json::from_str(line).map_err(RecordError::NotJson);
                let parsed = match kind.as_ref() {
                    $($( <$ty as RecordKind>::KIND => {
                        typed::<$ty>(serde_json::from_str(line)).map(|r| Record::$variant(r.into()))
                    } )+)+
                    _ => return whole().map(Record::Other),
                };
                match parsed {
                    // A newer schema may drop or retype a field this build requires: not
                    // malformed, just not readable here. Kept whole, like an unknown kind, so it
                    // passes through.
                    Err(RecordError::BadField { .. })
                        if peek.v.is_some_and(|v| v > u64::from(SCHEMA_VERSION)) =>
                    {
                        whole().map(Record::Other)
                    }
                    parsed => parsed,
                }
            }

            /// The `kind` string.
            pub fn kind(&self) -> &str {
                match self {
                    $($( Record::$variant(_) => <$ty as RecordKind>::KIND, )+)+
                    Record::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
                }
            }

            /// The schema version the record claims (1 for an `Other` record without one).
            pub fn version(&self) -> u32 {
                match self {
                    $($( Record::$variant(r) => r.v, )+)+
                    Record::Other(map) => map.get("v").and_then(Value::as_u64).unwrap_or(1) as u32,
                }
            }

            /// The record's labels (empty for an `Other` record whose labels are not a string map).
            pub fn labels(&self) -> Labels {
                match self {
                    $($( Record::$variant(r) => r.labels.clone(), )+)+
                    Record::Other(map) => map
                        .get("labels")
                        .and_then(|l| serde_json::from_value(l.clone()).ok())
                        .unwrap_or_default(),
                }
            }

            /// The fields of a known kind that this build's schema does not name (None for an
            /// `Other` record, of which this build knows nothing).
            pub fn extra(&self) -> Option<&Extra> {
                match self {
                    $($( Record::$variant(r) => Some(&r.extra), )+)+
                    Record::Other(_) => None,
                }
            }

            /// The record as one JSON line (no newline).
            pub fn to_line(&self) -> String {
                let result = match self {
                    $($( Record::$variant(r) => to_line_with_kind::<$ty>(r), )+)+
                    Record::Other(map) => serde_json::to_string(map),
                };
                // Serializing plain data structures to a String cannot fail (no I/O, string keys
                // only).
                result.expect("records serialize")
            }
        }
    };
}

records! {
    server: Server(ServerRecord);
    kill: Kill(KillRecord);
    request: Request(RequestRecord, boxed);
    summary: Summary(SummaryRecord, boxed);
    coll: Coll(CollRecord), CollRun(CollRunRecord), Decode(DecodeRecord);
    ramp: Ramp(RampRecord);
    sim_plan: SimPlan(SimPlanRecord);
    gemm: Gemm(GemmRecord);
    gemm_step: GemmStep(GemmStepRecord);
    device_limits: DeviceLimits(DeviceLimitsRecord);
    search: Search(SearchRecord);
    p2p: P2p(P2pRecord);
    step_cell: StepCell(StepCellRecord);
}

/// `json` rewritten in this schema's shape where it was written under an older one (None where
/// it already is): a v1 summary's flat workload fields move under `workload`; a v2 summary's
/// `engine_steps` figures move to their v3 names. Other kinds are the same in v1, v2 and v3.
fn upgrade(kind: &str, v: Option<u64>, json: &[u8]) -> Result<Option<String>, RecordError> {
    if kind != SummaryRecord::KIND || v.is_none_or(|v| v >= u64::from(STEP_BY_STEPS_SINCE)) {
        return Ok(None);
    }
    let mut fields: Extra = serde_json::from_slice(json).map_err(RecordError::NotJson)?;
    if v.is_some_and(|v| v < u64::from(workload::NESTED_SINCE)) {
        fields = workload::upgrade_v1_summary(fields);
    }
    if let Some(Value::Object(steps)) = fields.get_mut("engine_steps") {
        engine_steps::upgrade_v2(steps);
    }
    fields.insert("v".into(), Value::from(STEP_BY_STEPS_SINCE));
    // A map of JSON values serializes (string keys, no I/O).
    Ok(Some(
        serde_json::to_string(&fields).expect("JSON values serialize"),
    ))
}

/// A record of kind `T` from a JSON object that may lack `kind` (the kind is implied, as on
/// loadgen ranks' wire), of any schema version this build reads: an older one's shape is
/// brought to this one as [`Record::parse`] does, so a part from another build still merges.
pub fn decode_kind<T: RecordKind>(json: &[u8]) -> Result<T, RecordError> {
    let peek: Peek = serde_json::from_slice(json).map_err(RecordError::NotJson)?;
    let upgraded = upgrade(T::KIND, peek.v, json)?;
    let json = upgraded.as_deref().map_or(json, str::as_bytes);
    typed(serde_json::from_slice(json))
}

/// A decoded kind `T`, without the `kind` field (implied by the type; the catch-all must not
/// keep a second copy), or why its fields are not `T`'s.
fn typed<T: RecordKind>(decoded: serde_json::Result<T>) -> Result<T, RecordError> {
    let mut record = decoded.map_err(|source| RecordError::BadField {
        kind: T::KIND.to_string(),
        source,
    })?;
    record.extra_mut().remove("kind");
    Ok(record)
}

/// Writes `{"kind":K, ...fields}` with `kind` first, so a person reading a line sees what it is.
pub fn to_line_with_kind<T: RecordKind>(record: &T) -> serde_json::Result<String> {
    let body = serde_json::to_string(record)?;
    // body is a JSON object: splice the kind in after the opening brace.
    let rest = &body[1..];
    let sep = if rest == "}" { "" } else { "," };
    Ok(format!("{{\"kind\":\"{}\"{}{}", T::KIND, sep, rest))
}

/// Latency or size distribution of one metric, in the unit its field name gives (`ttft_ms`: ms).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Dist {
    pub n: u64,
    pub mean: f64,
    pub stddev: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// The q-quantile (0..=1) of sorted, non-empty values by nearest rank (the median of an even
/// count is the lower middle one): what a record's exact `p50`/`p90` (those not read from a
/// histogram) mean. Here, with the schema, so the record kinds that compute their own figures
/// and `stats` share it without `record` reaching up into `stats`.
pub fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod telemetry_tests;
#[cfg(test)]
mod tests;
