//! `srv-sim --search --gpus N`: which layout to launch. Every tensor-, pipeline- and
//! data-parallel split of the N GPUs (TP a power of two dividing the attention heads, PP at most
//! the layers, DP the rest), and every disaggregated xPyD split (x + y members of N/(x+y) GPUs
//! each, rounded down, each member's TP x PP over them), is checked for fit (weights and one
//! longest request's KV per member); each that fits is run in virtual time as `--predict` runs
//! one replica (or one P/D group, `--pd`), at closed-loop concurrencies doubled from 1 then
//! bisected, to the highest whose p90 TTFT and TPOT meet the SLO. Layouts are ranked by output
//! tok/s per GPU they use at that load, each with the `srv-launch` command that starts it; those
//! that do not fit, or meet the SLO at no load, are named with why.

use crate::plan::{Action, Plan};
use crate::predict::{self, Engine};
use servbench::cli;
use servbench::presets::{Layout, PdLayout};
use servbench::record::SummaryRecord;
use servbench::stats::Slo;
use std::fmt::Write as _;

/// `--search` and its SLO default.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// Rank every TP x PP x DP layout of --gpus, and every xPyD prefill/decode split of them,
    /// by output tok/s per GPU at its best load under --slo (default ttft_ms=2000,tpot_ms=50, at
    /// p90), in virtual time, with its srv-launch line
    #[arg(long, conflicts_with_all = ["predict", "calibrate", "calibrate_from", "dry_run"])]
    pub search: bool,
}

/// The SLO a layout must meet when --slo is not given.
pub const DEFAULT_SLO: Slo = Slo {
    ttft_ms: Some(2000.0),
    tpot_ms: Some(50.0),
    itl_ms: None,
    e2e_ms: None,
};

/// The highest load tried per replica.
const MAX_CONCURRENCY: u32 = 1024;

/// One layout's outcome.
struct Outcome {
    layout: Layout,
    dp: u32,
    /// A disaggregated group of members laid out as `layout` (`dp` is 1).
    pd: Option<PdLayout>,
    /// GPUs it uses: all of them, or a P/D group's members'.
    used: u32,
    /// The best load's point, or why there is none.
    best: Result<(u32, SummaryRecord), String>,
}

/// The layouts of `gpus` GPUs for a model with `heads` attention heads and `layers` layers.
fn layouts(gpus: u32, heads: u32, layers: u32) -> Vec<(Layout, u32)> {
    let mut out = Vec::new();
    let mut tp = 1;
    while tp <= gpus {
        if gpus.is_multiple_of(tp) && heads.is_multiple_of(tp) {
            for pp in (1..=gpus / tp).filter(|pp| (gpus / tp).is_multiple_of(*pp) && *pp <= layers)
            {
                out.push((Layout { tp, pp }, gpus / (tp * pp)));
            }
        }
        tp *= 2;
    }
    out
}

/// The disaggregated splits of `gpus` GPUs: x + y members of gpus / (x + y) GPUs each (rounded
/// down: 2P1D on eight takes six), each member's TP x PP over them.
fn pd_layouts(gpus: u32, heads: u32, layers: u32) -> Vec<(Layout, PdLayout)> {
    let mut out = Vec::new();
    for members in 2..=gpus {
        let per = gpus / members;
        for prefill in 1..members {
            let pd = PdLayout {
                prefill,
                decode: members - prefill,
            };
            out.extend(
                layouts(per, heads, layers)
                    .into_iter()
                    .filter(|&(_, dp)| dp == 1)
                    .map(|(layout, _)| (layout, pd)),
            );
        }
    }
    out
}

fn meets(s: &SummaryRecord, slo: &Slo) -> bool {
    let within = |d: Option<&servbench::record::Dist>, bound: Option<f64>| match bound {
        None => true,
        Some(b) => d.is_some_and(|d| d.n > 0 && d.p90 <= b),
    };
    s.ok > 0
        && s.errors == 0
        && within(s.ttft_ms.as_ref(), slo.ttft_ms)
        && within(s.tpot_ms.as_ref(), slo.tpot_ms)
        && within(s.e2e_ms.as_ref(), slo.e2e_ms)
}

