//! Disaggregated prefill and decode, one role per srv-sim process, speaking vLLM's
//! disaggregated-proxy protocol (`kv_transfer_params`, as its NIXL connector and its toy proxy
//! do):
//! - `--pd-role prefill`: a request whose `kv_transfer_params` has `do_remote_decode: true` is
//!   served as usual (the proxy asks for `max_tokens: 1`), and its answer carries the
//!   `kv_transfer_params` a decode server needs (`do_remote_prefill: true`, the engine, its
//!   blocks, host and port);
//! - `--pd-role decode`: a request whose `kv_transfer_params` has `do_remote_prefill: true` first
//!   waits for its KV cache to arrive: the prompt's KV bytes (the model card's) over the link
//!   between the two instances (the hardware card's interconnect level joining the prefill's
//!   GPUs, taken as the ones just before this instance's, to this one's; NVLink or PCIe), one
//!   transfer at a time on that link. It then queues for the engine with its prompt cached, so
//!   its first step computes the last prompt token and samples the first token. Its answer's
//!   `metrics` add `kv_transfer_ms`: from the request's arrival to the KV's (the link's queue
//!   included); `queue_time_ms` then counts from the KV's arrival;
//! - `--pd-role proxy` (proxy.rs): the front that sends each request to a prefill
//!   server and then to a decode server.

use crate::api::{Formatter, GenRequest};
use servbench::cli;
use servbench::presets::{self, Deployment, KvTransfer};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Which part of a disaggregated layout this process serves: the role srv-launch writes in a
/// member's server record, so both sides name it alike.
pub use servbench::record::PdRole;

/// The P/D flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PdArgs {
    /// Serve one role of a disaggregated prefill/decode layout (absent: colocated): prefill,
    /// decode, or proxy (the front that sends each request to a prefill server, then to a
    /// decode server with the prefill's kv_transfer_params, as vLLM's disaggregated proxy)
    #[arg(long, value_enum, value_name = "ROLE")]
    pub pd_role: Option<PdRole>,
    /// --pd-role proxy: a prefill server's base URL, http://HOST:PORT (repeatable; round-robin)
    #[arg(long, value_name = "URL")]
    pub prefill_url: Vec<String>,
    /// --pd-role proxy: a decode server's base URL, http://HOST:PORT (repeatable; round-robin)
    #[arg(long, value_name = "URL")]
    pub decode_url: Vec<String>,
    /// --pd-role proxy: the longest a member may take to answer one request in full
    #[arg(long, value_name = "DUR", value_parser = cli::parse_duration, default_value = "10m")]
    pub upstream_timeout: Duration,
}

/// A member's base URL as the proxy connects to it: `http://HOST:PORT`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub url: String,
    /// `HOST:PORT` to connect to (and to send as `Host`).
    pub authority: String,
}

impl Upstream {
    pub fn parse(flag: &str, url: &str) -> anyhow::Result<Upstream> {
        let bad = |why: &str| cli::usage(format!("{flag} {url}: {why}"));
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            bad("give http://HOST:PORT (the proxy speaks plain HTTP to its members)")
        })?;
        let authority = rest.trim_end_matches('/');
        if authority.is_empty() || authority.contains('/') {
            return Err(bad("give http://HOST:PORT, without a path"));
        }
        let port = authority.rsplit_once(':').map(|(_, p)| p);
        if port.is_none_or(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
            return Err(bad("give the port: http://HOST:PORT"));
        }
        Ok(Upstream {
            url: format!("http://{authority}"),
            authority: authority.to_string(),
        })
    }
}

/// What the P/D flags ask for, validated.
#[derive(Debug, Clone, Default)]
pub struct PdPlan {
    pub role: Option<PdRole>,
    pub prefill: Vec<Upstream>,
    pub decode: Vec<Upstream>,
    pub upstream_timeout: Duration,
}

impl PdArgs {
    pub fn plan(&self) -> anyhow::Result<PdPlan> {
        let urls = !self.prefill_url.is_empty() || !self.decode_url.is_empty();
        if self.pd_role != Some(PdRole::Proxy) {
            if urls {
                return Err(cli::usage(
                    "--prefill-url and --decode-url are the proxy's members: give --pd-role proxy",
                ));
            }
            return Ok(PdPlan {
                role: self.pd_role,
                upstream_timeout: self.upstream_timeout,
                ..PdPlan::default()
            });
        }
        if self.prefill_url.is_empty() || self.decode_url.is_empty() {
            return Err(cli::usage(
                "--pd-role proxy needs at least one --prefill-url and one --decode-url",
            ));
        }
        if self.upstream_timeout.is_zero() {
            return Err(cli::usage("--upstream-timeout must be more than 0"));
        }
        let parse = |flag: &str, urls: &[String]| {
            urls.iter()
                .map(|u| Upstream::parse(flag, u))
                .collect::<anyhow::Result<Vec<_>>>()
        };
        Ok(PdPlan {
            role: Some(PdRole::Proxy),
            prefill: parse("--prefill-url", &self.prefill_url)?,
            decode: parse("--decode-url", &self.decode_url)?,
            upstream_timeout: self.upstream_timeout,
        })
    }
}

/// What a prefill or decode server knows of its part (default: colocated, no part).
#[derive(Default)]
pub struct Side {
    pub role: Option<PdRole>,
    /// The decode role's link from the prefill instances.
    pub link: Option<KvLink>,
    /// The served model and the TP degree, for the prefill's `kv_transfer_params`.
    pub engine_id: String,
    pub tp: u32,
    /// Where this server listens (`HOST:PORT`), once bound.
    pub listening: std::sync::OnceLock<(String, u16)>,
}

