//! What loadgen refuses before it loads anything: flag values that make no sense, and values
//! that would exhaust the client or outgrow the server. Each is one usage line naming the flag
//! and the bound (exit 2): threads, prompt lengths (against loadgen's bound, then the server's
//! `max_model_len`), and concurrency against the open-files limit.

use crate::Args;
use servbench::cli;

pub fn validate(a: &Args) -> anyhow::Result<()> {
    if a.repeat == 0 {
        return Err(cli::usage("--repeat must be at least 1"));
    }
    if a.prompts.is_some() && a.input_len.is_some() {
        return Err(cli::usage(
            "--input-len makes synthetic prompts; it cannot be combined with --prompts",
        ));
    }
    if let Some(r) = &a.rate
        && r.iter().any(|x| !(x.is_finite() && *x > 0.0))
    {
        return Err(cli::usage(
            "--rate values must be positive requests per second",
        ));
    }
    if let Some(&r) = a.rate.iter().flatten().find(|&&r| r < MIN_RATE) {
        return Err(cli::usage(format!(
            "--rate {r:e}: at least {MIN_RATE} requests per second (one each 1000 s)"
        )));
    }
    if a.concurrency.as_ref().is_some_and(|c| c.contains(&0)) || a.max_concurrency == Some(0) {
        return Err(cli::usage("concurrency must be at least 1"));
    }
    if a.requests == Some(0) {
        return Err(cli::usage("-n must be at least 1"));
    }
    if a.max_tokens.as_ref().is_some_and(|m| m.contains(&0)) {
        return Err(cli::usage("--max-tokens must be at least 1"));
    }
    if let Some(&n) = a.input_len.iter().flatten().find(|&&n| n > MAX_INPUT_LEN) {
        return Err(cli::usage(format!(
            "--input-len {n}: at most {MAX_INPUT_LEN} tokens (beyond any model's context)"
        )));
    }
    workload(a)?;
    workloads(a)?;
    if let Some(t) = a.threads.filter(|t| !(1..=MAX_THREADS).contains(t)) {
        return Err(cli::usage(format!(
            "--threads {t}: between 1 and {MAX_THREADS} (default: the cores, at most 8)"
        )));
    }
    Ok(())
}

/// The finest `--find-max-precision`: two loads 0.1% apart give the same measurement within
/// its noise, and a finer search only bisects towards adjacent floats.
const MIN_PRECISION: f64 = 0.001;

/// The slowest `--rate`: below it the first send is so far off that its time overflows.
const MIN_RATE: f64 = 0.001;

/// Unique words each synthetic prompt has after its shared prefix (see `workload`).
const UNIQUE_TOKENS: u32 = 8;

/// The request-body and workload flags.
fn workload(a: &Args) -> anyhow::Result<()> {
    if let Some(t) = a.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(cli::usage(format!("--temperature {t}: must be 0 or more")));
    }
    if let Some(p) = a.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(cli::usage(format!("--top-p {p}: must be in (0, 1]")));
    }
    if a.prefix_groups == Some(0) {
        return Err(cli::usage("--prefix-groups must be at least 1"));
    }
    if let Some(p) = a.prefix_len {
        let lens = a.input_len.clone().unwrap_or_else(|| vec![256]);
        if let Some(&l) = lens.iter().find(|&&l| l < p.saturating_add(UNIQUE_TOKENS)) {
            return Err(cli::usage(format!(
                "--prefix-len {p} leaves {} tokens of --input-len {l} for the unique suffix; at least {UNIQUE_TOKENS} are needed",
                l.saturating_sub(p)
            )));
        }
    }
    if a.no_stream
        && let Some(slo) = &a.slo
        && (slo.ttft_ms.is_some() || slo.tpot_ms.is_some() || slo.itl_ms.is_some())
    {
        return Err(cli::usage(
            "--slo with --no-stream: a non-streaming request has no TTFT, TPOT or ITL; use e2e_ms",
        ));
    }
    Ok(())
}