/// The highest concurrency (doubling, then bisecting) whose point meets the SLO.
fn best_load(
    engine: &Engine,
    slo: &Slo,
    input_len: u32,
    max_tokens: u32,
) -> Option<(u32, SummaryRecord)> {
    // A P/D group holds as many requests as its decode engines' slots.
    let slots = engine.pd.map_or(1, |pd| pd.decode);
    let cap = engine
        .max_running
        .map_or(MAX_CONCURRENCY, |m| m.saturating_mul(slots))
        .min(MAX_CONCURRENCY);
    let at = |c: u32| {
        let s = predict::predict_closed(engine, c, u64::from(c.max(8)) * 3, input_len, max_tokens);
        meets(&s, slo).then_some((c, s))
    };
    let mut pass = at(1)?;
    let mut fail = None;
    while pass.0 < cap {
        let next = (pass.0 * 2).min(cap);
        match at(next) {
            Some(p) => pass = p,
            None => {
                fail = Some(next);
                break;
            }
        }
    }
    while let Some(f) = fail
        && f - pass.0 > 1
    {
        let mid = pass.0 + (f - pass.0) / 2;
        match at(mid) {
            Some(p) => pass = p,
            None => fail = Some(mid),
        }
    }
    Some(pass)
}

fn launch_line(model: &str, layout: Layout, dp: u32, pd: Option<PdLayout>) -> String {
    let mut s = format!(
        "srv-launch vllm --model {model} --tp {} --pp {}",
        layout.tp, layout.pp
    );
    if let Some(pd) = pd {
        // The members' GPUs in srv-launch's order: each member's run, the prefill ones first.
        let gpus: Vec<String> = (0..pd.servers() * layout.gpus())
            .map(|g| g.to_string())
            .collect();
        let _ = write!(s, " --pd {pd} --gpus {}", gpus.join(","));
    } else if dp > 1 {
        let _ = write!(s, " -- --data-parallel-size {dp}");
    }
    s
}

/// Runs `--search` for the plan's model, card and GPUs: the ranking on stdout.
pub fn run(plan: &Plan) -> anyhow::Result<cli::Exit> {
    let gpus = plan.engine.replicas * plan.model.layout.gpus();
    let slo = plan.predict.load.slo.clone().unwrap_or(DEFAULT_SLO);
    let input_len = plan
        .predict
        .load
        .input_len
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(1024);
    let max_tokens = plan
        .predict
        .load
        .max_tokens
        .as_ref()
        .and_then(|l| l.first().copied())
        .unwrap_or(256);
    let first = plan.roofline()?;
    let (model, hardware) = (first.dep.model.clone(), first.dep.hw.clone());
    if gpus > hardware.gpus {
        return Err(cli::usage(format!(
            "--gpus {gpus}: a {} node has {}; layouts across nodes are not modelled",
            hardware.name, hardware.gpus
        )));
    }
    let colocated = layouts(gpus, model.heads, model.layers)
        .into_iter()
        .map(|(layout, dp)| (layout, dp, None));
    let disaggregated = pd_layouts(gpus, model.heads, model.layers)
        .into_iter()
        .map(|(layout, pd)| (layout, 1, Some(pd)));
    let mut outcomes = Vec::new();
    for (layout, dp, pd) in colocated.chain(disaggregated) {
        let mut p = plan.clone();
        p.model.layout = layout;
        p.engine.replicas = 1;
        p.action = Action::Predict;
        p.predict.pd = pd;
        let roofline = p.roofline()?;
        let best = match roofline.fit_problem(p.engine.max_model_len) {
            Some(why) => Err(format!("does not fit: {why}")),
            None => {
                let engine = p.predict_engine(roofline)?;
                best_load(&engine, &slo, input_len, max_tokens).ok_or_else(|| {
                    "meets the SLO at no load (not even one request at a time)".to_string()
                })
            }
        };
        let used = pd.map_or(gpus, |pd| pd.servers() * layout.gpus());
        outcomes.push(Outcome {
            layout,
            dp,
            pd,
            used,
            best,
        });
    }
    let per_gpu = |o: &Outcome| match &o.best {
        Ok((_, s)) => s.output_tok_s * f64::from(o.dp) / f64::from(o.used),
        Err(_) => -1.0,
    };
    outcomes.sort_by(|a, b| per_gpu(b).total_cmp(&per_gpu(a)));
    let mut text = format!(
        "# {} on {gpus} x {}, in={input_len} out={max_tokens}, SLO {} at p90: layouts by output tok/s per GPU used at their best load\n",
        model.name,
        hardware.name,
        slo_text(&slo)
    );
    let _ = writeln!(
        text,
        "{:>4} {:>3} {:>3} {:>3} {:>5} {:>4} {:>10} {:>10} {:>9} {:>10} {:>10}  launch",
        "rank",
        "tp",
        "pp",
        "dp",
        "pd",
        "gpus",
        "C/replica",
        "tok/s",
        "tok/s/GPU",
        "TTFT p90",
        "TPOT p90"
    );
    let mut rank = 0;
    for o in &outcomes {
        let Ok((c, s)) = &o.best else { continue };
        rank += 1;
        let _ = writeln!(
            text,
            "{rank:>4} {:>3} {:>3} {:>3} {:>5} {:>4} {c:>10} {:>10.0} {:>9.1} {:>10.1} {:>10.2}  {}",
            o.layout.tp,
            o.layout.pp,
            o.dp,
            o.pd.map_or("-".to_string(), |pd| pd.to_string()),
            o.used,
            s.output_tok_s * f64::from(o.dp),
            per_gpu(o),
            s.ttft_ms.as_ref().map_or(f64::NAN, |d| d.p90),
            s.tpot_ms.as_ref().map_or(f64::NAN, |d| d.p90),
            launch_line(&model.name, o.layout, o.dp, o.pd)
        );
    }
    // The misfits, P/D splits of one member layout and one reason on one line.
    let mut misfits: Vec<(String, &str)> = Vec::new();
    for o in &outcomes {
        let Err(why) = &o.best else { continue };
        let members = format!(" of tp{} pp{}", o.layout.tp, o.layout.pp);
        match o.pd {
            Some(pd) => match misfits
                .iter_mut()
                .find(|(name, w)| *w == why.as_str() && name.ends_with(&members))
            {
                Some((name, _)) => name.insert_str(name.len() - members.len(), &format!(", {pd}")),
                None => misfits.push((format!("{pd}{members}"), why)),
            },
            None => misfits.push((
                format!("tp{} pp{} dp{}", o.layout.tp, o.layout.pp, o.dp),
                why,
            )),
        }
    }
    for (name, why) in misfits {
        let _ = writeln!(text, "   - {name}: {why}");
    }
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .map_err(servbench::jsonl::OutputError::from_io)?;
    Ok(if rank > 0 {
        cli::Exit::Ok
    } else {
        cli::Exit::Failed
    })
}

