//! The dead-server detector: a server whose every connection fails for a while is gone
//! (crashed, killed), not slow or overloaded; the phase then ends, `stopped_by: server_down`.

use crate::client::http::Failure;
use servbench::record::ErrorClass;
use std::time::{Duration, Instant};

/// Connections failing for this long, with nothing else finishing in between, is a server
/// that is gone (crashed, killed), not a slow or overloaded one.
pub const DOWN_AFTER: Duration = Duration::from_secs(2);
/// ... and at least this many of them (one slow failure is not a pattern).
const DOWN_MIN_FAILURES: u64 = 3;

/// Watches finished requests for a server that is gone: every request failing to connect
/// (refused, unreachable) for [`DOWN_AFTER`]. Any other outcome, success or not, proves
/// something answers and starts the watch again.
#[derive(Default)]
pub struct Health {
    /// The first connect failure of the current run of them: when, and its message.
    since: Option<(Instant, String)>,
    failures: u64,
}

impl Health {
    /// Takes one finished request; `Some(reason)` once the server counts as down.
    pub fn observe(&mut self, failure: Option<&Failure>, end: Instant) -> Option<String> {
        let Some(f) = failure.filter(|f| f.class == ErrorClass::Connect) else {
            self.since = None;
            self.failures = 0;
            return None;
        };
        self.failures += 1;
        let (since, first) = self.since.get_or_insert_with(|| (end, f.message.clone()));
        let lasted = end.saturating_duration_since(*since);
        (lasted >= DOWN_AFTER && self.failures >= DOWN_MIN_FAILURES).then(|| {
            format!(
                "server down: every connection failed for {:.1} s ({} attempts, nothing else finished in between); first: {first}",
                lasted.as_secs_f64(),
                self.failures
            )
        })
    }

    /// At the end of a phase: the last requests (at least [`DOWN_MIN_FAILURES`]) all failed to
    /// connect and nothing answered since, so the server is gone even though the phase ran
    /// out before [`DOWN_AFTER`].
    pub fn down_at_end(&self) -> Option<String> {
        let (_, first) = self.since.as_ref()?;
        (self.failures >= DOWN_MIN_FAILURES).then(|| {
            format!(
                "server down: the point's last {} requests all failed to connect; first: {first}",
                self.failures
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Failure {
        Failure::new(ErrorClass::Connect, "Connection refused")
    }

    /// A server is down after DOWN_AFTER of nothing but connect failures; any other outcome
    /// (here an HTTP error: something answered) starts the watch again; a point that ends
    /// on a run of them ends with the server down.
    #[test]
    fn the_server_is_down_only_after_a_run_of_connect_failures() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut h = Health::default();
        assert!(h.observe(Some(&refused()), at(0)).is_none());
        assert!(h.observe(Some(&refused()), at(1000)).is_none());
        let answered = Failure::new(ErrorClass::Http5xx, "HTTP 503");
        assert!(h.observe(Some(&answered), at(1500)).is_none());
        assert!(h.down_at_end().is_none());
        assert!(h.observe(Some(&refused()), at(1600)).is_none());
        assert!(h.observe(Some(&refused()), at(2600)).is_none());
        assert!(h.down_at_end().is_none(), "two are not a pattern");
        let why = h.observe(Some(&refused()), at(3600)).expect("down");
        assert!(why.starts_with("server down: every connection failed for 2.0 s (3 attempts"));
        assert!(why.ends_with("first: Connection refused"), "{why}");
        assert!(h.down_at_end().is_some());
        assert!(h.observe(None, at(3700)).is_none());
        assert!(h.down_at_end().is_none(), "a success: it is back");
    }
}
