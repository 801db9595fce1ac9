use super::*;
use crate::record::{RequestError, TokenSource};

fn req(id: u64, intended: f64, ttft: f64, itl: &[f64], tokens: u32) -> RequestRecord {
    let e2e = ttft + itl.iter().sum::<f64>();
    RequestRecord {
        v: 1,
        ts: now_ts(),
        labels: Labels::new(),
        point: PointKey::default(),
        id,
        intended_ms: intended,
        send_lag_ms: 0.01,
        ttft_ms: Some(ttft),
        ttft_reasoning_ms: None,
        ttfo_ms: None,
        reasoning_tokens: None,
        e2e_ms: Some(e2e),
        tpot_ms: (tokens > 1).then(|| (e2e - ttft) / f64::from(tokens - 1)),
        chunks: itl.len() as u32 + 1,
        itl_ms: itl.to_vec(),
        output_tokens: tokens,
        output_tokens_source: Some(TokenSource::Usage),
        output_tokens_chunks: None,
        prompt_tokens: Some(100),
        prompt_tokens_target: Some(100),
        max_tokens: Some(tokens),
        inputs: None,
        images: None,
        error: None,
        cancelled_after_ms: None,
        adapter: None,
        session: None,
        turn: None,
        cached_tokens: None,
        server_timing: None,
        response_id: None,
        output_pieces: None,
        eval: None,
        json: None,
        extra: Default::default(),
    }
}