/// The conversation, trace and search modes: what they cannot be combined with.
fn workloads(a: &Args) -> anyhow::Result<()> {
    if a.trace.is_some() {
        let clash = [
            (a.input_len.is_some(), "--input-len"),
            (a.max_tokens.is_some(), "--max-tokens"),
            (a.prompts.is_some(), "--prompts"),
            (a.turns.is_some(), "--turns"),
            (a.concurrency.is_some(), "-c"),
            (a.rate.is_some(), "-r"),
            (a.find_max.is_some(), "--find-max"),
            (a.ramp, "--ramp"),
            (a.step_grid, "--step-grid"),
        ];
        if let Some((_, flag)) = clash.iter().find(|(given, _)| *given) {
            return Err(cli::usage(format!(
                "--trace sets the times and lengths of every request; it cannot be combined with {flag}"
            )));
        }
        if a.trace_speed.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
            return Err(cli::usage(
                "--trace-speed values must be positive (2: twice as fast)",
            ));
        }
        if a.trace_block == 0 {
            return Err(cli::usage("--trace-block must be at least 1 token"));
        }
    }
    if a.turns.is_some() && a.prompts.as_deref() == Some("builtin") {
        return Err(cli::usage(
            "--turns needs synthetic prompts (--input-len) or a conversations file (--prompts FILE), not the built-in prompts",
        ));
    }
    if a.turns == Some(crate::workload::conversation::Turns::All) && a.prompts.is_none() {
        return Err(cli::usage(
            "--turns all takes every turn of a conversations file (--prompts FILE); synthetic conversations need a count (--turns 3) or a range (--turns 2..6)",
        ));
    }
    if a.step_grid && (a.input_len.is_none() || a.prompts.is_some() || a.turns.is_some()) {
        return Err(cli::usage(
            "--step-grid needs synthetic prompts of known lengths: --input-len (a list), without --prompts or --turns",
        ));
    }
    if a.turns.is_some() && a.ramp {
        return Err(cli::usage(
            "--ramp cannot run conversations (--turns); use -c with a list",
        ));
    }
    if let Some(var) = a.find_max {
        if a.slo.is_none() {
            return Err(cli::usage(
                "--find-max needs the objectives to meet: --slo ttft_ms=...,tpot_ms=...",
            ));
        }
        let (given, flag) = match var {
            crate::modes::search::Var::Rate => (a.rate.as_ref().map(Vec::len), "-r"),
            crate::modes::search::Var::Concurrency => (a.concurrency.as_ref().map(Vec::len), "-c"),
        };
        if given.is_some_and(|n| n > 1) {
            return Err(cli::usage(format!(
                "--find-max starts from one {flag} value (the first load tried), not a list"
            )));
        }
        let other = match var {
            crate::modes::search::Var::Rate => a.concurrency.is_some().then_some("-c"),
            crate::modes::search::Var::Concurrency => a.rate.is_some().then_some("-r"),
        };
        if let Some(other) = other {
            return Err(cli::usage(format!(
                "--find-max {} varies {flag}; {other} does not apply",
                var.field()
            )));
        }
        if !(a.find_max_precision >= MIN_PRECISION && a.find_max_precision < 1.0) {
            return Err(cli::usage(format!(
                "--find-max-precision is a share from {MIN_PRECISION} (0.1%) to below 1 (0.05: 5%): finer than a load point can tell apart"
            )));
        }
        if a.find_max_tries == 0 {
            return Err(cli::usage("--find-max-tries must be at least 1"));
        }
        if a.find_max_limit
            .is_some_and(|l| !(l.is_finite() && l >= 1.0))
        {
            return Err(cli::usage("--find-max-limit must be at least 1"));
        }
    }
    if !(a.slo_attainment > 0.0 && a.slo_attainment <= 1.0) {
        return Err(cli::usage(
            "--slo-attainment is a share above 0, at most 1 (0.9: 90%)",
        ));
    }
    Ok(())
}

/// Longest synthetic prompt loadgen builds, in tokens: 10 M (Llama 4 Scout's context), shared's
/// bound on a trace row too; each request's body holds the prompt (about 6 bytes a token).
pub(crate) use servbench::load::trace::MAX_INPUT_LEN;
/// Most runtime threads `--threads` takes: past a few per core they only cost memory.
const MAX_THREADS: usize = 1024;
/// Descriptors loadgen needs besides one socket per request in flight (stdio, the runtime's
/// epoll and wakers, the pool's connections being replaced).
const SPARE_FILES: u64 = 64;

/// One socket per request in flight: the open-files limit (already raised to its hard
/// maximum, `limit`) must fit the highest concurrency, or requests fail by the thousand with
/// EMFILE. A fixed concurrency that does not fit is refused; a ramp's ceiling is lowered.
pub fn fit_open_files(a: &mut Args, limit: u64) -> anyhow::Result<()> {
    if limit == 0 {
        return Ok(());
    }
    let room = limit.saturating_sub(SPARE_FILES);
    let fixed = if a.rate.is_some() {
        a.max_concurrency.map(|c| ("--max-concurrency", c))
    } else if a.ramp || a.find_max == Some(crate::modes::search::Var::Concurrency) {
        a.concurrency
            .as_ref()
            .and_then(|l| l.first())
            .map(|&c| ("-c", c))
    } else {
        a.concurrency
            .as_ref()
            .and_then(|l| l.iter().max())
            .map(|&c| ("-c", c))
    };
    if let Some((flag, c)) = fixed
        && u64::from(c) > room
    {
        return Err(cli::usage(format!(
            "{flag} {c} needs {c} connections but this process may open only {limit} files (ulimit -Hn; {SPARE_FILES} go elsewhere): raise the limit or lower {flag}"
        )));
    }
    let searching = a.find_max == Some(crate::modes::search::Var::Concurrency);
    if searching
        && let Some(l) = a.find_max_limit
        && l > room as f64
    {
        return Err(cli::usage(format!(
            "--find-max-limit {l} needs as many connections but this process may open only {limit} files (ulimit -Hn): raise the limit or lower --find-max-limit"
        )));
    }
    if (a.ramp || searching) && u64::from(a.ramp_max) > room {
        let fits = u32::try_from(room).unwrap_or(u32::MAX);
        cli::warn(format!(
            "--ramp-max {} lowered to {fits}: this process may open only {limit} files (ulimit -Hn)",
            a.ramp_max
        ));
        a.ramp_max = fits;
    }
    Ok(())
}

