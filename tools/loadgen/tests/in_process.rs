//! loadgen as a library: `run::run` twice in one process, each with its own stop, against the
//! raw-socket test server in this process.

mod server;

use clap::Parser;
use loadgen::client::http::Target;
use loadgen::run::{self, Setup};
use loadgen::stop::Stop;
use serde_json::Value;
use servbench::cli::{self, Exit};
use servbench::jsonl::RecordWriter;
use std::io::Write;

/// Collects the records, and pulls `stop` once `after` request records were written: a stop
/// in the middle of a point, at a known place, without a timer.
struct StopAfter {
    buf: Vec<u8>,
    requests: usize,
    after: usize,
    stop: Stop,
}

impl Write for StopAfter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if b.starts_with(br#"{"kind":"request""#) {
            self.requests += 1;
            if self.requests == self.after {
                self.stop.stop();
            }
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn records(buf: &[u8], kind: &str) -> Vec<Value> {
    testkit::json_lines(buf)
        .into_iter()
        .filter(|r| r["kind"] == kind)
        .collect()
}

#[test]
fn two_runs_in_one_process_the_second_is_not_stopped_by_the_first() {
    let srv = server::paced(5, 2);
    let url = srv.url();
    let args = |extra: &[&str]| {
        let mut a = vec![
            "loadgen",
            "--url",
            &url,
            "--max-tokens",
            "5",
            "--threads",
            "2",
        ];
        a.extend_from_slice(extra);
        loadgen::Args::parse_from(a)
    };

    // The first run is stopped after 3 requests of a point that would run a minute.
    let stop = Stop::new();
    let mut out = RecordWriter::new(StopAfter {
        buf: Vec::new(),
        requests: 0,
        after: 3,
        stop: stop.clone(),
    });
    let first = run::run(
        args(&["-c", "2", "--duration", "60s"]),
        Setup {
            stop: stop.clone(),
            ..Setup::new(Target::parse(&url, vec![]).unwrap())
        },
        &mut out,
    );
    let err = first.expect_err("the first run was stopped");
    assert_eq!(cli::exit_for(&err), Exit::Interrupted, "{err:#}");
    let buf = out.into_inner().buf;
    let sums = records(&buf, "summary");
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0]["partial"], true);
    assert!(records(&buf, "request").len() >= 3);
    assert!(stop.is_stopped());

    // The second, in the same process with a stop of its own, runs its whole point.
    let mut out = RecordWriter::new(Vec::new());
    let second = run::run(
        args(&["-c", "2", "-n", "6"]),
        Setup::new(Target::parse(&url, vec![]).unwrap()),
        &mut out,
    );
    assert_eq!(second.expect("the second run is not stopped"), Exit::Ok);
    let buf = out.into_inner();
    let sums = records(&buf, "summary");
    assert_eq!(sums.len(), 1);
    assert_eq!(sums[0]["partial"], false);
    assert_eq!(sums[0]["requests"], 6);
    assert_eq!(sums[0]["ok"], 6);
    assert_eq!(records(&buf, "request").len(), 6);
}
