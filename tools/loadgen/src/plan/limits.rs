//! What loadgen refuses before it loads anything: flag values that make no sense, and values
//! that would exhaust the client or outgrow the server. Each is one usage line naming the flag
//! and the bound (exit 2): threads, prompt lengths (against loadgen's bound, then the server's
//! `max_model_len`), and concurrency against the open-files limit.

use crate::Args;
use servbench::cli;
use servbench::load::search::Var;

pub fn validate(a: &Args) -> anyhow::Result<()> {
    if a.prompts.is_some() && a.load.input_len.is_some() {
        return Err(cli::usage(
            "--input-len makes synthetic prompts; it cannot be combined with --prompts",
        ));
    }
    a.load.check(a.prompts.as_deref())?;
    step_grid(a)?;
    body(a)?;
    if let Some(t) = a.threads.filter(|t| !(1..=MAX_THREADS).contains(t)) {
        return Err(cli::usage(format!(
            "--threads {t}: between 1 and {MAX_THREADS} (default: the cores, at most 8)"
        )));
    }
    Ok(())
}

/// The request-body flags.
fn body(a: &Args) -> anyhow::Result<()> {
    if let Some(t) = a.temperature.filter(|t| !(t.is_finite() && *t >= 0.0)) {
        return Err(cli::usage(format!("--temperature {t}: must be 0 or more")));
    }
    if let Some(p) = a.top_p.filter(|p| !(*p > 0.0 && *p <= 1.0)) {
        return Err(cli::usage(format!("--top-p {p}: must be in (0, 1]")));
    }
    // An eval is greedy: its accuracy, and two runs' agreement, mean nothing sampled.
    if a.eval.is_some()
        && let Some(t) = a.extra_body.as_ref().and_then(|e| e.0.get("temperature"))
        && t.as_f64() != Some(0.0)
    {
        return Err(cli::usage(format!(
            "--eval sends at temperature 0, --extra-body sets \"temperature\": {t}"
        )));
    }
    if a.images > 0 && a.api != crate::Api::Chat {
        return Err(cli::usage(format!(
            "--images with --api {}: images go in chat messages (use --api chat)",
            a.api.name()
        )));
    }
    // vLLM's and SGLang's guided JSON is the OpenAI APIs' `response_format`; the Responses and
    // Messages APIs name structured output otherwise, an embedding has no answer to check.
    if a.response_format.is_some() && !matches!(a.api, crate::Api::Completions | crate::Api::Chat) {
        return Err(cli::usage(format!(
            "--response-format with --api {}: it is sent as response_format, which completions and chat take (use --api completions or chat)",
            a.api.name()
        )));
    }
    if !a.api.generates() {
        // What a flag asks of the output an embedding does not have: refused, not ignored.
        let given = [
            ("--max-tokens", a.load.max_tokens.is_some()),
            ("--turns", a.load.turns.is_some()),
            ("--step-grid", a.step_grid),
            ("--temperature", a.temperature.is_some()),
            ("--top-p", a.top_p.is_some()),
        ];
        if let Some((flag, _)) = given.iter().find(|g| g.1) {
            return Err(cli::usage(format!(
                "{flag} with --api embeddings: an embedding has no output to ask it of (its figures are latency and inputs/s)"
            )));
        }
        if let Some(slo) = &a.load.slo
            && (slo.ttft_ms.is_some() || slo.tpot_ms.is_some() || slo.itl_ms.is_some())
        {
            return Err(cli::usage(
                "--slo with --api embeddings: an embedding has no TTFT, TPOT or ITL; use e2e_ms",
            ));
        }
    }
    if a.no_stream
        && let Some(slo) = &a.load.slo
        && (slo.ttft_ms.is_some() || slo.tpot_ms.is_some() || slo.itl_ms.is_some())
    {
        return Err(cli::usage(
            "--slo with --no-stream: a non-streaming request has no TTFT, TPOT or ITL; use e2e_ms",
        ));
    }
    lora(a)
}

/// `--lora`: no adapter twice; an exponent only for zipf.
fn lora(a: &Args) -> anyhow::Result<()> {
    for (i, name) in a.lora.iter().enumerate() {
        if a.lora[..i].contains(name) {
            return Err(cli::usage(format!(
                "--lora: '{name}' is named twice; each adapter once (--lora-assignment sets the shares)"
            )));
        }
    }
    if a.lora_zipf_exponent.is_some() && a.lora_assignment != crate::lora::Assignment::Zipf {
        return Err(cli::usage(
            "--lora-zipf-exponent: only with --lora-assignment zipf",
        ));
    }
    Ok(())
}

/// `--step-grid` (loadgen's own mode): synthetic prompts of known lengths.
fn step_grid(a: &Args) -> anyhow::Result<()> {
    if !a.step_grid {
        return Ok(());
    }
    if a.load.trace.is_some() {
        return Err(cli::usage(
            "--trace sets the times and lengths of every request; it cannot be combined with --step-grid",
        ));
    }
    if a.load.input_len.is_none() || a.prompts.is_some() || a.load.turns.is_some() {
        return Err(cli::usage(
            "--step-grid needs synthetic prompts of known lengths: --input-len (a list), without --prompts or --turns",
        ));
    }
    Ok(())
}

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
    let fixed = if a.load.rate.is_some() {
        a.load.max_concurrency.map(|c| ("--max-concurrency", c))
    } else if a.load.ramp || a.load.find_max == Some(Var::Concurrency) {
        a.load
            .concurrency
            .as_ref()
            .and_then(|l| l.first())
            .map(|&c| ("-c", c))
    } else {
        a.load
            .concurrency
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
    let searching = a.load.find_max == Some(Var::Concurrency);
    if searching
        && let Some(l) = a.load.find_max_limit
        && l > room as f64
    {
        return Err(cli::usage(format!(
            "--find-max-limit {l} needs as many connections but this process may open only {limit} files (ulimit -Hn): raise the limit or lower --find-max-limit"
        )));
    }
    if (a.load.ramp || searching) && u64::from(a.load.ramp_max) > room {
        let fits = u32::try_from(room).unwrap_or(u32::MAX);
        cli::warn(format!(
            "--ramp-max {} lowered to {fits}: this process may open only {limit} files (ulimit -Hn)",
            a.load.ramp_max
        ));
        a.load.ramp_max = fits;
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
                .load
                .max_tokens
                .as_ref()
                .and_then(|m| m.iter().max().copied())
                .unwrap_or(256),
            longest: a
                .load
                .input_len
                .as_ref()
                .and_then(|l| l.iter().max().copied()),
            turns: a.load.turns.and_then(|t| t.most()).unwrap_or(1),
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
        assert_eq!(ramp.load.ramp_max, 1024 - SPARE_FILES as u32);
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
