//! `collbench decode`: the allreduces one decode step of a tensor-parallel dense transformer
//! needs (two per layer, after attention and after the MLP, each `batch x hidden x dtype`
//! bytes: Megatron-LM's layout), measured one at a time, and set beside the step's roofline
//! compute and memory time from the shared presets. Is the step latency-bound or compute-bound?

/// Bytes of one decode-step allreduce.
pub fn allreduce_bytes(batch: u32, hidden: u32, dtype_bytes: usize) -> u64 {
    u64::from(batch) * u64::from(hidden) * dtype_bytes as u64
}

/// Allreduces in one decode step: two per layer.
pub fn allreduces_per_step(layers: u32) -> u32 {
    2 * layers
}
