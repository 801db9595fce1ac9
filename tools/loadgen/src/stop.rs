//! A run's stop switch, shared by the dispatch loop, the run and the signal handling, and how a
//! phase ended (by its budget, the switch, a server gone, a rank gone).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use tokio::sync::Notify;

/// A run's stop switch. The first Ctrl-C/SIGTERM pulls it gently ([`Stop::stop`]: no new
/// requests, in-flight ones get `--grace`); a stdout nobody reads any more pulls it hard
/// ([`Stop::abort`]: in-flight requests are cancelled at once, nothing more can be delivered).
/// One per run, so a process can run twice. The level is read on every dispatch (an atomic
/// load); the notification wakes whoever waits for it.
#[derive(Clone, Default)]
pub struct Stop(Arc<StopState>);

#[derive(Default)]
struct StopState {
    /// 0 running, [`STOPPING`], [`ABORTING`]; it only rises.
    level: AtomicU8,
    notify: Notify,
}

const STOPPING: u8 = 1;
const ABORTING: u8 = 2;

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// No new requests; in-flight ones get `--grace`.
    pub fn stop(&self) {
        self.raise(STOPPING);
    }

    /// No new requests, and in-flight ones are cancelled now: their records could not be
    /// delivered anyway (the reader of stdout is gone).
    pub fn abort(&self) {
        self.raise(ABORTING);
    }

    fn raise(&self, to: u8) {
        self.0.level.fetch_max(to, Ordering::SeqCst);
        self.0.notify.notify_waiters();
    }

    pub fn is_stopped(&self) -> bool {
        self.0.level.load(Ordering::SeqCst) >= STOPPING
    }

    pub fn is_aborted(&self) -> bool {
        self.0.level.load(Ordering::SeqCst) >= ABORTING
    }

    /// Returns once the switch is pulled (at once when it already was).
    pub async fn wait(&self) {
        self.wait_level(STOPPING).await;
    }

    /// Returns once the switch is pulled hard.
    pub async fn wait_aborted(&self) {
        self.wait_level(ABORTING).await;
    }

    async fn wait_level(&self, level: u8) {
        loop {
            // A `Notified` hears `notify_waiters` from its creation on, so a raise between
            // the check and the await is not missed.
            let notified = self.0.notify.notified();
            if self.0.level.load(Ordering::SeqCst) >= level {
                return;
            }
            notified.await;
        }
    }
}

/// How a phase ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Ended {
    /// Its budget was spent.
    Completed,
    /// The run's stop was pulled (Ctrl-C, SIGTERM; or hard, when stdout's reader is gone).
    Stopped,
    /// The server is gone (see `run::health`): why, in words.
    ServerDown(String),
    /// Another rank of the job died or failed (see `ranks`): which, and why.
    RankFailed(String),
}

/// A start-up step (a probe, aligning prompts) that gives way to the run's stop.
pub async fn until_stopped<T>(
    stop: &Stop,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        r = work => r,
        _ = stop.wait() => Err(stopped(stop)),
    }
}

/// The error a stopped run ends with: interrupted (exit 130), or for a stdout nobody reads,
/// the quiet end of a closed pipe.
pub fn stopped(stop: &Stop) -> anyhow::Error {
    if stop.is_aborted() {
        servbench::jsonl::OutputError::Closed.into()
    } else {
        servbench::cli::Interrupted.into()
    }
}
