//! One verdict on a decode step: communication or compute? Computed once per point and printed
//! wherever the question is answered (summarize's budget note and its decode table), so one
//! screen never gives two answers. The step it divides by is the one a run measured (TPOT, times
//! the tokens a speculative verify step emits) when there is a run, else the roofline's modelled
//! step, and the verdict says which. Parts that add up to more than the step were measured
//! somewhere else than the step (GEMMs on the CPU against a GPU server's step): they are left out
//! and named as such, never a negative remainder.

use std::fmt::Write;

/// The allreduces' share of the step at or above which communication is the bottleneck.
pub const BOTTLENECK_SHARE: f64 = 0.5;
/// At or above this share (and below the bottleneck's), a large share of the step.
pub const LARGE_SHARE: f64 = 0.25;
/// Parts may add up to this much more than the step (clock and rounding) and still be its parts.
pub const PARTS_NOISE: f64 = 0.03;

/// Where the step a verdict divides by came from.
#[derive(Debug, Clone, PartialEq)]
pub enum StepBasis {
    /// A run measured it; the words say how (`TPOT p50`, `TPOT p50 x 2.50 tokens per verify
    /// step (the server's acceptance)`).
    Measured(String),
    /// No run at this point: the roofline's modelled step.
    Modelled,
}

/// The compute half of a step, as collbench measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct ComputeParts {
    pub gemm_ms: f64,
    pub launch_ms: f64,
    /// Measured on the CPU (collbench's cpu backend): said when they exceed the step.
    pub on_cpu: bool,
}

impl ComputeParts {
    pub fn total_ms(&self) -> f64 {
        self.gemm_ms + self.launch_ms
    }
}

/// What a verdict is computed from.
#[derive(Debug, Clone, PartialEq)]
pub struct StepParts {
    /// The step, ms.
    pub step_ms: f64,
    pub basis: StepBasis,
    /// The step's allreduces, ms.
    pub allreduce_ms: f64,
    /// GEMMs and launch overhead, when measured.
    pub compute: Option<ComputeParts>,
}

/// What bounds the step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The allreduces are the largest part, or half the step or more.
    Communication,
    /// 25-50% of the step in allreduces, and nothing measured of the rest.
    LargeCommunicationShare,
    /// Under 25% in allreduces, and nothing measured of the rest.
    NotCommunication,
    /// GEMMs are the largest part.
    Compute,
    /// Launch overhead is the largest part.
    Launch,
    /// What the measured parts leave (attention, sampling, scheduling) is the largest part.
    Rest,
    /// The allreduces alone exceed the step: not measured on this server at its layout.
    Unknown,
}

/// The one verdict on a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepVerdict {
    pub parts: StepParts,
    pub bound: Bound,
    /// Allreduces over the step.
    pub comm_share: f64,
    /// The compute parts counted against the step (None: not measured, or left out).
    pub counted: Option<ComputeParts>,
    /// Why measured compute parts were left out.
    pub left_out: Option<&'static str>,
    /// What the step leaves beside the allreduces and the counted parts, ms (never negative).
    pub rest_ms: f64,
}

/// Why CPU GEMMs that exceed a step are not counted against it.
pub const CPU_LEFT_OUT: &str = "with the allreduces they exceed the step: measured on the CPU, not where the step was (CPU GEMMs are not GPU GEMMs)";
/// Why parts that add up to more than the step are not counted against it.
pub const EXCEED_LEFT_OUT: &str =
    "with the allreduces they exceed the step, so they were not measured where the step was";

