//! Energy per output token, from the GPUs' own energy counters where loadgen read them
//! (`gpus[].energy_j`, `energy_source: counter`), else from their sampled power integrated over
//! the point (the mean of `power_w` times the point's duration). The note saying which source
//! each point's figure came from is `notes::energy`.

use servbench::record::{EnergySource, GpuStats, SummaryRecord};

/// One GPU's energy over the point in joules and where it comes from; `None` where it has
/// neither a counter reading nor a sampled power.
fn gpu_energy(g: &GpuStats, duration_s: f64) -> Option<(f64, EnergySource)> {
    match (g.energy_source, g.energy_j) {
        (Some(EnergySource::Counter), Some(j)) if j.is_finite() && j >= 0.0 => {
            Some((j, EnergySource::Counter))
        }
        _ => Some((g.power_w?.mean * duration_s, EnergySource::SampledPower)),
    }
}

/// The point's energy over `gpus` (each GPU once) and its sources; `None` when one GPU has
/// none or there are no GPUs.
pub fn point_energy(gpus: &[&GpuStats], duration_s: f64) -> Option<(f64, Vec<EnergySource>)> {
    let each: Option<Vec<(f64, EnergySource)>> =
        gpus.iter().map(|g| gpu_energy(g, duration_s)).collect();
    let each = each.filter(|e| !e.is_empty())?;
    Some((
        each.iter().map(|(j, _)| j).sum(),
        each.into_iter().map(|(_, s)| s).collect(),
    ))
}

/// Joules per output token on `gpus` (the server's, each once).
pub fn joules_per_token(s: &SummaryRecord, gpus: &[&GpuStats]) -> Option<f64> {
    let (joules, _) = point_energy(gpus, s.duration_s)?;
    (s.output_tokens > 0 && s.duration_s > 0.0).then(|| joules / s.output_tokens as f64)
}

/// The summary's GPUs, each once (a MIG GPU's instances share its power and count once).
pub(crate) fn whole_gpus(s: &SummaryRecord) -> Vec<&GpuStats> {
    let mut seen = Vec::new();
    s.gpus
        .iter()
        .filter(|g| {
            let fresh = !seen.contains(&g.index);
            seen.push(g.index);
            fresh
        })
        .collect()
}
