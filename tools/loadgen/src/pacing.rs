//! When each request is sent. One pure function, [`next_send`], decides the intended send time
//! of the next request for every load mode, so it is tested from a table. (The precise wait for
//! each deadline is the dispatcher's, in `run/inflight.rs`: a runtime timer to within 1.5 ms, then
//! yielding until the deadline, so sends do not inherit the timer's millisecond rounding, the
//! way AIPerf silently under-delivered rates.)

pub use servbench::load::{Arrival, Load};

/// Intended send time of the next request, in seconds from the start of the point, given the
/// previous intended time (`None` for the first request) and a unit-mean gap `draw` from
/// [`Arrival::draw`] (for a trace: the row's own time from the trace's start, in seconds).
/// `None` means "as soon as a slot frees" (closed loop). Deadlines are absolute: a late send
/// never shifts the ones after it.
pub fn next_send(load: &Load, prev_s: Option<f64>, draw: f64) -> Option<f64> {
    match *load {
        Load::Closed { .. } => None,
        Load::Open { rate_rps, .. } => Some(match prev_s {
            None => 0.0,
            Some(prev) => prev + draw / rate_rps,
        }),
        Load::Trace { speed, .. } => Some(draw / speed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_send_table() {
        let closed = Load::Closed { concurrency: 8 };
        let open = |rate_rps, arrival| Load::Open {
            rate_rps,
            arrival,
            max_concurrency: None,
        };
        let trace = |speed| Load::Trace {
            speed,
            max_concurrency: None,
        };
        let cases: &[(Load, Option<f64>, f64, Option<f64>)] = &[
            (closed, None, 1.0, None),
            (closed, Some(3.0), 1.0, None),
            (open(10.0, Arrival::Constant), None, 1.0, Some(0.0)),
            (open(10.0, Arrival::Constant), Some(0.0), 1.0, Some(0.1)),
            (open(10.0, Arrival::Constant), Some(0.5), 1.0, Some(0.6)),
            (open(4.0, Arrival::Poisson), Some(1.0), 2.0, Some(1.5)),
            (open(4.0, Arrival::Poisson), Some(1.0), 0.0, Some(1.0)),
            (
                open(1000.0, Arrival::Gamma(0.5)),
                Some(2.0),
                3.0,
                Some(2.003),
            ),
            // A trace: the row's own time, compressed or stretched, whatever came before.
            (trace(1.0), None, 0.0, Some(0.0)),
            (trace(1.0), Some(0.0), 2.5, Some(2.5)),
            (trace(10.0), Some(0.1), 2.5, Some(0.25)),
            (trace(0.5), Some(9.0), 2.5, Some(5.0)),
        ];
        for (load, prev, draw, want) in cases {
            let got = next_send(load, *prev, *draw);
            match (got, want) {
                (Some(g), Some(w)) => {
                    assert!((g - w).abs() < 1e-12, "{load:?} {prev:?}: {g} != {w}")
                }
                _ => assert_eq!(got, *want, "{load:?} {prev:?}"),
            }
        }
    }
}
