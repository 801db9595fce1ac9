//! `srv-sim --predict --pd xPyD`: a disaggregated layout in virtual time. x prefill engines and
//! y decode engines (each the modelled engine of `--tp`/`--pp`, on consecutive GPUs, the
//! prefill ones first, as `srv-launch --pd` splits `--gpus`) stand on one virtual clock and are
//! advanced in time order, one event at a time ([`Stepper`]). As srv-sim's proxy does, request
//! n goes to prefill engine n mod x with `max_tokens` 1, then to decode engine n mod y; its KV
//! cache crosses the link between the two instances' GPUs ([`presets::kv_transfer`]: PCIe or
//! NVLink, as the card's topology has them), one transfer at a time into each decode engine
//! (the served decode role's queue), and queues there with its prompt cached, so its first
//! step computes the last prompt token and samples the first token the client sees. The proxy's
//! hops take no time here: the modelled client's `--request-latency` is the one hop.
//!
//! Each request's `server_timing` is read from the `metrics` and `prefill_metrics` the served
//! decode and prefill roles answer with, built from the same engine times, so a prediction and
//! a measurement have one shape: its five TTFT parts add up to the server's TTFT exactly.

use super::Engine;
use super::load::VirtualClock;
use crate::clock::Clock;
use crate::metrics::{MetricNames, Metrics};
use crate::progress::Progress;
use crate::selfreport::metrics_json;
use crate::step::Submit;
use crate::steploop::Stepper;
use servbench::presets::{self, PdLayout};
use servbench::record::{PdRole, ServerTiming};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A request in a prefill engine: the client's request and where it goes next.
struct Prefilling {
    id: u64,
    client: Submit,
    prefill: Arc<Progress>,
    decode: usize,
}

/// What is known of a request once its prefill is done, for its `server_timing`.
struct Handed {
    prefill: Arc<Progress>,
    decode: Arc<Progress>,
    kv_transfer: Duration,
}

/// The P/D group: its engines, the requests between them, each decode engine's link.
struct Group {
    layout: PdLayout,
    prefill: Vec<Stepper>,
    decode: Vec<Stepper>,
    /// Per prefill engine, the requests it holds.
    prefilling: Vec<Vec<Prefilling>>,
    /// Per decode engine: when its link is free for the next transfer.
    link_free: Vec<Instant>,
    /// KV caches on their way, by arrival: (arrival, id), with the decode engine and request.
    transfers: BinaryHeap<Reverse<(Instant, u64)>>,
    moving: HashMap<u64, (usize, Submit)>,
    handed: HashMap<u64, Handed>,
    /// The proxy's round-robin counter.
    sent: usize,
}

/// Runs the point's client against the group until its load is over; returns each request's
/// server timing by its id.
pub fn run(
    client: &mut VirtualClock,
    engine: &Engine,
    layout: PdLayout,
) -> HashMap<u64, ServerTiming> {
    let start = client.now();
    let stepper = || {
        let metrics = Arc::new(Mutex::new(Metrics::new(MetricNames::Vllm)));
        Stepper::new(metrics, super::modelled(engine, false), start)
    };
    let mut g = Group {
        layout,
        prefill: (0..layout.prefill).map(|_| stepper()).collect(),
        decode: (0..layout.decode).map(|_| stepper()).collect(),
        prefilling: (0..layout.prefill).map(|_| Vec::new()).collect(),
        link_free: vec![start; layout.decode as usize],
        transfers: BinaryHeap::new(),
        moving: HashMap::new(),
        handed: HashMap::new(),
        sent: 0,
    };
    while let Some(t) = g.next_event(client) {
        client.move_to(t);
        for (id, s) in client.arrived() {
            g.front(id, s);
        }
        while let Some(&Reverse((at, id))) = g.transfers.peek()
            && at <= t
        {
            g.transfers.pop();
            if let Some((j, s)) = g.moving.remove(&id) {
                g.decode[j].submit(s);
            }
        }
        for i in 0..g.prefill.len() {
            if g.prefill[i].advance(t) {
                g.hand_off(i, engine, t);
            }
        }
        for e in &mut g.decode {
            e.advance(t);
        }
        client.read_streams();
    }
    g.handed
        .into_iter()
        .filter_map(|(id, h)| Some((id, h.server_timing()?)))
        .collect()
}