fn slo_text(slo: &Slo) -> String {
    [
        ("ttft_ms", slo.ttft_ms),
        ("tpot_ms", slo.tpot_ms),
        ("e2e_ms", slo.e2e_ms),
    ]
    .iter()
    .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
    .collect::<Vec<_>>()
    .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eight_gpus_split_every_way_the_heads_allow() {
        let l = layouts(8, 64, 80);
        assert_eq!(l.len(), 10);
        assert!(l.iter().all(|(x, dp)| x.tp * x.pp * dp == 8));
        // 12 heads: TP 8 does not divide them, TP 4 does.
        let twelve = layouts(8, 12, 64);
        assert!(!twelve.iter().any(|(x, _)| x.tp == 8));
        assert!(twelve.iter().any(|(x, _)| x.tp == 4));
        // PP is at most the layers.
        assert!(layouts(8, 64, 2).iter().all(|(x, _)| x.pp <= 2));
    }

    #[test]
    fn eight_gpus_split_into_prefill_and_decode_members_of_equal_layouts() {
        let l = pd_layouts(8, 64, 64);
        let has = |tp: u32, pp: u32, pd: &str| {
            l.iter()
                .any(|(x, p)| (x.tp, x.pp, p.to_string()) == (tp, pp, pd.to_string()))
        };
        // 1P1D of four GPUs each, 2P1D and 1P2D of two (six used), 7P1D of one.
        assert!(has(4, 1, "1p1d") && has(2, 2, "1p1d") && has(1, 4, "1p1d"));
        assert!(has(2, 1, "2p1d") && has(1, 2, "1p2d") && has(1, 1, "7p1d"));
        assert!(!has(4, 1, "2p1d") && !has(1, 1, "8p1d"));
        assert!(
            l.iter()
                .all(|(x, p)| p.servers() * x.gpus() <= 8 && p.servers() >= 2)
        );
    }
}
