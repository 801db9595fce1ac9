//! A microbenchmark of the per-chunk classification (`loadgen::client::sse::ChunkReader`, the
//! hot path of every stream): ns per chunk for each engine's usual content chunks, read as a
//! stream reads them (its shapes learned from its first chunks), by the strict walk alone (a
//! chunk read with nothing learned), and by serde (what a minimal decoding client pays).
//!
//!     cargo run --release -p loadgen --example scan_bench [-- ROUNDS]

use loadgen::client::sse::{ChunkReader, classify_serde, read};
use std::hint::black_box;
use std::time::Instant;

/// Each engine's content chunks as it sends them: one stream's (its id the same in each).
fn shapes() -> Vec<(&'static str, Vec<String>)> {
    let words = [
        " bami",
        " zupi",
        " the",
        " of\\n",
        " \\\"x\\\"",
        " rota",
        " and",
        " a",
    ];
    let many = |f: &dyn Fn(usize, &str) -> String| -> Vec<String> {
        (0..64).map(|i| f(i, words[i % words.len()])).collect()
    };
    vec![
        (
            "srv-sim / vLLM completions (usage per chunk)",
            many(&|i, w| {
                format!(
                    r#"{{"id":"cmpl-sim000000000001e3da","object":"text_completion","created":1796177515,"model":"llama-3.1-8b","choices":[{{"index":0,"text":"{w}","logprobs":null,"finish_reason":null,"stop_reason":null}}],"usage":{{"prompt_tokens":32,"total_tokens":{},"completion_tokens":{i}}}}}"#,
                    32 + i
                )
            }),
        ),
        (
            "vLLM chat",
            many(&|_, w| {
                format!(
                    r#"{{"id":"chatcmpl-3f2a9c0d8e7b4a6f9d1c2b3a4e5f6071","object":"chat.completion.chunk","created":1796177515,"model":"Qwen/Qwen3-0.6B","choices":[{{"index":0,"delta":{{"content":"{w}"}},"logprobs":null,"finish_reason":null}}]}}"#
                )
            }),
        ),
        (
            "SGLang chat",
            many(&|_, w| {
                format!(
                    r#"{{"id":"5d1e0a8f2c3b4e6d","object":"chat.completion.chunk","created":1796177515,"model":"default","choices":[{{"index":0,"delta":{{"role":null,"content":"{w}","reasoning_content":null,"tool_calls":null}},"logprobs":null,"finish_reason":null,"matched_stop":null}}],"usage":null}}"#
                )
            }),
        ),
        (
            "llama.cpp chat",
            many(&|_, w| {
                format!(
                    r#"{{"choices":[{{"finish_reason":null,"index":0,"delta":{{"content":"{w}"}}}}],"created":1796177515,"id":"chatcmpl-Xb2kQ9","model":"tiny.gguf","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}}"#
                )
            }),
        ),
    ]
}

fn ns_per_chunk(chunks: &[String], rounds: usize, mut f: impl FnMut(&[u8]) -> bool) -> f64 {
    let t = Instant::now();
    let mut n = 0usize;
    for _ in 0..rounds {
        for c in chunks {
            n += usize::from(f(black_box(c.as_bytes())));
        }
    }
    let ns = t.elapsed().as_nanos() as f64 / (rounds * chunks.len()) as f64;
    assert_eq!(n, rounds * chunks.len(), "every chunk carried content");
    ns
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000)
        .clamp(1, 10_000_000);
    println!(
        "{:<46} {:>10} {:>10} {:>10}",
        "content chunks", "stream ns", "walk ns", "serde ns"
    );
    for (name, chunks) in shapes() {
        let mut reader = ChunkReader::default();
        for c in &chunks {
            let got = reader.read(c.as_bytes()).map(|c| c.event);
            assert_eq!(got, classify_serde(c.as_bytes()), "{c}");
        }
        let stream = ns_per_chunk(&chunks, rounds, |c| {
            reader.read(c).is_ok_and(|c| c.event.content)
        });
        let walk = ns_per_chunk(&chunks, rounds / 4 + 1, |c| {
            read(c).is_ok_and(|c| c.event.content)
        });
        let serde = ns_per_chunk(&chunks, rounds / 4 + 1, |c| {
            classify_serde(c).is_ok_and(|e| e.content)
        });
        println!("{name:<46} {stream:>10.1} {walk:>10.1} {serde:>10.1}");
    }
}
