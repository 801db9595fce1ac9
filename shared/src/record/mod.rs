//! The record contract: every servbench tool reads and writes these, one JSON object per line.
//!
//! Every record carries a header: `kind` (which struct below), `v` (schema version, [`SCHEMA_VERSION`]),
//! `ts` (RFC 3339 UTC with milliseconds) and `labels` (string to string). Units live in field names
//! (`_ms`, `_us`, `_s`, `_bytes`, `_tok_s`, `_gbps`). Each kind keeps the fields it does not know in
//! `extra`, so a record written by a newer tool survives a trip through an older one; a kind nobody
//! here knows is kept whole as [`Record::Other`]. Pass-through forwards the original line verbatim
//! (see [`crate::jsonl`]), so nothing is ever reformatted on the way.

mod coll;
mod device_limits;
mod gemm;
mod gemm_step;
mod host;
mod kill;
mod plausible;
mod ramp;
mod request;
mod search;
mod server;
mod sim_plan;
mod summary;
mod telemetry;

pub use coll::*;
pub use device_limits::*;
pub use gemm::*;
pub use gemm_step::*;
pub use host::*;
pub use kill::*;
pub use plausible::MAX_REQUEST_TOKENS;
pub use ramp::*;
pub use request::*;
pub use search::*;
pub use server::*;
pub use sim_plan::*;
pub use summary::*;
pub use telemetry::*;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// The schema version this build writes. Readers warn (once) on records with a higher `v`.
pub const SCHEMA_VERSION: u32 = 1;

/// Free-form context that travels with records (`engine`, `model`, `tp`, `host`, ...).
pub type Labels = BTreeMap<String, String>;

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

/// Declares a record struct's header fields and its `RecordKind` impl in one place.
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
pub(crate) use record_kind;

/// Serde helper: the `v` field defaults to the current version when a hand-written record omits it.
pub(crate) fn current_version() -> u32 {
    SCHEMA_VERSION
}

/// One record of any kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    Server(ServerRecord),
    Kill(KillRecord),
    Request(Box<RequestRecord>),
    Summary(Box<SummaryRecord>),
    Coll(CollRecord),
    CollRun(CollRunRecord),
    Decode(DecodeRecord),
    Ramp(RampRecord),
    SimPlan(SimPlanRecord),
    Gemm(GemmRecord),
    GemmStep(GemmStepRecord),
    DeviceLimits(DeviceLimitsRecord),
    Search(SearchRecord),
    /// A kind this build does not know (or knows only by name): kept whole, `kind` included.
    Other(Extra),
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

impl Record {
    /// Parses one line (without its newline).
    pub fn parse(line: &str) -> Result<Record, RecordError> {
        let peek: Peek = serde_json::from_str(line).map_err(RecordError::NotJson)?;
        let kind = peek.kind.ok_or(RecordError::NoKind)?;
        fn typed<T: RecordKind>(line: &str) -> Result<T, RecordError> {
            let mut record: T =
                serde_json::from_str(line).map_err(|source| RecordError::BadField {
                    kind: T::KIND.to_string(),
                    source,
                })?;
            // `kind` is implied by the type; the catch-all must not keep a second copy.
            record.extra_mut().remove("kind");
            Ok(record)
        }
        let whole = || serde_json::from_str(line).map_err(RecordError::NotJson);
        let parsed = match kind.as_ref() {
            ServerRecord::KIND => typed(line).map(Record::Server),
            KillRecord::KIND => typed(line).map(Record::Kill),
            RequestRecord::KIND => typed(line).map(|r| Record::Request(Box::new(r))),
            SummaryRecord::KIND => typed(line).map(|r| Record::Summary(Box::new(r))),
            CollRecord::KIND => typed(line).map(Record::Coll),
            CollRunRecord::KIND => typed(line).map(Record::CollRun),
            DecodeRecord::KIND => typed(line).map(Record::Decode),
            RampRecord::KIND => typed(line).map(Record::Ramp),
            SimPlanRecord::KIND => typed(line).map(Record::SimPlan),
            GemmRecord::KIND => typed(line).map(Record::Gemm),
            GemmStepRecord::KIND => typed(line).map(Record::GemmStep),
            DeviceLimitsRecord::KIND => typed(line).map(Record::DeviceLimits),
            SearchRecord::KIND => typed(line).map(Record::Search),
            _ => return whole().map(Record::Other),
        };
        match parsed {
            // A newer schema may drop or retype a field this build requires: not malformed,
            // just not readable here. Kept whole, like an unknown kind, so it passes through.
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
            Record::Server(_) => ServerRecord::KIND,
            Record::Kill(_) => KillRecord::KIND,
            Record::Request(_) => RequestRecord::KIND,
            Record::Summary(_) => SummaryRecord::KIND,
            Record::Coll(_) => CollRecord::KIND,
            Record::CollRun(_) => CollRunRecord::KIND,
            Record::Decode(_) => DecodeRecord::KIND,
            Record::Ramp(_) => RampRecord::KIND,
            Record::SimPlan(_) => SimPlanRecord::KIND,
            Record::Gemm(_) => GemmRecord::KIND,
            Record::GemmStep(_) => GemmStepRecord::KIND,
            Record::DeviceLimits(_) => DeviceLimitsRecord::KIND,
            Record::Search(_) => SearchRecord::KIND,
            Record::Other(map) => map.get("kind").and_then(Value::as_str).unwrap_or(""),
        }
    }

