//! What one op at one size works on, besides its data: the buffers' sizes and the parameters.
//! Its own file so that the collectives and the NCCL calls both use it without importing each
//! other.

use crate::dtype::{Dtype, RedOp};

/// Buffer sizes of one collective at one size, in elements, and the size nccl-tests reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Elements in each rank's send buffer.
    pub send_elems: usize,
    /// Elements in each rank's receive buffer.
    pub recv_elems: usize,
    /// The `count` column: elements of the whole array the op moves (as `bytes` counts them).
    pub count: u64,
    /// The `size` column: bytes nccl-tests uses for algbw (whole array for gather/scatter ops).
    pub bytes: u64,
}

/// What every op needs to know besides the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    pub dtype: Dtype,
    pub redop: RedOp,
    pub root: usize,
}
