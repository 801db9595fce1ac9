//! Which source each point's energy per token came from (`input::energy` computes it): the
//! GPUs' energy counters, their sampled power, or both.

use crate::input::energy::point_energy;
use crate::input::energy::whole_gpus;
use crate::notes::note::Facts;
use crate::notes::words::load_name;
use servbench::record::EnergySource;

/// Which source each point's energy came from, one line per source ("energy per token
/// (j_per_tok) from the GPUs' energy counters: C=1, C=2"); nothing for points whose records
/// name no source.
pub fn source_notes(facts: &Facts) -> Vec<String> {
    let points = facts.points;
    let mut counter = Vec::new();
    let mut sampled = Vec::new();
    let mut mixed = Vec::new();
    for p in points {
        let mut sources: Vec<EnergySource> = Vec::new();
        for s in &p.repeats {
            let gpus = whole_gpus(s);
            // Records from before loadgen said its source are left unnamed.
            if gpus.iter().all(|g| g.energy_source.is_none()) {
                continue;
            }
            if let Some((_, of)) = point_energy(&gpus, s.duration_s) {
                sources.extend(of);
            }
        }
        let target = match (
            sources.contains(&EnergySource::Counter),
            sources.contains(&EnergySource::SampledPower),
        ) {
            (true, false) => &mut counter,
            (false, true) => &mut sampled,
            (true, true) => &mut mixed,
            (false, false) => continue,
        };
        let name = load_name(p);
        if !target.contains(&name) {
            target.push(name);
        }
    }
    [
        (counter, "from the GPUs' energy counters"),
        (
            sampled,
            "from the GPUs' sampled power integrated over the point (no usable energy \
             counter; loadgen's note said why)",
        ),
        (
            mixed,
            "from the energy counters of some GPUs and the sampled power of the others",
        ),
    ]
    .into_iter()
    .filter(|(names, _)| !names.is_empty())
    .map(|(names, how)| format!("energy per token (j_per_tok) {how}: {}", names.join(", ")))
    .collect()
}