impl Group {
    /// The earliest thing that happens next: the client's, an engine's, a KV cache's arrival.
    fn next_event(&self, client: &VirtualClock) -> Option<Instant> {
        let engines = self.prefill.iter().chain(&self.decode);
        let transfer = self.transfers.peek().map(|Reverse((t, _))| *t);
        engines
            .filter_map(Stepper::deadline)
            .chain(client.next_send())
            .chain(transfer)
            .min()
    }

    /// The proxy: a request to the next prefill engine, asking one token.
    fn front(&mut self, id: u64, client: Submit) {
        let n = self.sent;
        self.sent += 1;
        let i = n % self.prefill.len();
        let prefill = Progress::new(1);
        self.prefill[i].submit(Submit {
            progress: prefill.clone(),
            prompt_tokens: client.prompt_tokens,
            cached: client.cached,
            arrival: client.arrival,
            rid: None,
            pooling: false,
            adapter: client.adapter,
        });
        self.prefilling[i].push(Prefilling {
            id,
            client,
            prefill,
            decode: n % self.decode.len(),
        });
    }

    /// Prefill engine `i` moved at `t`: each request it finished sends its KV cache to its
    /// decode engine, behind the transfers already on that engine's link.
    fn hand_off(&mut self, i: usize, engine: &Engine, t: Instant) {
        let dep = &engine.roofline.dep;
        let per = dep.layout.gpus();
        let mut k = 0;
        while k < self.prefilling[i].len() {
            if self.prefilling[i][k]
                .prefill
                .available
                .load(Ordering::Acquire)
                == 0
            {
                k += 1;
                continue;
            }
            let p = self.prefilling[i].swap_remove(k);
            let cost = presets::kv_transfer(
                &dep.model,
                &dep.hw,
                dep.layout,
                u64::from(p.client.prompt_tokens),
                presets::first_gpu(self.layout, PdRole::Prefill, i as u32, per),
                presets::first_gpu(self.layout, PdRole::Decode, p.decode as u32, per),
            );
            let free = &mut self.link_free[p.decode];
            let arrived = (*free).max(t) + Duration::from_secs_f64(cost.ms / 1e3);
            *free = arrived;
            self.handed.insert(
                p.id,
                Handed {
                    prefill: p.prefill,
                    decode: p.client.progress.clone(),
                    kv_transfer: arrived - t,
                },
            );
            // Its queue on the decode side counts from its KV's arrival, its prompt cached.
            let s = Submit {
                arrival: arrived,
                cached: p.client.prompt_tokens,
                ..p.client
            };
            self.transfers.push(Reverse((arrived, p.id)));
            self.moving.insert(p.id, (p.decode, s));
        }
    }
}

impl Handed {
    /// The request's timing as the served group reports it: the decode role's `metrics`
    /// (with `kv_transfer_ms`) and the prefill role's beside them as `prefill_metrics`, read
    /// by shared's one reader.
    fn server_timing(&self) -> Option<ServerTiming> {
        let tokens = self.decode.available.load(Ordering::Acquire);
        let mut decode = metrics_json(&self.decode.read_times(), tokens);
        decode["kv_transfer_ms"] = (self.kv_transfer.as_nanos() as f64 / 1e6).into();
        let prefill = metrics_json(&self.prefill.read_times(), 1);
        let answer = serde_json::json!({"metrics": decode, "prefill_metrics": prefill});
        ServerTiming::from_answer(&answer).map(|(t, _)| t)
    }
}
