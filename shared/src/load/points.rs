//! The points a load is made of: each point's [`Load`] (closed loop, open loop, trace replay)
//! and its [`Budget`] (the flags list them: the load's `LoadArgs::loads`). loadgen runs each point against a server
//! in real time; srv-sim's `--predict` runs the same points on its modelled engine in virtual
//! time.

use super::Arrival;
use std::time::Duration;

/// The load of one sweep point.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// Closed loop: this many requests in flight, each slot sending as soon as it frees.
    Closed { concurrency: u32 },
    /// Open loop: requests at `rate_rps`, at most `max_concurrency` in flight (waiting for a
    /// slot counts into the request's latency).
    Open {
        rate_rps: f64,
        arrival: Arrival,
        max_concurrency: Option<u32>,
    },
    /// Trace replay: each request at its row's time, the trace played `speed` times as fast,
    /// at most `max_concurrency` in flight.
    Trace {
        speed: f64,
        max_concurrency: Option<u32>,
    },
}

impl Load {
    /// How many requests may be in flight at once (`None`: unbounded).
    pub fn slots(&self) -> Option<u32> {
        match *self {
            Load::Closed { concurrency } => Some(concurrency.max(1)),
            Load::Open {
                max_concurrency, ..
            }
            | Load::Trace {
                max_concurrency, ..
            } => max_concurrency,
        }
    }
}

/// How much of a point (or its warmup) is sent: requests (sessions with `--turns`), or
/// sending time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Budget {
    Requests(u64),
    Time(Duration),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::LoadArgs;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn load(args: &[&str]) -> LoadArgs {
        Cli::parse_from(std::iter::once("t").chain(args.iter().copied())).load
    }

    #[test]
    fn the_point_list_and_budgets_follow_the_flags() {
        assert_eq!(load(&[]).loads(), vec![Load::Closed { concurrency: 1 }]);
        assert_eq!(load(&["-c", "1..4"]).loads().len(), 3);
        let open = load(&["-r", "2,4", "--max-concurrency", "3"]).loads();
        assert_eq!(open[1].slots(), Some(3));
        let l = load(&["-c", "8"]);
        assert_eq!(l.budget(&l.loads()[0]), Some(Budget::Requests(100)));
        let l = load(&["-c", "8", "--turns", "3"]);
        assert_eq!(l.budget(&l.loads()[0]), Some(Budget::Requests(16)));
        let l = load(&["-r", "5", "--duration", "2s"]);
        assert_eq!(
            l.budget(&l.loads()[0]),
            Some(Budget::Time(Duration::from_secs(2)))
        );
        let l = load(&["--trace", "t.jsonl", "--trace-speed", "1,2"]);
        assert_eq!(l.loads().len(), 2);
        assert_eq!(l.budget(&l.loads()[0]), None);
    }
}