    /// The schema version the record claims (1 for an `Other` record without one).
    pub fn version(&self) -> u32 {
        match self {
            Record::Server(r) => r.v,
            Record::Kill(r) => r.v,
            Record::Request(r) => r.v,
            Record::Summary(r) => r.v,
            Record::Coll(r) => r.v,
            Record::CollRun(r) => r.v,
            Record::Decode(r) => r.v,
            Record::Ramp(r) => r.v,
            Record::SimPlan(r) => r.v,
            Record::Gemm(r) => r.v,
            Record::GemmStep(r) => r.v,
            Record::DeviceLimits(r) => r.v,
            Record::Search(r) => r.v,
            Record::Other(map) => map.get("v").and_then(Value::as_u64).unwrap_or(1) as u32,
        }
    }

    /// The record's labels (empty for an `Other` record whose labels are not a string map).
    pub fn labels(&self) -> Labels {
        match self {
            Record::Server(r) => r.labels.clone(),
            Record::Kill(r) => r.labels.clone(),
            Record::Request(r) => r.labels.clone(),
            Record::Summary(r) => r.labels.clone(),
            Record::Coll(r) => r.labels.clone(),
            Record::CollRun(r) => r.labels.clone(),
            Record::Decode(r) => r.labels.clone(),
            Record::Ramp(r) => r.labels.clone(),
            Record::SimPlan(r) => r.labels.clone(),
            Record::Gemm(r) => r.labels.clone(),
            Record::GemmStep(r) => r.labels.clone(),
            Record::DeviceLimits(r) => r.labels.clone(),
            Record::Search(r) => r.labels.clone(),
            Record::Other(map) => map
                .get("labels")
                .and_then(|l| serde_json::from_value(l.clone()).ok())
                .unwrap_or_default(),
        }
    }

    /// The fields of a known kind that this build's schema does not name (None for an `Other`
    /// record, of which this build knows nothing).
    pub fn extra(&self) -> Option<&Extra> {
        match self {
            Record::Server(r) => Some(&r.extra),
            Record::Kill(r) => Some(&r.extra),
            Record::Request(r) => Some(&r.extra),
            Record::Summary(r) => Some(&r.extra),
            Record::Coll(r) => Some(&r.extra),
            Record::CollRun(r) => Some(&r.extra),
            Record::Decode(r) => Some(&r.extra),
            Record::Ramp(r) => Some(&r.extra),
            Record::SimPlan(r) => Some(&r.extra),
            Record::Gemm(r) => Some(&r.extra),
            Record::GemmStep(r) => Some(&r.extra),
            Record::DeviceLimits(r) => Some(&r.extra),
            Record::Search(r) => Some(&r.extra),
            Record::Other(_) => None,
        }
    }

    /// The record as one JSON line (no newline).
    pub fn to_line(&self) -> String {
        let result = match self {
            Record::Server(r) => to_line_with_kind(r),
            Record::Kill(r) => to_line_with_kind(r),
            Record::Request(r) => to_line_with_kind(r.as_ref()),
            Record::Summary(r) => to_line_with_kind(r.as_ref()),
            Record::Coll(r) => to_line_with_kind(r),
            Record::CollRun(r) => to_line_with_kind(r),
            Record::Decode(r) => to_line_with_kind(r),
            Record::Ramp(r) => to_line_with_kind(r),
            Record::SimPlan(r) => to_line_with_kind(r),
            Record::Gemm(r) => to_line_with_kind(r),
            Record::GemmStep(r) => to_line_with_kind(r),
            Record::DeviceLimits(r) => to_line_with_kind(r),
            Record::Search(r) => to_line_with_kind(r),
            Record::Other(map) => serde_json::to_string(map),
        };
        // Serializing plain data structures to a String cannot fail (no I/O, string keys only).
        result.expect("records serialize")
    }
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

#[cfg(test)]
mod telemetry_tests;
#[cfg(test)]
mod tests;
