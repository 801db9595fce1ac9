use super::*;

#[test]
fn shares_of_a_point_add_up_to_the_point() {
    let closed = |c| Load::Closed { concurrency: c };
    let open = |r, m| Load::Open {
        rate_rps: r,
        arrival: Arrival::Poisson,
        max_concurrency: m,
    };
    let n = Budget::Requests;
    // (load, budget, world) -> per rank (concurrency or rate, cap, requests or None for time)
    let parts =
        |load: Load, budget: Budget, world: usize| -> Vec<(f64, Option<u32>, Option<u64>)> {
            (0..world)
                .map(|r| {
                    let (l, b) = share_of(&load, budget, world, r);
                    let req = match b {
                        Budget::Requests(n) => Some(n),
                        Budget::Time(_) => None,
                    };
                    match l {
                        Load::Closed { concurrency } => (f64::from(concurrency), None, req),
                        Load::Open {
                            rate_rps,
                            max_concurrency,
                            ..
                        } => (rate_rps, max_concurrency, req),
                        Load::Trace {
                            speed,
                            max_concurrency,
                        } => (speed, max_concurrency, req),
                    }
                })
                .collect()
        };
    let secs = Budget::Time(Duration::from_secs(5));
    assert_eq!(
        parts(closed(256), n(1000), 4),
        vec![(64.0, None, Some(250)); 4]
    );
    // Requests follow the slots: 4, 3, 3 slots take 40, 30, 30 of 100 (they finish together).
    assert_eq!(
        parts(closed(10), n(100), 3),
        vec![
            (4.0, None, Some(40)),
            (3.0, None, Some(30)),
            (3.0, None, Some(30))
        ]
    );
    assert_eq!(
        parts(closed(7), n(90), 3),
        vec![
            (3.0, None, Some(38)),
            (2.0, None, Some(26)),
            (2.0, None, Some(26))
        ]
    );
    // Fewer slots than ranks: the point still sends every request it asked for (regression:
    // -c 1 -n 6 over 3 ranks sent 2).
    assert_eq!(
        parts(closed(1), n(6), 3),
        vec![
            (1.0, None, Some(6)),
            (0.0, None, Some(0)),
            (0.0, None, Some(0))
        ]
    );
    // Fewer slots than ranks: the last rank has none and sends nothing, even for a time budget.
    assert_eq!(
        parts(closed(2), secs, 3),
        vec![(1.0, None, None), (1.0, None, None), (0.0, None, Some(0))]
    );
    assert_eq!(
        parts(open(100.0, Some(10)), secs, 4),
        vec![
            (25.0, Some(3), None),
            (25.0, Some(3), None),
            (25.0, Some(2), None),
            (25.0, Some(2), None)
        ]
    );
    // A cap smaller than the ranks still leaves each rank a slot.
    assert_eq!(
        parts(open(3.0, Some(1)), n(7), 2)[1],
        (1.5, Some(1), Some(3))
    );
    // A trace's rows go round the ranks (7 rows: 3, 2, 2), each at the trace's speed.
    let trace = Load::Trace {
        speed: 2.0,
        max_concurrency: Some(5),
    };
    assert_eq!(
        parts(trace, n(7), 3),
        vec![
            (2.0, Some(2), Some(3)),
            (2.0, Some(2), Some(2)),
            (2.0, Some(1), Some(2))
        ]
    );
}
