//! Telemetry that lies or breaks: non-finite and out-of-range samples, repeated series,
//! counters that jump to infinity, GPU values whose sum overflows, a window cut short. Each
//! case has its clean twin, where the figures stay as they were.

use super::prom::parse;
use super::vocab::Engine;
use super::window::{GpuWindow, Window};
use crate::exec::gpu::GpuReading;
use crate::record::{GpuStats, ServerStats};

fn vllm(running: &str, kv: &str, generated: &str) -> String {
    format!(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name=\"m\"}} {running}\n\
         # TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name=\"m\"}} {kv}\n\
         # TYPE vllm:generation_tokens_total counter\nvllm:generation_tokens_total{{model_name=\"m\"}} {generated}\n"
    )
}

fn window(pages: &[String]) -> ServerStats {
    let read = |t: &String| parse(t).unwrap().read(Engine::Vllm);
    let mut w = Window::start(Engine::Vllm, read(&pages[0]));
    for p in &pages[1..pages.len() - 1] {
        w.sample(read(p));
    }
    w.finish(Some(read(&pages[pages.len() - 1])))
}

/// What loadgen writes reads back as the same typed record: no `null` where a number is due.
fn round_trips(s: &ServerStats) {
    let json = serde_json::to_string(s).unwrap();
    assert!(!json.contains("null"), "{json}");
    let back: ServerStats = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(&back, s);
}

#[test]
fn non_finite_gauges_are_dropped_and_the_summary_stays_readable() {
    let s = window(&[
        vllm("NaN", "+Inf", "0"),
        vllm("NaN", "-Inf", "5"),
        vllm("NaN", "+Inf", "10"),
    ]);
    round_trips(&s);
    assert!(s.running.is_none() && s.kv_usage.is_none(), "{s:?}");
    assert_eq!(s.generation_tokens, Some(10));
    assert!(
        s.notes
            .iter()
            .any(|n| n.starts_with("vllm:num_requests_running: not a finite number (3 samples")),
        "{:?}",
        s.notes
    );
    // The clean twin: the same page with numbers.
    let clean = window(&[vllm("1", "0.5", "0"), vllm("3", "0.5", "10")]);
    round_trips(&clean);
    assert_eq!(clean.running.unwrap().mean, 2.0);
    assert!(clean.notes.is_empty());
}

#[test]
fn a_counter_going_to_infinity_is_no_token_count() {
    let s = window(&[vllm("1", "0.1", "0"), vllm("1", "0.1", "+Inf")]);
    round_trips(&s);
    assert_eq!(s.generation_tokens, None, "{s:?}");
    assert!(!s.counter_reset, "a dropped sample is no restart");
    assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
    // A finite counter past any count a point can make (1e300) is no count either.
    let s = window(&[vllm("1", "0.1", "0"), vllm("1", "0.1", "1e300")]);
    assert_eq!(s.generation_tokens, None);
    assert!(s.notes[0].contains("above 2^53"), "{:?}", s.notes);
    let clean = window(&[vllm("1", "0.1", "7"), vllm("1", "0.1", "107")]);
    assert_eq!(clean.generation_tokens, Some(100));
}

#[test]
fn negative_and_out_of_range_gauges_are_noted_not_tabulated() {
    let s = window(&[vllm("-5", "7.5", "0"), vllm("-5", "7.5", "10")]);
    round_trips(&s);
    assert!(s.running.is_none() && s.kv_usage.is_none(), "{s:?}");
    let notes = s.notes.join("\n");
    assert!(notes.contains("vllm:num_requests_running: negative (2 samples, first -5)"));
    assert!(notes.contains("vllm:kv_cache_usage_perc: a fraction above 1 (2 samples, first 7.5)"));
    let clean = window(&[vllm("5", "0.75", "0"), vllm("5", "1", "10")]);
    assert_eq!(clean.kv_usage.unwrap().max, 1.0);
    assert_eq!(clean.running.unwrap().max, 5.0);
}

#[test]
fn prefix_hits_above_queries_are_noted_without_a_hit_rate() {
    let page = |q: u64, h: u64| {
        format!(
            "# TYPE vllm:prefix_cache_queries_total counter\nvllm:prefix_cache_queries_total {q}\n\
             # TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total {h}\n"
        )
    };
    let s = window(&[page(0, 0), page(10, 1000)]);
    assert_eq!(s.prefix_hit_rate, None, "{s:?}");
    assert!(
        s.notes[0].starts_with("prefix-cache hits above"),
        "{:?}",
        s.notes
    );
    let clean = window(&[page(0, 0), page(1000, 250)]);
    assert_eq!(clean.prefix_hit_rate, Some(0.25));
    assert!(clean.notes.is_empty());
}

