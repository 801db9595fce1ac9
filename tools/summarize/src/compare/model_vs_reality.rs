//! `--compare predicted.jsonl measured.jsonl` read as model against reality: when every point of
//! one side is srv-sim's prediction (labelled `source=predicted`) and the other side's are not,
//! the comparison says how far the model is off per figure (the mean absolute error over the
//! points and the worst point, named) and notes a measured point whose throughput falls far
//! below the prediction, where the engine lost what the model says the hardware has. Two
//! predictions compared are neither (`compare` titles them so).

use crate::input::metrics::Metric;
use crate::input::points::{Keys, Point, point_name};

/// The label srv-sim --predict puts on its records.
pub const SOURCE_LABEL: &str = "source";
pub const PREDICTED: &str = "predicted";

/// A measured throughput below this share of the prediction gets a note of its own.
pub const FAR_BELOW: f64 = 0.7;

/// Whether `points` are all a prediction.
pub fn is_prediction(points: &[Point]) -> bool {
    !points.is_empty()
        && points
            .iter()
            .all(|p| p.labels.get(SOURCE_LABEL).map(String::as_str) == Some(PREDICTED))
}

/// The notes of a model-against-reality comparison of (predicted, measured) pairs.
pub fn notes(pairs: &[(&Point, &Point)], metrics: &[Metric]) -> Vec<String> {
    let all: Vec<Point> = pairs.iter().map(|(p, _)| (*p).clone()).collect();
    let varying = Keys::of(&all).varying;
    let mut out = Vec::new();
    for m in metrics {
        let errors: Vec<(f64, &Point)> = pairs
            .iter()
            .filter_map(|(p, r)| {
                let (model, real) = (p.mean(*m)?, r.mean(*m)?);
                // As MAPE is taken: the model's error over the measured value.
                let e = model / real - 1.0;
                (e.is_finite() && real > 0.0).then_some((e, *p))
            })
            .collect();
        let Some(&(worst, at)) = errors.iter().max_by(|a, b| a.0.abs().total_cmp(&b.0.abs()))
        else {
            continue;
        };
        let mean = errors.iter().map(|(e, _)| e.abs()).sum::<f64>() / errors.len() as f64;
        out.push(format!(
            "model vs reality, {}: the model is off the measurement by {:.1}% on average (MAPE over {} point(s)); worst at {}: {:+.1}%",
            m.header(),
            mean * 100.0,
            errors.len(),
            point_name(at, &varying),
            worst * 100.0
        ));
    }
    for (p, r) in pairs {
        let (Some(model), Some(real)) = (p.mean(Metric::TOK_S), r.mean(Metric::TOK_S)) else {
            continue;
        };
        if model > 0.0 && real < FAR_BELOW * model {
            out.push(format!(
                "the engine lost {:.0}% at {} against the calibrated prediction ({real:.1} tok/s measured, {model:.1} predicted): look at the batch limits (max running requests, KV budget, preemptions) and the scheduler",
                (1.0 - real / model) * 100.0,
                point_name(p, &varying)
            ));
        }
    }
    out
}
