//! Heap allocations per request and per token on loadgen's request path, for
//! `scripts/bench-loadgen.sh` and the README's bench section: one streaming request after
//! another through `loadgen::client::request::stream_into` (the pool, hyper, the SSE splitting,
//! the chunk reader, the outcome with its gaps) and `to_record`, counted by a global allocator
//! that tallies every allocation and reallocation. The first requests (connection, first
//! shapes) are left out of the tally.
//!
//!     cargo run --release -p loadgen --example request_allocs -- URL REQUESTS MAX_TOKENS
//!
//! Prints one line: `requests=N tokens=T allocs_per_request=A allocs_per_1k_tokens=K
//! bytes_per_request=B` (tokens: the outcomes' content chunks).

use bytes::Bytes;
use loadgen::client::http::{Pool, Target};
use loadgen::client::request::{Outcome, RequestMeta, stream_into, to_record};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The system allocator, counting.
struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc`/`realloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        // SAFETY: as for `dealloc`, and `new_size` is the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Requests sent before the tally starts.
const WARMUP: u64 = 3;

fn main() -> std::process::ExitCode {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let [url, n, max] = a.as_slice() else {
        eprintln!("usage: request_allocs URL REQUESTS MAX_TOKENS");
        return std::process::ExitCode::from(2);
    };
    let (Ok(n), Ok(max)) = (n.parse::<u64>(), max.parse::<u32>()) else {
        eprintln!("request_allocs: REQUESTS and MAX_TOKENS are counts");
        return std::process::ExitCode::from(2);
    };
    let (n, max) = (n.clamp(1, 1_000_000), max.clamp(1, 1 << 20));
    let target = match Target::parse(url, Vec::new()) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("request_allocs: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let body = Bytes::from(format!(
        r#"{{"prompt":"the of and to in is that for it as was with be by on not he this are or his","max_tokens":{max},"min_tokens":{max},"ignore_eos":true,"temperature":0,"stream":true,"stream_options":{{"include_usage":true,"continuous_usage_stats":true}}}}"#
    ));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let labels = servbench::record::Labels::default();
    let result: Result<(u64, u64, u64), String> = runtime.block_on(async {
        let pool = Pool::new(target);
        let (mut allocs, mut bytes, mut tokens) = (0, 0, 0u64);
        for i in 0..WARMUP + n {
            let (a0, b0) = (
                ALLOCS.load(Ordering::Relaxed),
                BYTES.load(Ordering::Relaxed),
            );
            let start = Instant::now();
            let mut o = Outcome::expecting(max);
            // Bounded: a server that never ends a stream fails this after a minute.
            let sent = stream_into(&pool, loadgen::Api::Completions, body.clone(), true, &mut o);
            if tokio::time::timeout(std::time::Duration::from_secs(60), sent)
                .await
                .is_err()
            {
                return Err("a request took over 60 s".into());
            }
            if let Some(f) = &o.failure {
                return Err(format!("request {i} failed: {}", f.message));
            }
            let chunks = u64::from(o.chunks);
            let meta = RequestMeta {
                point: Default::default(),
                id: i,
                point_start: start,
                intended: start,
                dispatched: start,
                prompt_tokens_target: None,
                max_tokens: Some(max),
                images: None,
                turn: None,
            };
            std::hint::black_box(to_record(meta, o, &labels));
            if i >= WARMUP {
                allocs += ALLOCS.load(Ordering::Relaxed) - a0;
                bytes += BYTES.load(Ordering::Relaxed) - b0;
                tokens += chunks;
            }
        }
        Ok((allocs, bytes, tokens))
    });
    match result {
        Ok((allocs, bytes, tokens)) => {
            println!(
                "requests={n} tokens={tokens} allocs_per_request={:.1} allocs_per_1k_tokens={:.1} bytes_per_request={:.0}",
                allocs as f64 / n as f64,
                allocs as f64 / tokens.max(1) as f64 * 1000.0,
                bytes as f64 / n as f64
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("request_allocs: {e}");
            std::process::ExitCode::from(1)
        }
    }
}