/// The longest prompt and output a run asks for, checked against the server's context once
/// /v1/models says what it is.
#[derive(Debug, Clone, Copy)]
pub struct Lengths {
    /// The most `--max-tokens` (256 without).
    pub out: u32,
    /// The longest `--input-len`.
    pub longest: Option<u32>,
    /// The most turns of a conversation (1 without).
    pub turns: u32,
}

impl Lengths {
    pub fn of(a: &Args) -> Lengths {
        Lengths {
            out: a
                .max_tokens
                .as_ref()
                .and_then(|m| m.iter().max().copied())
                .unwrap_or(256),
            longest: a.input_len.as_ref().and_then(|l| l.iter().max().copied()),
            turns: a.turns.and_then(|t| t.most()).unwrap_or(1),
        }
    }

    /// Synthetic prompts plus their output must fit the server's context, where /v1/models
    /// says what it is: checked before any prompt is built (a server would refuse each
    /// request). A conversation's last turn holds every turn before it and their replies.
    pub fn check(&self, max_model_len: Option<u32>) -> anyhow::Result<()> {
        let Some(limit) = max_model_len else {
            return Ok(());
        };
        let Lengths {
            out,
            longest,
            turns,
        } = *self;
        let need = u64::from(turns) * (u64::from(longest.unwrap_or(1)) + u64::from(out));
        if need > u64::from(limit) {
            let mut what = match longest {
                Some(n) => format!("--input-len {n} with {out} output tokens"),
                None => format!("--max-tokens {out}"),
            };
            if turns > 1 {
                what = format!("{what} over {turns} turns");
            }
            return Err(cli::usage(format!(
                "{what} needs {need} tokens of context but the server's max_model_len is {limit} (from /v1/models): lower --input-len or --max-tokens"
            )));
        }
        Ok(())
    }
}

/// [`Lengths::check`] of the flags.
pub fn check_lengths(a: &Args, max_model_len: Option<u32>) -> anyhow::Result<()> {
    Lengths::of(a).check(max_model_len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(extra: &[&str]) -> Args {
        let mut a = vec!["loadgen"];
        a.extend_from_slice(extra);
        Args::parse_from(a)
    }

    /// One socket per request in flight: a concurrency the open-files limit cannot hold is
    /// refused naming the flag; a ramp's ceiling is lowered to fit instead.
    #[test]
    fn concurrency_beyond_the_open_files_limit_is_refused_and_a_ramp_is_capped() {
        let mut a = args(&["-c", "1,500"]);
        let e = fit_open_files(&mut a, 512).unwrap_err().to_string();
        assert!(e.contains("-c 500") && e.contains("512 files"), "{e}");
        assert!(fit_open_files(&mut args(&["-c", "1,448"]), 512).is_ok());
        let mut open = args(&["-r", "10", "--max-concurrency", "1000"]);
        let e = fit_open_files(&mut open, 512).unwrap_err().to_string();
        assert!(e.contains("--max-concurrency 1000"), "{e}");
        let mut ramp = args(&["--ramp", "-c", "8"]);
        fit_open_files(&mut ramp, 1024).unwrap();
        assert_eq!(ramp.ramp_max, 1024 - SPARE_FILES as u32);
        assert!(
            fit_open_files(&mut args(&["-c", "5000"]), 0).is_ok(),
            "unknown limit"
        );
    }

    #[test]
    fn prompts_and_outputs_must_fit_the_servers_context() {
        let a = args(&["--input-len", "1000,4000", "--max-tokens", "64,128"]);
        assert!(check_lengths(&a, None).is_ok());
        assert!(check_lengths(&a, Some(4128)).is_ok());
        let e = check_lengths(&a, Some(4127)).unwrap_err().to_string();
        assert!(
            e.contains("--input-len 4000") && e.contains("4128") && e.contains("4127"),
            "{e}"
        );
        let e = check_lengths(&args(&["--max-tokens", "9000"]), Some(8192))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--max-tokens 9000"), "{e}");
        assert!(validate(&args(&["--input-len", "10000001"])).is_err());
        assert!(validate(&args(&["--threads", "0"])).is_err());
        assert!(validate(&args(&["--threads", "1024"])).is_ok());
    }

    #[test]
    fn a_step_grid_needs_synthetic_prompts_of_known_length() {
        for flags in [
            &["--step-grid"][..],
            &["--step-grid", "--prompts", "builtin"],
        ] {
            let e = validate(&args(flags)).unwrap_err().to_string();
            assert!(e.contains("--step-grid needs synthetic prompts"), "{e}");
        }
        validate(&args(&["--step-grid", "--input-len", "64", "-c", "1,4"])).unwrap();
    }
}