impl StepVerdict {
    /// Judges a step from its parts.
    pub fn judge(parts: StepParts) -> StepVerdict {
        let step = parts.step_ms;
        let comm_share = if step > 0.0 {
            parts.allreduce_ms / step
        } else {
            f64::INFINITY
        };
        if comm_share > 1.0 + PARTS_NOISE {
            return StepVerdict {
                bound: Bound::Unknown,
                comm_share,
                counted: None,
                left_out: parts.compute.as_ref().map(|c| {
                    if c.on_cpu {
                        CPU_LEFT_OUT
                    } else {
                        EXCEED_LEFT_OUT
                    }
                }),
                rest_ms: 0.0,
                parts,
            };
        }
        let (counted, left_out) = match &parts.compute {
            None => (None, None),
            Some(c) if parts.allreduce_ms + c.total_ms() > step * (1.0 + PARTS_NOISE) => (
                None,
                Some(if c.on_cpu {
                    CPU_LEFT_OUT
                } else {
                    EXCEED_LEFT_OUT
                }),
            ),
            Some(c) => (Some(c.clone()), None),
        };
        let used = parts.allreduce_ms + counted.as_ref().map_or(0.0, ComputeParts::total_ms);
        let rest_ms = (step - used).max(0.0);
        let bound = match &counted {
            Some(c) => {
                let candidates = [
                    (parts.allreduce_ms, Bound::Communication),
                    (c.gemm_ms, Bound::Compute),
                    (c.launch_ms, Bound::Launch),
                    (rest_ms, Bound::Rest),
                ];
                candidates
                    .iter()
                    .max_by(|a, b| a.0.total_cmp(&b.0))
                    .map_or(Bound::Rest, |(_, b)| *b)
            }
            None if comm_share >= BOTTLENECK_SHARE => Bound::Communication,
            None if comm_share >= LARGE_SHARE => Bound::LargeCommunicationShare,
            None => Bound::NotCommunication,
        };
        StepVerdict {
            parts,
            bound,
            comm_share,
            counted,
            left_out,
            rest_ms,
        }
    }

    /// `94.9 ms measured step (TPOT p50)` or `10.6 ms modelled step (roofline; no run here)`.
    pub fn step_words(&self) -> String {
        let ms = three_digits(self.parts.step_ms);
        match &self.parts.basis {
            StepBasis::Measured(how) => format!("{ms} ms measured step ({how})"),
            StepBasis::Modelled => {
                format!("{ms} ms modelled step (roofline; no run measured this batch)")
            }
        }
    }

    /// The verdict as one sentence, the same wherever it is printed.
    pub fn text(&self) -> String {
        let step = self.step_words();
        let pct = |ms: f64| {
            if self.parts.step_ms > 0.0 {
                100.0 * ms / self.parts.step_ms
            } else {
                0.0
            }
        };
        let comm = pct(self.parts.allreduce_ms);
        let mut s = match self.bound {
            Bound::Unknown => format!(
                "no verdict: the allreduces ({} ms) exceed the whole {step}, so they were not measured on this server's GPUs at its layout",
                three_digits(self.parts.allreduce_ms)
            ),
            Bound::Communication => format!(
                "communication-bound: allreduce is {comm:.0}% of the {step}; communication latency caps this TP degree"
            ),
            Bound::LargeCommunicationShare => {
                format!("a large share in communication: allreduce is {comm:.0}% of the {step}")
            }
            Bound::NotCommunication => {
                format!("not communication-bound: allreduce is {comm:.0}% of the {step}")
            }
            Bound::Compute => format!(
                "compute-bound: GEMMs are {:.0}% of the {step}",
                pct(self.counted.as_ref().map_or(0.0, |c| c.gemm_ms))
            ),
            Bound::Launch => format!(
                "launch-bound: launch overhead is {:.0}% of the {step}; CUDA graphs or fewer, larger kernels would help",
                pct(self.counted.as_ref().map_or(0.0, |c| c.launch_ms))
            ),
            Bound::Rest => format!(
                "the rest dominates: {:.0}% of the {step} is neither allreduce nor GEMMs (attention, sampling, scheduling)",
                pct(self.rest_ms)
            ),
        };
        if let (Some(why), Some(c)) = (self.left_out, &self.parts.compute) {
            let _ = write!(
                s,
                "; GEMMs and launch ({} ms) not counted: {why}",
                three_digits(c.total_ms())
            );
        }
        s
    }
}

