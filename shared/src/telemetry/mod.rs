//! Server-side truth for a load point: the server's Prometheus `/metrics` and its GPUs, read in
//! one vocabulary whatever the engine.
//!
//! - [`vocab`]: the table mapping each engine's metric names (vLLM, SGLang, llama.cpp, TGI,
//!   TensorRT-LLM, Triton's TensorRT-LLM backend, Dynamo's frontend; srv-sim speaks vLLM's or SGLang's) and a DCGM exporter's GPU fields to ours;
//! - [`prom`]: the exposition text parsed (with a maintained crate) and read through the table;
//! - [`window`]: one point's scrapes and GPU samples turned into the `server` and `gpus`
//!   objects of its summary (counters differenced, gauges averaged, buckets to percentiles);
//! - `energy`: a GPU's energy counter over a point, or why its sampled power stands in.
//!
//! Layering: uses `record` (the objects it fills) and `exec::gpu` (nvidia-smi's readings).

mod energy;
pub mod prom;
pub mod vocab;
pub mod window;

#[cfg(test)]
mod engine_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
mod tests;
