//! `--flush-cache`: empties the server's prefix cache before each point, through its engine's
//! own endpoint as the engine presets give it (`servbench::engines`), so a point does not ride
//! on the cache the previous one filled. What a server cannot do is said once, with the fix,
//! and the summaries say whether each point started from an emptied cache.

use crate::client::http::Pool;
use bytes::Bytes;
use serde_json::Value;
use servbench::engines::{CacheReset, EnginePreset};
use std::time::Duration;

/// How the run empties the cache, and whether it still tries.
pub struct Flusher {
    engine: &'static EnginePreset,
    /// Set after the first failure, which was reported: later points do not try again.
    gave_up: bool,
}

/// One flush's outcome: done (with what was called), or not (why, with the fix).
pub type Flushed = Result<String, String>;

impl Flusher {
    pub fn new(engine: &'static EnginePreset) -> Flusher {
        Flusher {
            engine,
            gave_up: false,
        }
    }

    /// The run's flusher: none without `--flush-cache`; an error when the engine is unknown.
    pub fn for_run(
        flush_cache: bool,
        engine: Option<&'static EnginePreset>,
    ) -> anyhow::Result<Option<Flusher>> {
        match (flush_cache, engine) {
            (false, _) => Ok(None),
            (true, Some(engine)) => Ok(Some(Flusher::new(engine))),
            (true, None) => Err(servbench::cli::usage(format!(
                "--flush-cache needs the server's engine: pass --engine {} (or pipe srv-launch's server record)",
                servbench::engines::names().join("|")
            ))),
        }
    }

    /// Empties the cache. `Ok(true)`: done; `Ok(false)`: this server cannot, and `warn` was
    /// called with why (once per run: later calls return false quietly).
    pub async fn flush(
        &mut self,
        pool: &Pool,
        timeout: Duration,
        warn: &mut dyn FnMut(String),
    ) -> bool {
        if self.gave_up {
            return false;
        }
        let outcome = match self.engine.cache_reset {
            None => Err(format!(
                "{} has no endpoint that empties its prefix cache{}",
                self.engine.name,
                self.engine
                    .cache_reset_hint
                    .map_or(String::new(), |h| format!(" ({h})"))
            )),
            Some(CacheReset::Post(path)) => post(pool, path, timeout).await.map(|_| path.into()),
            Some(CacheReset::LlamaSlots) => erase_slots(pool, timeout).await,
        };
        match outcome {
            Ok(_) => true,
            Err(why) => {
                self.gave_up = true;
                let hint = match (self.engine.cache_reset, self.engine.cache_reset_hint) {
                    (Some(_), Some(h)) => format!("; {h}"),
                    _ => String::new(),
                };
                warn(format!(
                    "--flush-cache: {why}{hint}: no point's cache is emptied (summaries say cache_flushed: false)"
                ));
                false
            }
        }
    }
}

/// One POST; a 2xx is success, anything else the status and a body excerpt.
async fn post(pool: &Pool, path: &str, timeout: Duration) -> Result<Bytes, String> {
    let (status, body) = pool
        .exchange(hyper::Method::POST, path, Bytes::new(), timeout)
        .await
        .map_err(|f| format!("POST {path}: {}", f.message))?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        let text = String::from_utf8_lossy(&body);
        Err(format!(
            "POST {path} answered HTTP {status}: {}",
            servbench::jsonl::excerpt(text.trim(), 120).replace('\n', " ")
        ))
    }
}

/// llama-server: every slot's cache erased (`POST /slots/{id}?action=erase`), the slots counted
/// by `GET /props` (`total_slots`).
async fn erase_slots(pool: &Pool, timeout: Duration) -> Flushed {
    let (status, body) = pool
        .exchange(hyper::Method::GET, "/props", Bytes::new(), timeout)
        .await
        .map_err(|f| format!("GET /props: {}", f.message))?;
    let slots = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("total_slots").and_then(Value::as_u64))
        .filter(|_| status == 200)
        .ok_or_else(|| format!("GET /props (HTTP {status}) gives no total_slots"))?;
    for id in 0..slots {
        post(pool, &format!("/slots/{id}?action=erase"), timeout).await?;
    }
    Ok(format!("/slots/0..{slots}?action=erase"))
}
