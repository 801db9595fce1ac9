//! Images in chat requests: srv-sim counts each as its model card says (`image_token_px`: a
//! W x H image is ceil(W/p) x ceil(H/p) prompt tokens) and charges them as prompt tokens;
//! a model whose card takes no images, and an image it cannot read, are one 400 naming the part.

mod common;

use base64::Engine as _;
use common::*;
use serde_json::{Value, json};

/// A PNG data URL of a `width` x `height` image: its signature and header chunk, as srv-sim
/// reads them (the pixels are not read).
fn png_url(width: u32, height: u32) -> String {
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    png.extend_from_slice(&width.to_be_bytes());
    png.extend_from_slice(&height.to_be_bytes());
    png.extend_from_slice(&[8, 2, 0, 0, 0, 0, 0, 0, 0]);
    let b64 = base64::engine::general_purpose::STANDARD.encode(&png);
    format!("data:image/png;base64,{b64}")
}

fn chat(images: &[(u32, u32)]) -> String {
    let mut content = vec![json!({"type": "text", "text": "a b c"})];
    for &(w, h) in images {
        content.push(json!({"type": "image_url", "image_url": {"url": png_url(w, h)}}));
    }
    json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2}).to_string()
}

#[test]
fn image_tokens_are_what_the_model_card_charges() {
    let sim = start(&["--model", "qwen2.5-vl-7b", "--ttft", "1ms", "--itl", "1ms"]);
    // 28 px per token: 448 x 448 is 16 x 16 = 256 tokens, 300 x 100 is 11 x 4 = 44.
    for (images, want) in [
        (vec![], 3),
        (vec![(448, 448)], 3 + 256),
        (vec![(448, 448), (300, 100)], 3 + 256 + 44),
    ] {
        let answer = post(sim.port, "/v1/chat/completions", &chat(&images));
        assert_eq!(
            answer.status,
            200,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        let v: Value = answer.json();
        assert_eq!(v["usage"]["prompt_tokens"], want, "{images:?}: {v}");
        let tokenized = post(sim.port, "/tokenize", &chat(&images)).json();
        assert_eq!(tokenized["count"], want, "{images:?}");
    }
}

#[test]
fn images_a_model_cannot_take_or_srv_sim_cannot_read_are_one_400() {
    let text_only = start(&["--ttft", "1ms", "--itl", "1ms"]);
    let a = post(text_only.port, "/v1/chat/completions", &chat(&[(64, 64)]));
    let body = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, 400, "{body}");
    assert!(
        body.contains("messages[0].content[1]: this model takes no images"),
        "{body}"
    );
    let vl = start(&["--model", "qwen2.5-vl-7b", "--ttft", "1ms", "--itl", "1ms"]);
    let jpeg = json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQSkZJRg=="}}]}]});
    let a = post(vl.port, "/v1/chat/completions", &jpeg.to_string());
    let body = String::from_utf8_lossy(&a.body);
    assert_eq!(a.status, 400, "{body}");
    assert!(body.contains("PNG data URLs"), "{body}");
}
