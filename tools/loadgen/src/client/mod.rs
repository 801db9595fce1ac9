//! The client side of one request: `http.rs` (the target URL, the keep-alive connection pool),
//! `tls.rs` (HTTPS trust), `request.rs` (one request, streaming or whole, timed into its
//! record), `sse.rs` (the SSE scanner: `sse/scan.rs` the strict chunk walk, `sse/shape.rs`
//! the replay of a stream's repeated chunk shapes), `body.rs` (the one place a request body
//! is built, for the API asked), `server_timing.rs` (the engine's own timing of a request,
//! from its answer), `inflight.rs` (a phase's requests once started: each bounded, timed,
//! handed to the collector; a conversation's turns go through the same lane), `image.rs` (`--images`: synthetic PNG data URLs), `wire/` (each
//! API's body fields, stream events and whole answer: one file per API).

pub mod body;
pub mod http;
pub mod image;
pub mod inflight;
pub mod request;
pub mod server_timing;
pub mod sse;
pub mod tls;
pub mod wire;
