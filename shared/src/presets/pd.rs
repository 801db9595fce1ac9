//! Disaggregated prefill and decode: a P/D layout (`xPyD`: x prefill instances, y decode
//! instances) and what handing one request's KV cache from a prefill instance to a decode
//! instance costs on the node's fabric.
//!
//! The transfer model: every rank of the prefill instance sends its share of the prompt's KV
//! cache (the model card's bytes per token, split as the cache is: over the TP ranks that hold
//! distinct KV heads and over the pipeline stages) to its peer rank of the decode instance, all
//! pairs at once; one pair's bytes cross the interconnect level that joins the two instances'
//! GPUs at that level's bandwidth, after its hop latency. NVLink's levels are an order of
//! magnitude faster than PCIe's, so the same bytes move sooner there.

use super::cards::{Hardware, LinkKind, ModelCard};
use super::roofline::Layout;
use crate::record::PdRole;

/// A disaggregated layout (`xPyD`): the record's, one type (its members placed on GPUs by
/// [`PdLayout::server_gpus`]).
pub use crate::record::PdLayout;

/// The first GPU of `role` member `index` of `layout`, each member on `per_server` GPUs.
pub fn first_gpu(layout: PdLayout, role: PdRole, index: u32, per_server: u32) -> u32 {
    layout
        .server_gpus(per_server)
        .find(|&(r, i, _)| (r, i) == (role, index))
        .map_or(0, |(_, _, gpus)| gpus.start)
}

/// One request's KV hand-off, as the fabric model costs it.
#[derive(Debug, Clone, PartialEq)]
pub struct KvTransfer {
    /// The prompt's KV cache, all ranks together.
    pub bytes: f64,
    /// What one rank pair moves (the pairs move at once).
    pub bytes_per_link: f64,
    /// The level's hop latency plus one pair's bytes over its bandwidth.
    pub ms: f64,
    /// The interconnect level crossed (its name in the card) and the fabric's kind.
    pub level: String,
    pub kind: LinkKind,
}

/// The KV cache of `tokens` prompt tokens of `model` moved from the instance whose first GPU
/// is `from_gpu` to the one whose first GPU is `to_gpu`, both laid out as `layout` on `hw`.
pub fn kv_transfer(
    model: &ModelCard,
    hw: &Hardware,
    layout: Layout,
    tokens: u64,
    from_gpu: u32,
    to_gpu: u32,
) -> KvTransfer {
    let bytes = tokens as f64 * model.kv_bytes_per_token();
    let shards = model.kv_split(layout.tp) * f64::from(layout.pp.max(1));
    let bytes_per_link = bytes / shards;
    let level = hw.interconnect.level_between(from_gpu, to_gpu);
    // GB/s is 1e6 bytes per ms.
    let ms = level.hop_us / 1e3 + bytes_per_link / (level.busbw_gbps * 1e6);
    KvTransfer {
        bytes,
        bytes_per_link,
        ms,
        level: level.name.clone(),
        kind: hw.interconnect.kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::{load_hardware, load_model};

    #[test]
    fn members_are_placed_in_start_order_prefill_first() {
        let l: PdLayout = "2p1d".parse().unwrap();
        assert_eq!(first_gpu(l, PdRole::Prefill, 1, 2), 2);
        assert_eq!(first_gpu(l, PdRole::Decode, 0, 2), 4);
        assert_eq!(first_gpu(l, PdRole::Decode, 0, 4), 8);
    }

    #[test]
    fn an_nvlink_transfer_is_shorter_than_a_pcie_one_for_the_same_bytes() {
        let model = load_model("llama-3.1-8b").unwrap();
        let layout = Layout { tp: 1, pp: 1 };
        let nv = kv_transfer(&model, &load_hardware("h100").unwrap(), layout, 2000, 0, 1);
        let pcie = kv_transfer(
            &model,
            &load_hardware("rtx-pro-6000").unwrap(),
            layout,
            2000,
            0,
            1,
        );
        assert_eq!(nv.bytes, pcie.bytes);
        assert_eq!(nv.bytes, 2000.0 * 131_072.0);
        assert_eq!((nv.kind, pcie.kind), (LinkKind::Nvlink, LinkKind::Pcie));
        assert!(nv.ms * 3.0 < pcie.ms, "{nv:?} {pcie:?}");
    }

    #[test]
    fn tensor_parallel_ranks_move_their_shards_at_once() {
        let model = load_model("llama-3.1-70b").unwrap();
        let hw = load_hardware("h100").unwrap();
        let one = kv_transfer(&model, &hw, Layout { tp: 1, pp: 1 }, 4096, 0, 1);
        let four = kv_transfer(&model, &hw, Layout { tp: 4, pp: 1 }, 4096, 0, 4);
        assert_eq!(one.bytes, four.bytes);
        assert_eq!(four.bytes_per_link * 4.0, one.bytes);
        assert!(four.ms < one.ms);
    }
}
