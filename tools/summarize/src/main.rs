use clap::Parser;
use servbench::cli;
use servbench::jsonl::{self, Source};
use servbench::stats::Slo;
use std::path::PathBuf;
use std::process::ExitCode;
use summarize::input::metrics::Metric;
use summarize::plot::PlotKind;
use summarize::render::Format;
use summarize::tables::view::Col;
use summarize::{Config, compare};

const EXAMPLES: &str = "\
Examples:
  srv-launch sim | loadgen -c 1..64 -n 200 | tee run.jsonl | summarize
  summarize run.jsonl --format md --cols conc,tok_s,ttft_p50,ttft_p99
  summarize host-a.jsonl host-b.jsonl                # one point measured on two hosts, merged
  summarize --compare base.jsonl new.jsonl           # side by side, new/base, noise-aware
  cat vllm.jsonl sglang.jsonl | summarize --compare-by engine=vllm
  summarize run.jsonl --plot sweep.svg               # or sweep.png, or - for the terminal
  summarize run.jsonl --plot t.svg --plot-kind timeline --point 2 --window 1..4";

/// Tables, comparisons, notes and plots from servbench records.
#[derive(Debug, Parser)]
#[command(name = "summarize", version, after_help = EXAMPLES)]
struct Args {
    /// Record files (`-` is stdin); with none, stdin
    #[arg(value_name = "FILE")]
    files: Vec<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    #[arg(long, value_delimiter = ',', value_parser = Col::parse, help = cols_help())]
    cols: Option<Vec<Col>>,
    /// Group rows (and plot lines) by these labels or params (in, out, conc, rate, images); default:
    /// every label or param that varies, except the load
    #[arg(long, value_delimiter = ',')]
    by: Vec<String>,
    /// Labels ignored when matching points, so measurements of one point from several hosts
    /// or loadgen ranks merge (histograms exactly); `--merge-label none` keeps every label apart
    #[arg(
        long = "merge-label",
        value_delimiter = ',',
        default_value = "host,rank"
    )]
    merge_labels: Vec<String>,
    /// Goodput SLO for points rebuilt from requests: ttft_ms=500,tpot_ms=50
    #[arg(long, value_parser = Slo::parse)]
    slo: Option<Slo>,
    /// Compare two runs point by point: --compare BASE NEW
    #[arg(long, num_args = 2, value_names = ["BASE", "NEW"], conflicts_with = "compare_by")]
    compare: Option<Vec<String>>,
    /// Compare the values of one label (LABEL, or LABEL=BASE to choose the base)
    #[arg(long, value_name = "LABEL[=BASE]")]
    compare_by: Option<String>,
    /// Metrics compared (same names as --cols)
    #[arg(long, value_delimiter = ',', value_parser = parse_metric)]
    metrics: Option<Vec<Metric>>,
    /// Do not print notes under the tables
    #[arg(long)]
    no_notes: bool,
    /// Judge against the roofline of MODEL@HARDWARE (presets or JSON cards: llama-3.1-8b@h200):
    /// per-stream decode limit, single-stream note, link share for collectives, decode budget
    #[arg(long, value_name = "MODEL@HARDWARE", conflicts_with_all = ["model", "hardware"])]
    roofline: Option<String>,
    /// Model preset or JSON card for the roofline (with --hardware)
    #[arg(long, requires = "hardware")]
    model: Option<String>,
    /// Hardware preset or JSON card for the roofline (with --model; alone: link share only)
    #[arg(long)]
    hardware: Option<String>,
    /// Tensor-parallel degree of rows whose records carry no `tp` label (each row's own label
    /// wins; a label that disagrees is an error); default 1
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    tp: Option<u32>,
    /// Pipeline-parallel degree of rows whose records carry no `pp` label, as --tp
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pp: Option<u32>,
    /// Allreduce times measured by collbench (`coll` records) for the roofline's modelled step,
    /// instead of the hardware card's topology model (rows at a TP degree the file measured)
    #[arg(long, value_name = "COLL.jsonl")]
    comm_from: Option<String>,
    /// Draw a plot: FILE.svg, FILE.png, or - for a chart in the terminal
    #[arg(long, value_name = "FILE", conflicts_with_all = ["compare", "compare_by"])]
    plot: Option<PathBuf>,
    /// What --plot draws: the sweep's panels, or one point's requests on wall time (with
    /// --plot -: the lanes as a table)
    #[arg(long, value_enum, default_value_t = PlotKind::Sweep, requires = "plot")]
    plot_kind: PlotKind,
    /// --plot-kind timeline: the point drawn (its `point.index`); default: the first read
    #[arg(long, value_name = "INDEX")]
    point: Option<u32>,
    /// --plot-kind timeline: only the requests in this window, seconds from the point's
    /// start (2..5, 0.5..1.5)
    #[arg(long, value_name = "START..END", value_parser = parse_window)]
    window: Option<(f64, f64)>,
    /// Every column of the text tables; without it, tables with --roofline or --compare leave
    /// out their least needed columns to fit 120 characters (the header line names them)
    #[arg(long)]
    wide: bool,
    /// Cost of one GPU for an hour, in dollars: adds each point's dollars per million output
    /// tokens (`$/M out tok`: over the GPUs loadgen sampled, else the row's tp x pp) to the
    /// table and to the plot's per-GPU panel
    #[arg(long, value_name = "USD", value_parser = parse_usd)]
    gpu_hour_cost: Option<f64>,
    /// Treat a malformed input line as an error (exit 2) instead of warning and skipping it
    #[arg(long)]
    strict: bool,
    #[command(flatten)]
    drain: cli::DrainArgs,
}