#[test]
fn a_repeated_series_is_read_once_and_noted() {
    let dup = "# TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{model_name=\"m\"} 1\n\
        vllm:num_requests_running{model_name=\"m\"} 999\n";
    let x = parse(dup).unwrap();
    assert_eq!(x.duplicates["vllm:num_requests_running"].count, 1);
    let s = window(&[dup.to_string(), dup.to_string()]);
    assert_eq!(s.running.unwrap().max, 1.0, "the first one kept, not 1000");
    assert!(
        s.notes[0].contains("a series repeated in one scrape"),
        "{:?}",
        s.notes
    );
    // Two models are two series: they add up, as before.
    let two = "# TYPE vllm:num_requests_running gauge\n\
        vllm:num_requests_running{model_name=\"m\"} 1\n\
        vllm:num_requests_running{model_name=\"other\"} 2\n";
    let s = window(&[two.to_string(), two.to_string()]);
    assert_eq!(s.running.unwrap().max, 3.0);
    assert!(s.notes.is_empty());
}

#[test]
fn the_first_and_last_scrapes_are_gauge_samples_on_a_short_point() {
    // Five requests at C=1 end before any scrape in between: the start and end are samples.
    let s = window(&[vllm("0", "0.25", "0"), vllm("1", "0.75", "40")]);
    assert_eq!((s.scrapes, s.gauge_samples), (2, 2));
    let kv = s.kv_usage.unwrap();
    assert_eq!((kv.mean, kv.max), (0.5, 0.75));
}

#[test]
fn a_window_without_its_last_scrape_is_marked_incomplete() {
    let read = |t: String| parse(&t).unwrap().read(Engine::Vllm);
    let mut w = Window::start(Engine::Vllm, read(vllm("1", "0.1", "0")));
    w.sample(read(vllm("1", "0.1", "30")));
    let s = w.finish(None);
    assert!(s.incomplete);
    assert_eq!(
        s.generation_tokens,
        Some(30),
        "up to the last answered scrape"
    );
    let mut w = Window::start(Engine::Vllm, read(vllm("1", "0.1", "0")));
    w.sample(read(vllm("1", "0.1", "30")));
    w.cut_short();
    assert!(w.finish(Some(read(vllm("1", "0.1", "60")))).incomplete);
    let clean = Window::start(Engine::Vllm, read(vllm("1", "0.1", "0")))
        .finish(Some(read(vllm("1", "0.1", "60"))));
    assert!(!clean.incomplete);
}

#[test]
fn gpu_values_whose_sum_overflows_keep_a_finite_mean_or_are_left_out() {
    let reading = |index, util, mem| GpuReading {
        index,
        util_pct: Some(util),
        mem_used_mib: Some(mem),
        ..GpuReading::default()
    };
    let mut w = GpuWindow::default();
    // tried-to-break-it G5: index 0 twice in one sample, and values near f64::MAX.
    for _ in 0..3 {
        w.add(&[reading(0, 10.0, 1000.0), reading(0, 1e308, 1e308)]);
        w.add(&[reading(0, 1e308, 1e308)]);
    }
    let stats = w.finish();
    let json = serde_json::to_string(&stats).unwrap();
    assert!(!json.contains("null"), "{json}");
    let back: Vec<GpuStats> = serde_json::from_str(&json).unwrap();
    assert_eq!(back, stats);
    let g = &stats[0];
    assert_eq!(g.samples, 6, "the repeated line is not a sample");
    assert_eq!(g.util_pct.unwrap().mean, 10.0);
    assert_eq!(g.mem_used_mib.unwrap().max, 1000.0);
    assert_eq!(g.notes.len(), 3, "{:?}", g.notes);
    let mut clean = GpuWindow::default();
    clean.add(&[reading(0, 10.0, 1000.0), reading(1, 30.0, 3000.0)]);
    clean.add(&[reading(0, 30.0, 1000.0), reading(1, 50.0, 3000.0)]);
    let clean = clean.finish();
    assert_eq!(clean.len(), 2);
    assert_eq!(clean[0].util_pct.unwrap().mean, 20.0);
    assert!(clean.iter().all(|g| g.notes.is_empty()));
}

#[test]
fn a_page_of_other_families_parses_to_what_servbench_reads() {
    let mut page = String::from("# HELP python_gc_objects_collected_total x\n");
    for i in 0..20_000 {
        page.push_str(&format!("other_family{{x=\"{i:08}\"}} 1\n"));
    }
    page.push_str(&vllm("2", "0.5", "9"));
    let x = parse(&page).unwrap();
    assert_eq!(x.families.len(), 3, "{:?}", x.families.keys());
    assert_eq!(x.engine(), Some(Engine::Vllm));
    // HTML and JSON are not the exposition format, whatever they contain.
    assert!(parse("<html>vllm:num_requests_running 1</html>").is_err());
}
