//! Wire values that are a kind with a parameter (`gamma:0.5`, `measured: FILE (...)`,
//! `fp8 + nvfp4 experts`): typed here, written as the one string they always were, and a
//! string this build cannot read is kept as written in `Other`, as [`super::values`] does.

use super::WeightFormatName;

/// Serde as the string `to_wire` writes and `from_wire` reads (which never fails).
macro_rules! wire_string {
    ($name:ident) => {
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.to_wire())
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> $name {
                $name::from_wire(s)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_wire())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$name, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                Ok($name::from_wire(&s))
            }
        }
    };
}

/// An open loop's arrival process (`summary.arrival`): `poisson`, `constant`, `gamma:SHAPE`.
#[derive(Debug, Clone, PartialEq)]
pub enum ArrivalProcess {
    Poisson,
    Constant,
    /// Gamma-distributed gaps of this shape.
    Gamma(f64),
    /// A value this build does not know, kept as written.
    Other(String),
}

impl ArrivalProcess {
    /// As `servbench::load::Arrival::name` spells it (loadgen's `--arrival`).
    pub fn to_wire(&self) -> String {
        match self {
            ArrivalProcess::Poisson => "poisson".into(),
            ArrivalProcess::Constant => "constant".into(),
            ArrivalProcess::Gamma(k) => format!("gamma:{k}"),
            ArrivalProcess::Other(s) => s.clone(),
        }
    }

    pub fn from_wire(s: &str) -> ArrivalProcess {
        let shape = s.strip_prefix("gamma:").map(str::parse::<f64>);
        match (s, shape) {
            ("poisson", _) => ArrivalProcess::Poisson,
            ("constant", _) => ArrivalProcess::Constant,
            (_, Some(Ok(k))) if k.is_finite() && k > 0.0 && format!("gamma:{k}") == s => {
                ArrivalProcess::Gamma(k)
            }
            _ => ArrivalProcess::Other(s.to_string()),
        }
    }
}

wire_string!(ArrivalProcess);

/// Where a `sim_plan`'s allreduce times came from (`sim_plan.comm_source`).
#[derive(Debug, Clone, PartialEq)]
pub enum CommSource {
    /// The hardware card's topology model (`model`).
    Model,
    /// `--comm-from`'s measured curve: `measured: FILE (backend, ranks, mode, statistic)`.
    Measured(String),
    /// `--comm-from`'s host topology: `topology: FILE (GPUs ..., one socket)`.
    Topology(String),
    /// A value this build does not know, kept as written.
    Other(String),
}

impl CommSource {
    pub fn to_wire(&self) -> String {
        match self {
            CommSource::Model => "model".into(),
            CommSource::Measured(from) => format!("measured: {from}"),
            CommSource::Topology(from) => format!("topology: {from}"),
            CommSource::Other(s) => s.clone(),
        }
    }

    pub fn from_wire(s: &str) -> CommSource {
        if s == "model" {
            CommSource::Model
        } else if let Some(from) = s.strip_prefix("measured: ") {
            CommSource::Measured(from.to_string())
        } else if let Some(from) = s.strip_prefix("topology: ") {
            CommSource::Topology(from.to_string())
        } else {
            CommSource::Other(s.to_string())
        }
    }
}

wire_string!(CommSource);

/// Where a `sim_plan`'s GEMM times came from (`sim_plan.compute_source`): the roofline's
/// FLOPs and weight bytes (`model`), or collbench's `gemm_step` records (`measured: FILE`).
#[derive(Debug, Clone, PartialEq, Default)]
pub enum ComputeSource {
    #[default]
    Model,
    /// `--gemm-from FILE`'s measured GEMM time per step.
    Measured(String),
    /// A value this build does not know, kept as written.
    Other(String),
}

impl ComputeSource {
    pub fn to_wire(&self) -> String {
        match self {
            ComputeSource::Model => "model".into(),
            ComputeSource::Measured(from) => format!("measured: {from}"),
            ComputeSource::Other(s) => s.clone(),
        }
    }

    pub fn from_wire(s: &str) -> ComputeSource {
        if s == "model" {
            ComputeSource::Model
        } else if let Some(from) = s.strip_prefix("measured: ") {
            ComputeSource::Measured(from.to_string())
        } else {
            ComputeSource::Other(s.to_string())
        }
    }
}

wire_string!(ComputeSource);

/// How a model's weights are stored (`sim_plan.weight_format`): one format (`bf16`), or a MoE
/// whose experts are stored apart (`fp8 + nvfp4 experts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightFormats {
    pub weights: WeightFormatName,
    /// The experts' format, where it differs from the other weights'.
    pub experts: Option<WeightFormatName>,
}

impl WeightFormats {
    pub fn to_wire(&self) -> String {
        match &self.experts {
            Some(e) => format!("{} + {e} experts", self.weights),
            None => self.weights.to_string(),
        }
    }

    pub fn from_wire(s: &str) -> WeightFormats {
        let split = s
            .strip_suffix(" experts")
            .and_then(|rest| rest.split_once(" + "));
        match split {
            Some((w, e)) => WeightFormats {
                weights: WeightFormatName::parse(w),
                experts: Some(WeightFormatName::parse(e)),
            },
            None => WeightFormats {
                weights: WeightFormatName::parse(s),
                experts: None,
            },
        }
    }
}

wire_string!(WeightFormats);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compound_values_read_back_as_written_and_an_unknown_one_is_kept() {
        for s in [
            "poisson",
            "constant",
            "gamma:0.5",
            "bursty",
            "gamma:0.50",
            "gamma:-1",
        ] {
            assert_eq!(ArrivalProcess::from_wire(s).to_wire(), s);
        }
        assert_eq!(
            ArrivalProcess::from_wire("gamma:2"),
            ArrivalProcess::Gamma(2.0)
        );
        assert_eq!(
            ArrivalProcess::from_wire("bursty"),
            ArrivalProcess::Other("bursty".into())
        );
        for s in [
            "model",
            "measured: c.jsonl (tcp, 2 ranks, latency mode, median)",
            "topology: s.jsonl (GPUs 0,1, one socket)",
            "guess",
        ] {
            assert_eq!(CommSource::from_wire(s).to_wire(), s);
        }
        assert_eq!(
            CommSource::from_wire("topology: x"),
            CommSource::Topology("x".into())
        );
        for s in ["bf16", "fp8 + nvfp4 experts", "int4", "fp8 + int2 experts"] {
            assert_eq!(WeightFormats::from_wire(s).to_wire(), s);
        }
        assert_eq!(
            WeightFormats::from_wire("fp8 + nvfp4 experts"),
            WeightFormats {
                weights: WeightFormatName::Fp8,
                experts: Some(WeightFormatName::Nvfp4)
            }
        );
        let json = serde_json::to_string(&CommSource::Model).unwrap();
        assert_eq!(json, "\"model\"");
        assert_eq!(
            serde_json::from_str::<ArrivalProcess>("\"constant\"").unwrap(),
            ArrivalProcess::Constant
        );
    }
}