impl Side {
    /// The prefill side's `kv_transfer_params` for the answer to `req` (see
    /// [`prefill_answer_params`]).
    pub fn answer_params(&self, req: &GenRequest) -> Option<serde_json::Value> {
        let (host, port) = self.listening.get().cloned().unwrap_or_default();
        prefill_answer_params(self.role, req, &self.engine_id, &host, port, self.tp)
    }

    /// What the answer to `req` tells of its part: the decode side's wait for its KV, the
    /// prefill side's hand-off.
    pub fn report(&self, fmt: &mut Formatter, req: &GenRequest, kv_wait: Option<Duration>) {
        fmt.kv_transfer_ms = kv_wait.map(|d| d.as_nanos() as f64 / 1e6);
        fmt.kv_transfer_params = self.answer_params(req);
    }

    /// The decode side's wait for `req`'s KV (see [`receive_kv`]).
    pub async fn receive_kv(&self, req: &GenRequest, arrival: Instant) -> Option<Duration> {
        receive_kv(self.role, self.link.as_ref(), req, arrival).await
    }
}

/// `kv_transfer_params.<key>` is `true` in a request.
fn flag(req: &GenRequest, key: &str) -> bool {
    req.kv_transfer_params
        .as_ref()
        .and_then(|p| p.get(key))
        .and_then(serde_json::Value::as_bool)
        == Some(true)
}

/// The prefill side: the `kv_transfer_params` of the answer to a request that asked for a
/// remote decode; None for any other request or role.
pub fn prefill_answer_params(
    role: Option<PdRole>,
    req: &GenRequest,
    engine_id: &str,
    host: &str,
    port: u16,
    tp: u32,
) -> Option<serde_json::Value> {
    if role != Some(PdRole::Prefill) || !flag(req, "do_remote_decode") {
        return None;
    }
    let blocks = req.prompt_tokens.div_ceil(crate::prefix::BLOCK_TOKENS);
    Some(serde_json::json!({
        "do_remote_prefill": true,
        "do_remote_decode": false,
        "remote_engine_id": engine_id,
        "remote_block_ids": (0..blocks).collect::<Vec<u32>>(),
        "remote_host": host,
        "remote_port": port,
        "tp_size": tp,
    }))
}

/// The decode side's link from the prefill instances: one KV transfer at a time.
pub struct KvLink {
    dep: Deployment,
    from_gpu: u32,
    to_gpu: u32,
    free_at: Mutex<Instant>,
}

impl KvLink {
    /// The link a decode instance laid out as `dep` receives KV on: from the GPUs just before
    /// its own (a prefill instance of the same layout placed first) to its first GPU.
    pub fn new(dep: Deployment) -> KvLink {
        let gpus = dep.layout.gpus();
        KvLink {
            dep,
            from_gpu: 0,
            to_gpu: gpus,
            free_at: Mutex::new(Instant::now()),
        }
    }

    /// The modelled transfer of `tokens` prompt tokens' KV.
    pub fn cost(&self, tokens: u32) -> KvTransfer {
        presets::kv_transfer(
            &self.dep.model,
            &self.dep.hw,
            self.dep.layout,
            u64::from(tokens),
            self.from_gpu,
            self.to_gpu,
        )
    }

    /// Takes the link for a request that arrived at `arrival` needing `tokens` tokens' KV:
    /// when its KV will have arrived.
    pub fn reserve(&self, tokens: u32, arrival: Instant) -> Instant {
        let took = Duration::from_secs_f64(self.cost(tokens).ms / 1e3);
        let mut free = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let end = (*free).max(arrival) + took;
        *free = end;
        end
    }
}

/// The decode side: when `req` comes with a prefill's KV, waits for the KV to arrive over
/// `link` and returns how long that took from `arrival`; None for any other request or role.
pub async fn receive_kv(
    role: Option<PdRole>,
    link: Option<&KvLink>,
    req: &GenRequest,
    arrival: Instant,
) -> Option<Duration> {
    let link = link.filter(|_| role == Some(PdRole::Decode) && flag(req, "do_remote_prefill"))?;
    let end = link.reserve(req.prompt_tokens, arrival);
    tokio::time::sleep_until(end.into()).await;
    Some(Instant::now().saturating_duration_since(arrival))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_urls_are_plain_http_with_a_port() {
        let u = Upstream::parse("--prefill-url", "http://127.0.0.1:8100/").unwrap();
        assert_eq!(
            (u.url.as_str(), u.authority.as_str()),
            ("http://127.0.0.1:8100", "127.0.0.1:8100")
        );
        for bad in [
            "127.0.0.1:8100",
            "https://h:1",
            "http://h",
            "http://h:0",
            "http://h:1/v1",
            "http://",
        ] {
            let e = Upstream::parse("--decode-url", bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("--decode-url") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn transfers_on_one_link_queue_behind_each_other() {
        let dep = Deployment::new(
            presets::load_model("llama-3.1-8b").unwrap(),
            presets::load_hardware("rtx-pro-6000").unwrap(),
            presets::Layout { tp: 1, pp: 1 },
        );
        let link = KvLink::new(dep);
        let one = Duration::from_secs_f64(link.cost(4000).ms / 1e3);
        let t0 = Instant::now() + Duration::from_secs(1);
        assert_eq!(link.reserve(4000, t0), t0 + one);
        assert_eq!(link.reserve(4000, t0), t0 + one + one);
    }
}