#[test]
fn requests_cancelled_on_purpose_are_counted_apart_and_in_no_figure() {
    let mut s = PointStats::new();
    s.add_request(&req(0, 0.0, 100.0, &[10.0; 9], 10), None);
    let mut cancelled = req(1, 0.0, 20.0, &[5.0], 2);
    cancelled.cancelled_after_ms = Some(30.0);
    s.add_request(&cancelled, None);
    let sum = s.to_summary(PointKey::default(), Labels::new(), false, None);
    assert_eq!(
        (sum.requests, sum.ok, sum.errors, sum.cancelled),
        (2, 1, 0, 1)
    );
    assert!(sum.errors_by_class.is_empty());
    assert_eq!((sum.ttft_ms.unwrap().n, sum.output_tokens), (1, 10));
    // A summary read back, and merged, keeps the count apart.
    let mut back = PointStats::from_summary(&sum).unwrap();
    assert_eq!((back.cancelled, back.errors()), (1, 0));
    back.merge(&s);
    assert_eq!(
        (back.requests, back.ok, back.cancelled, back.errors()),
        (4, 2, 2, 0)
    );
    // Ctrl-C's class, spelled `cancelled` before --cancel-rate, reads as `interrupted`.
    let old: ErrorClass = serde_json::from_str(r#""cancelled""#).unwrap();
    assert_eq!(old, ErrorClass::Interrupted);
    assert_eq!(old.as_str(), "interrupted");
}

#[test]
fn each_adapter_has_its_own_figures_and_a_summary_keeps_them() {
    let mut s = PointStats::new();
    for (id, adapter, ttft) in [(0, "a", 100.0), (1, "b", 300.0), (2, "a", 120.0)] {
        let mut r = req(id, 0.0, ttft, &[10.0; 9], 10);
        r.adapter = Some(adapter.into());
        s.add_request(&r, None);
    }
    // A request without an adapter is in the point's figures and in none of the adapters'.
    s.add_request(&req(3, 0.0, 50.0, &[10.0; 9], 10), None);
    let sum = s.to_summary(PointKey::default(), Labels::new(), false, None);
    let by: Vec<_> = sum
        .by_adapter
        .iter()
        .map(|a| (a.adapter.as_str(), a.requests, a.output_tokens))
        .collect();
    assert_eq!(by, [("a", 2, 20), ("b", 1, 10)]);
    let a = &sum.by_adapter[0];
    assert_eq!(a.ttft_ms.unwrap().n, 2);
    assert!((a.ttft_ms.unwrap().mean - 110.0).abs() < 0.5, "{a:?}");
    assert!((sum.by_adapter[1].ttft_ms.unwrap().mean - 300.0).abs() < 0.5);
    let rates: f64 = sum.by_adapter.iter().map(|a| a.output_tok_s).sum();
    assert!((rates / sum.output_tok_s - 0.75).abs() < 1e-9, "{rates}");
    let back = PointStats::from_summary(&sum).unwrap();
    let again = back.to_summary(PointKey::default(), Labels::new(), false, None);
    assert_eq!(again.by_adapter, sum.by_adapter);
}

#[test]
fn histogram_round_trip_is_exact() {
    let mut h = Hist::new();
    for i in 1..5000 {
        h.record_ms(f64::from(i) * 0.137);
    }
    let back = Hist::decode(&h.encode()).unwrap();
    assert_eq!(back, h);
    assert!(Hist::decode("not base64!").is_err());
}

#[test]
fn merged_histograms_equal_the_histogram_of_the_union() {
    let (mut a, mut b, mut all) = (Hist::new(), Hist::new(), Hist::new());
    for i in 0..1000 {
        let v = f64::from(i * 7 % 997) + 0.5;
        if i % 3 == 0 {
            a.record_ms(v)
        } else {
            b.record_ms(v)
        }
        all.record_ms(v);
    }
    let mut merged = Hist::decode(&a.encode()).unwrap();
    merged.merge(&Hist::decode(&b.encode()).unwrap());
    assert_eq!(merged, all);
    assert_eq!(merged.dist_ms(), all.dist_ms());
}

#[test]
fn point_stats_count_and_rate() {
    let mut s = PointStats::new();
    let slo = Slo::parse("ttft_ms=150").unwrap();
    s.add_request(&req(0, 0.0, 100.0, &[10.0; 9], 10), Some(&slo));
    s.add_request(&req(1, 0.0, 200.0, &[10.0; 9], 10), Some(&slo));
    let mut failed = req(2, 0.0, 1.0, &[], 0);
    failed.error = Some(RequestError {
        class: ErrorClass::Reset,
        message: "reset".into(),
        http_status: None,
    });
    s.add_request(&failed, Some(&slo));
    let sum = s.to_summary(PointKey::default(), Labels::new(), false, Some(&slo));
    assert_eq!((sum.requests, sum.ok, sum.errors), (3, 2, 1));
    assert_eq!(sum.errors_by_class["reset"], 1);
    assert_eq!(sum.output_tokens, 20);
    // Window: 0 .. 290 ms.
    assert!((sum.duration_s - 0.29).abs() < 1e-9);
    assert!((sum.output_tok_s - 20.0 / 0.29).abs() < 1e-6);
    assert!((sum.goodput_req_s.unwrap() - 1.0 / 0.29).abs() < 1e-6);
    let ttft = sum.ttft_ms.unwrap();
    // Histogram resolution is 0.1% (3 significant digits).
    assert_eq!(ttft.n, 2);
    assert!(
        (ttft.min - 100.0).abs() < 0.05 && (ttft.max - 200.0).abs() < 0.1,
        "{ttft:?}"
    );
    assert!((sum.itl_ms.unwrap().p50 - 10.0).abs() < 0.005);
    assert!((sum.tpot_ms.unwrap().p99 - 10.0).abs() < 0.005);
    assert_eq!(sum.tokens_per_chunk, Some(1.0));
    assert_eq!((sum.prompt_len_exact, sum.prompt_len_targeted), (3, 3));
}

#[test]
fn summaries_merge_like_their_requests() {
    let reqs: Vec<_> = (0..40)
        .map(|i| {
            req(
                i,
                f64::from(i as u32) * 5.0,
                50.0 + f64::from(i as u32),
                &[3.0, 4.0, 5.0],
                4,
            )
        })
        .collect();
    let (mut a, mut b, mut all) = (PointStats::new(), PointStats::new(), PointStats::new());
    for (i, r) in reqs.iter().enumerate() {
        if i % 2 == 0 {
            a.add_request(r, None)
        } else {
            b.add_request(r, None)
        }
        all.add_request(r, None);
    }
    let sa = a.to_summary(PointKey::default(), Labels::new(), false, None);
    let sb = b.to_summary(PointKey::default(), Labels::new(), false, None);
    let mut merged = PointStats::from_summary(&sa).unwrap();
    merged.merge(&PointStats::from_summary(&sb).unwrap());
    let m = merged.to_summary(PointKey::default(), Labels::new(), false, None);
    let u = all.to_summary(PointKey::default(), Labels::new(), false, None);
    assert_eq!(m.ttft_ms, u.ttft_ms);
    assert_eq!(m.itl_ms, u.itl_ms);
    for (name, text) in &u.hist {
        // Encodings may differ in the histogram's allocated range; the contents may not.
        assert_eq!(Hist::decode(&m.hist[name]), Hist::decode(text), "{name}");
    }
    assert_eq!((m.requests, m.output_tokens), (u.requests, u.output_tokens));
    assert_eq!(m.steady_output_tok_s, None);
}

#[test]
fn steady_window_excludes_ramp_and_drain() {
    // Closed loop, one slot, back-to-back requests of 10 tokens over 100 ms each:
    // the steady rate is 100 tok/s regardless of ramp-up.
    let mut s = PointStats::new();
    for i in 0..10u32 {
        s.add_request(
            &req(
                u64::from(i),
                f64::from(i) * 100.0,
                0.0,
                &[100.0 / 9.0; 9],
                10,
            ),
            None,
        );
    }
    let steady = s.steady_output_tok_s().unwrap();
    assert!((steady - 100.0).abs() < 1.0, "{steady}");
}

#[test]
fn slo_parsing() {
    let slo = Slo::parse("ttft_ms=500,tpot_ms=50").unwrap();
    assert_eq!(slo.ttft_ms, Some(500.0));
    assert_eq!(slo.to_text(), "ttft_ms=500,tpot_ms=50");
    assert!(Slo::parse("latency=5").unwrap_err().contains("unknown SLO"));
    assert!(Slo::parse("ttft_ms").is_err());
}

#[test]
fn an_slo_no_latency_can_meet_is_refused_when_parsed() {
    for bad in [
        "ttft_ms=-5",
        "ttft_ms=NaN",
        "tpot_ms=0",
        "e2e_ms=inf",
        "itl_ms=-0",
    ] {
        let e = Slo::parse(bad).unwrap_err();
        assert!(
            e.contains(bad) && e.contains("positive, finite"),
            "{bad}: {e}"
        );
    }
    assert_eq!(Slo::parse("ttft_ms=0.5").unwrap().ttft_ms, Some(0.5));
}

#[test]
fn mean_ci_uses_student_t() {
    let ci = MeanCi::of(&[10.0, 12.0, 14.0]).unwrap();
    assert!((ci.mean - 12.0).abs() < 1e-12);
    assert!((ci.stddev - 2.0).abs() < 1e-12);
    // t(2) = 4.303; 4.303 * 2 / sqrt(3)
    assert!((ci.half_width.unwrap() - 4.303 * 2.0 / 3f64.sqrt()).abs() < 1e-9);
    assert_eq!(MeanCi::of(&[5.0]).unwrap().half_width, None);
    assert!(MeanCi::of(&[]).is_none());
}

#[test]
fn quantile_ci_brackets_the_quantile_and_narrows_with_n() {
    let mut small = Hist::new();
    let mut large = Hist::new();
    for i in 0..100 {
        small.record_ms(f64::from(i) + 1.0);
    }
    for i in 0..10_000 {
        large.record_ms(f64::from(i % 100) + 1.0);
    }
    let p50 = small.quantile_ms(0.5).unwrap();
    let (lo, hi) = small.quantile_ci95_ms(0.5).unwrap();
    assert!(lo < p50 && p50 < hi, "{lo} {p50} {hi}");
    let (llo, lhi) = large.quantile_ci95_ms(0.5).unwrap();
    assert!(lhi - llo < hi - lo);
    assert_eq!(small.quantile_ms(0.5), small.dist_ms().map(|d| d.p50));
}

#[test]
fn no_steady_figure_from_a_window_too_short() {
    // Two slots, four requests: the steady window is a sliver of the wall window.
    let mut s = PointStats::new();
    for (i, start) in [0.0, 0.0, 230.0, 230.0].into_iter().enumerate() {
        s.add_request(&req(i as u64, start, 200.0, &[10.0; 3], 4), None);
    }
    assert_eq!(s.steady_output_tok_s(), None);
}

/// A request that never reached the server (refused) has no prompt length to compare: it is
/// not counted as a prompt that missed its target (summarize would blame the tokenizer).
#[test]
fn requests_that_never_reached_the_server_do_not_count_as_missed_prompt_lengths() {
    let mut s = PointStats::new();
    s.add_request(&req(0, 0.0, 100.0, &[10.0; 3], 4), None);
    let mut refused = req(1, 0.0, 1.0, &[], 0);
    refused.prompt_tokens = None;
    refused.ttft_ms = None;
    refused.error = Some(RequestError {
        class: ErrorClass::Connect,
        message: "connection refused".into(),
        http_status: None,
    });
    s.add_request(&refused, None);
    let mut missed = req(2, 0.0, 100.0, &[10.0; 3], 4);
    missed.prompt_tokens = Some(99);
    s.add_request(&missed, None);
    let sum = s.to_summary(PointKey::default(), Labels::new(), false, None);
    assert_eq!((sum.prompt_len_exact, sum.prompt_len_targeted), (1, 2));
}

#[test]
fn reasoning_points_report_time_to_the_first_answer_and_the_reasoning_share() {
    let mut s = PointStats::new();
    for id in 0..4 {
        let mut r = req(id, 0.0, 10.0, &[5.0; 9], 10);
        r.ttft_reasoning_ms = Some(10.0);
        r.ttfo_ms = Some(40.0 + id as f64);
        r.reasoning_tokens = Some(6);
        s.add_request(&r, None);
    }
    let sum = s.to_summary(PointKey::default(), Labels::new(), false, None);
    let ttfo = sum.ttfo_ms.as_ref().unwrap();
    assert_eq!(ttfo.n, 4);
    assert!((ttfo.min - 40.0).abs() < 0.1, "{ttfo:?}");
    assert_eq!(sum.reasoning_share, Some(0.6));
    let back = PointStats::from_summary(&sum).unwrap();
    assert_eq!(back.ttfo, s.ttfo);
    assert_eq!(back.reasoning_tokens, 24);
    // A point without reasoning carries neither.
    let mut plain = PointStats::new();
    plain.add_request(&req(0, 0.0, 10.0, &[5.0], 2), None);
    let sum = plain.to_summary(PointKey::default(), Labels::new(), false, None);
    assert!(sum.ttfo_ms.is_none() && sum.reasoning_share.is_none());
}

/// The gaps of a request are recorded a run of equal ones at a time: the distribution is the
/// one each gap recorded alone gives, runs at the start, middle and end included.
#[test]
fn runs_of_equal_gaps_give_the_distribution_of_each_gap_alone() {
    let gaps = [0.0, 0.0, 0.0, 1.5, 1.5, 0.0, 2.25, 0.0, 0.0, 7.0, 7.0, 7.0];
    let mut s = PointStats::new();
    s.add_request(&req(0, 0.0, 10.0, &gaps, gaps.len() as u32 + 1), None);
    let mut alone = Hist::new();
    for &g in &gaps {
        alone.record_ms(g);
    }
    assert_eq!(s.itl.len(), gaps.len() as u64);
    assert_eq!(s.itl.dist_ms(), alone.dist_ms());
    let d = s.itl.dist_ms().unwrap();
    assert_eq!((d.n, d.min, d.p50), (12, 0.0, 0.0));
    assert!((d.max - 7.0).abs() < 0.01, "{d:?}");
}
