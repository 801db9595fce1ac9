//! A P/D group loaded through its proxy: each prefill and decode server's own `/metrics` read
//! over every point, on a telemetry thread of its own (the same scraper as the target's), and
//! written in the summary's `pd_members` labelled by role.

use super::{Plan, Telemetry, TelemetryFlags};
use crate::client::http::Target;
use servbench::cli;
use servbench::record::{PdMemberStats, PdRole, ServerRecord};

/// One member being read.
struct Member {
    role: PdRole,
    index: u32,
    url: String,
    telemetry: Telemetry,
}

/// The group's members being read (none for a server that is no group's proxy).
#[derive(Default)]
pub struct Members(Vec<Member>);

impl Members {
    /// Starts a reader per member (none with `--no-metrics`); their GPUs are not sampled here
    /// (the target's GPU flags name the target's).
    pub fn start(flags: &TelemetryFlags, members: &[ServerRecord]) -> anyhow::Result<Members> {
        if flags.no_metrics {
            return Ok(Members::default());
        }
        let mut read = Vec::new();
        for m in members {
            let Some(pd) = &m.pd else { continue };
            let target = Target::parse(&m.url, Vec::new()).map_err(|e| {
                cli::failure(format!(
                    "the P/D group's {}{} server record's url {e}",
                    pd.role, pd.index
                ))
            })?;
            let plan = Plan {
                metrics: Some((target, "/metrics".to_string())),
                gpus: None,
                interval: flags.interval.max(std::time::Duration::from_millis(10)),
                timeout: flags.timeout.min(std::time::Duration::from_secs(5)),
            };
            if let Some(telemetry) = Telemetry::start(plan) {
                read.push(Member {
                    role: pd.role,
                    index: pd.index,
                    url: m.url.clone(),
                    telemetry,
                });
            }
        }
        Ok(Members(read))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every member's first scrape of the point (each bounded by the scrape timeout).
    pub async fn begin(&self) {
        for m in &self.0 {
            m.telemetry.begin().await;
        }
    }

    /// Every member's figures for the point, in the group's start order; and the CPU seconds
    /// their threads spent.
    pub async fn end(&self) -> (Vec<PdMemberStats>, f64) {
        let mut stats = Vec::new();
        let mut cpu_s = 0.0;
        for m in &self.0 {
            // No client token count to wait for: a member sees its side's tokens only.
            let t = m.telemetry.end(0).await;
            cpu_s += t.cpu_s;
            stats.push(PdMemberStats {
                role: m.role,
                index: m.index,
                url: m.url.clone(),
                server: t.server,
            });
        }
        (stats, cpu_s)
    }
}
