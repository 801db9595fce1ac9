//! The point parameters summarize keys points by beside their labels (`--by`, `--cols`, the
//! tables' key columns, point names): one type, so each is spelled and shown in one place; and
//! [`Params`], a point's values of them, hashable.

use servbench::record::PointKey;

/// A point parameter, named on the command line and in tables by [`Param::key`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Param {
    /// Input (prompt) length, tokens.
    In,
    /// Output length (`max_tokens`).
    Out,
    /// Closed-loop concurrency: a load.
    Conc,
    /// Open-loop request rate: a load.
    Rate,
    /// Trace replay speed.
    Speed,
    /// Images per request (`loadgen --images`): the modality.
    Images,
}

impl Param {
    /// Every parameter, in the order the keys are listed and checked.
    pub const ALL: [Param; 6] = [
        Param::In,
        Param::Out,
        Param::Conc,
        Param::Rate,
        Param::Speed,
        Param::Images,
    ];

    /// The loads: what a group's rows (and a plot's x axis) step through.
    pub const LOADS: [Param; 2] = [Param::Conc, Param::Rate];

    /// The key's name (`conc`, `rate`, `in`, `out`, `speed`).
    pub fn key(self) -> &'static str {
        match self {
            Param::In => "in",
            Param::Out => "out",
            Param::Conc => "conc",
            Param::Rate => "rate",
            Param::Speed => "speed",
            Param::Images => "images",
        }
    }

    /// The parameter a key names; None for a label.
    pub fn parse(key: &str) -> Option<Param> {
        Param::ALL.into_iter().find(|p| p.key() == key)
    }

    /// A load (`conc` or `rate`).
    pub fn is_load(self) -> bool {
        Param::LOADS.contains(&self)
    }

    /// The key names, `in, out, conc, rate, speed, images`.
    pub fn keys() -> String {
        Param::ALL.map(Param::key).join(", ")
    }

    /// The column header.
    pub fn header(self) -> &'static str {
        match self {
            Param::In => "in tok",
            Param::Out => "out tok",
            Param::Conc => "C",
            Param::Rate => "rate/s",
            Param::Speed => "trace speed",
            Param::Images => "images",
        }
    }

    /// The value at a point, as the tables print it.
    pub fn value(self, params: &Params) -> Option<String> {
        match self {
            Param::Conc => params.concurrency.map(|c| c.to_string()),
            Param::Rate => params.rate_rps().map(fmt_rate),
            Param::In => params.input_len.map(|c| c.to_string()),
            Param::Out => params.max_tokens.map(|c| c.to_string()),
            Param::Speed => params.trace_speed().map(fmt_rate),
            Param::Images => params.images.map(|n| n.to_string()),
        }
    }

    /// The part of a point's name it gives (`C=32`, `rate=4/s`, `in=512`, `trace x2`).
    pub fn name_part(self, value: &str) -> String {
        match self {
            Param::Conc => format!("C={value}"),
            Param::Rate => format!("rate={value}/s"),
            Param::In => format!("in={value}"),
            Param::Out => format!("out={value}"),
            Param::Speed => format!("trace x{value}"),
            Param::Images => format!("images={value}"),
        }
    }
}

pub fn fmt_rate(r: f64) -> String {
    let s = format!("{r:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The parameters that identify a sweep point (PointKey without its position and repeat),
/// hashable: the rate is kept by its bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Params {
    pub concurrency: Option<u32>,
    rate_bits: Option<u64>,
    pub input_len: Option<u32>,
    pub max_tokens: Option<u32>,
    trace_speed_bits: Option<u64>,
    pub images: Option<u32>,
}

impl Params {
    pub fn of(p: &PointKey) -> Params {
        Params {
            concurrency: p.concurrency,
            rate_bits: p.rate_rps.map(f64::to_bits),
            input_len: p.input_len,
            max_tokens: p.max_tokens,
            trace_speed_bits: p.trace_speed.map(f64::to_bits),
            images: p.images,
        }
    }

    pub fn trace_speed(&self) -> Option<f64> {
        self.trace_speed_bits.map(f64::from_bits)
    }

    pub fn rate_rps(&self) -> Option<f64> {
        self.rate_bits.map(f64::from_bits)
    }

    /// Back to a PointKey (position 0) for a summary built here.
    pub fn to_point(self, repeat: u32) -> PointKey {
        PointKey {
            index: 0,
            concurrency: self.concurrency,
            rate_rps: self.rate_rps(),
            input_len: self.input_len,
            max_tokens: self.max_tokens,
            repeat,
            trace_speed: self.trace_speed(),
            images: self.images,
        }
    }

    /// These parameters without the named ones (`in`, `out`, `speed`, `images`), to match points that
    /// differ only there.
    pub fn without(&self, keys: &std::collections::BTreeSet<String>) -> Params {
        let mut p = *self;
        if keys.contains(Param::In.key()) {
            p.input_len = None;
        }
        if keys.contains(Param::Out.key()) {
            p.max_tokens = None;
        }
        if keys.contains(Param::Speed.key()) {
            p.trace_speed_bits = None;
        }
        if keys.contains(Param::Images.key()) {
            p.images = None;
        }
        p
    }

    /// Sort order that puts rates in numeric order (bits of positive floats sort numerically).
    pub fn sort_key(&self) -> (Option<u32>, Option<u32>, Option<u32>, Option<u64>) {
        (
            self.input_len,
            self.max_tokens,
            self.concurrency,
            self.rate_bits,
        )
    }
}

/// True when `key` names a load (`conc`, `rate`).
pub fn is_load_key(key: &str) -> bool {
    Param::parse(key).is_some_and(Param::is_load)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_param_key_parses_back_and_a_label_is_none() {
        for p in Param::ALL {
            assert_eq!(Param::parse(p.key()), Some(p));
        }
        assert_eq!(Param::parse("engine"), None);
        assert_eq!(Param::keys(), "in, out, conc, rate, speed, images");
        assert!(is_load_key("conc") && is_load_key("rate") && !is_load_key("in"));
    }
}