/// `--cols`' help: the list its error prints too.
fn cols_help() -> String {
    format!(
        "Columns of the load-points table, comma-separated: {}",
        Col::names()
    )
}

/// `--gpu-hour-cost`: a finite number of dollars above 0 (`2.49`, `$2.49`).
fn parse_usd(s: &str) -> Result<f64, String> {
    match s.trim().trim_start_matches('$').parse::<f64>() {
        Ok(usd) if usd.is_finite() && usd > 0.0 => Ok(usd),
        _ => Err(format!("'{s}' is not a cost in dollars above 0, e.g. 2.49")),
    }
}

/// `--window START..END`: seconds from the point's start, finite, START at least 0 and below
/// END.
fn parse_window(s: &str) -> Result<(f64, f64), String> {
    let bad = || format!("'{s}' is not a window of seconds START..END (e.g. 2..5)");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let a: f64 = a.trim().parse().map_err(|_| bad())?;
    let b: f64 = b.trim().parse().map_err(|_| bad())?;
    if !(a.is_finite() && b.is_finite() && a >= 0.0 && a < b) {
        return Err(format!(
            "'{s}': the window's START must be at least 0 and below its END"
        ));
    }
    Ok((a, b))
}

fn parse_metric(s: &str) -> Result<Metric, String> {
    Metric::parse(s).ok_or_else(|| {
        format!(
            "unknown metric '{s}': use one of {}",
            Metric::all_names().join(", ")
        )
    })
}

fn main() -> ExitCode {
    cli::main("summarize", || {
        let Some(args) = cli::parse_args::<Args>()? else {
            return Ok(cli::Exit::Ok);
        };
        if args.plot_kind != PlotKind::Timeline && (args.point.is_some() || args.window.is_some()) {
            return Err(cli::usage(
                "--point and --window choose what a timeline draws: give them with --plot FILE --plot-kind timeline",
            ));
        }
        let mut sources: Vec<Source> = args.files.iter().map(|f| Source::parse(f)).collect();
        if sources.is_empty() && args.compare.is_none() {
            if !jsonl::stdin_is_piped() {
                return Err(cli::usage(
                    "no input: pipe records in (loadgen ... | summarize) or name files (summarize run.jsonl)",
                ));
            }
            sources.push(Source::Stdin);
        }
        let compare = args.compare.map(|pair| {
            let mut it = pair.into_iter().map(|s| Source::parse(&s));
            (
                it.next().unwrap_or(Source::Stdin),
                it.next().unwrap_or(Source::Stdin),
            )
        });
        let reads_stdin = sources
            .iter()
            .chain(compare.iter().flat_map(|(base, new)| [base, new]))
            .any(|s| *s == Source::Stdin);
        if reads_stdin {
            summarize::catch_interrupts(args.drain.drain_wait);
        }
        let merge_labels = args
            .merge_labels
            .into_iter()
            .filter(|l| l != "none" && !l.is_empty())
            .collect();
        let roofline = match (&args.roofline, &args.model, &args.hardware) {
            (Some(spec), _, _) => Some(
                summarize::roofline::Roofline::parse(spec)
                    .map_err(|e| cli::usage(format!("--roofline: {e}")))?,
            ),
            (None, Some(m), Some(h)) => Some(
                summarize::roofline::Roofline::of(m, h)
                    .map_err(|e| cli::usage(format!("--model/--hardware: {e}")))?,
            ),
            _ => None,
        };
        let mut roofline = roofline.map(|r| r.with_layout(args.tp, args.pp));
        if let Some(path) = &args.comm_from {
            let Some(roof) = roofline.as_mut() else {
                return Err(cli::usage(
                    "--comm-from needs --roofline MODEL@HARDWARE (or --model and --hardware)",
                ));
            };
            let coll = servbench::presets::comm::coll_records_from(path)
                .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
            if coll
                .iter()
                .any(|c| c.op == servbench::record::CollOp::Allreduce)
            {
                roof.comm_from = Some((coll, path.clone()));
            } else {
                let host = servbench::host::topo::host_from_records(path)
                    .map_err(|e| cli::usage(format!("--comm-from: {e}")))?;
                let Some((host, gpus)) = host else {
                    return Err(cli::usage(format!(
                        "--comm-from {path}: no allreduce records (collbench -np N --mode latency writes them) and no server record with a host topology (srv-launch records one)"
                    )));
                };
                roof.comm_topology = Some((host, gpus, path.clone()));
            }
        }
        let link_hw = match (&roofline, &args.hardware) {
            (None, Some(h)) => Some(
                servbench::presets::load_hardware(h)
                    .map_err(|e| cli::usage(format!("--hardware: {e}")))?,
            ),
            _ => None,
        };
        let config = Config {
            sources,
            format: args.format,
            cols: args.cols,
            by: args.by,
            merge_labels,
            slo: args.slo,
            compare,
            compare_by: args.compare_by,
            compare_metrics: args
                .metrics
                .unwrap_or_else(|| compare::DEFAULT_METRICS.to_vec()),
            notes: !args.no_notes,
            plot: args.plot,
            plot_kind: args.plot_kind,
            timeline: summarize::input::kept::Select {
                point: args.point,
                window_s: args.window,
                merge_labels: Vec::new(),
            },
            roofline,
            link_hw,
            strict: args.strict,
            wide: args.wide,
            usd_per_gpu_hour: args.gpu_hour_cost,
        };
        summarize::run(&config, &mut std::io::stdout().lock())
    })
}
