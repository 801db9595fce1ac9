//! The client side of one request: `http.rs` (the target URL, the keep-alive connection pool),
//! `tls.rs` (HTTPS trust), `request.rs` (one request, streaming or whole, timed into its
//! record), `sse.rs` (the SSE scanner), `body.rs` (the one place a request body is built).

pub mod body;
pub mod http;
pub mod request;
pub mod sse;
pub mod tls;