/// Three significant digits, as summarize prints figures.
fn three_digits(v: f64) -> String {
    let a = v.abs();
    let d = if a >= 100.0 || a == 0.0 {
        0
    } else if a >= 10.0 {
        1
    } else if a >= 1.0 {
        2
    } else {
        3
    };
    format!("{v:.d$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(step: f64, allreduce: f64, compute: Option<(f64, f64, bool)>) -> StepVerdict {
        StepVerdict::judge(StepParts {
            step_ms: step,
            basis: StepBasis::Measured("TPOT p50".into()),
            allreduce_ms: allreduce,
            compute: compute.map(|(g, l, cpu)| ComputeParts {
                gemm_ms: g,
                launch_ms: l,
                on_cpu: cpu,
            }),
        })
    }

    #[test]
    fn the_measured_step_decides_not_the_modelled_one() {
        // The Kimi reproduction: 8.91 ms of allreduce in a 94.9 ms measured step.
        let v = measured(94.9, 8.91, None);
        assert_eq!(v.bound, Bound::NotCommunication);
        assert_eq!(
            v.text(),
            "not communication-bound: allreduce is 9% of the 94.9 ms measured step (TPOT p50)"
        );
        // The same allreduce in the 10.6 ms modelled step, when no run measured it.
        let m = StepVerdict::judge(StepParts {
            step_ms: 10.6,
            basis: StepBasis::Modelled,
            allreduce_ms: 8.91,
            compute: None,
        });
        assert_eq!(m.bound, Bound::Communication);
        assert!(
            m.text().contains("84% of the 10.6 ms modelled step"),
            "{}",
            m.text()
        );
    }

    #[test]
    fn parts_measured_elsewhere_are_left_out_never_a_negative_rest() {
        // CPU GEMMs of 3.6 s against a 95 ms step.
        let v = measured(94.9, 8.91, Some((3600.0, 30.0, true)));
        assert!(v.counted.is_none());
        assert_eq!(v.rest_ms, 94.9 - 8.91);
        assert_eq!(v.bound, Bound::NotCommunication);
        assert!(
            v.text()
                .ends_with("GEMMs and launch (3630 ms) not counted: with the allreduces they exceed the step: measured on the CPU, not where the step was (CPU GEMMs are not GPU GEMMs)"),
            "{}",
            v.text()
        );
        // GPU GEMMs that, with the allreduces, exceed the step.
        let over = measured(10.0, 5.0, Some((20.0, 3.0, false)));
        assert!(over.counted.is_none() && over.rest_ms >= 0.0);
        assert!(over.text().contains("exceed the step"), "{}", over.text());
        // CPU GEMMs that fit the step (a CPU server's step) are counted.
        let cpu = measured(40.0, 1.0, Some((2.0, 1.0, true)));
        assert!(cpu.counted.is_some() && cpu.bound == Bound::Rest);
        // Allreduces alone beyond the step: no verdict.
        assert_eq!(measured(10.0, 12.0, None).bound, Bound::Unknown);
    }

    #[test]
    fn the_largest_counted_part_bounds_the_step() {
        let v = measured(95.0, 8.9, Some((61.0, 3.0, false)));
        assert_eq!(v.bound, Bound::Compute);
        assert!((v.rest_ms - 22.1).abs() < 1e-9);
        assert_eq!(
            measured(95.0, 60.0, Some((20.0, 3.0, false))).bound,
            Bound::Communication
        );
        assert_eq!(
            measured(95.0, 5.0, Some((20.0, 3.0, false))).bound,
            Bound::Rest
        );
        assert_eq!(
            measured(10.0, 1.0, Some((2.0, 6.0, false))).bound,
            Bound::Launch
        );
        assert_eq!(
            measured(10.0, 3.0, None).bound,
            Bound::LargeCommunicationShare
        );
    }
}
