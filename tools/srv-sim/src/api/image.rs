//! Images in chat messages (`{"type":"image_url","image_url":{"url":"data:image/png;base64,..."}}`)
//! as a vision-language model's card counts them: a W x H image is ceil(W/p) x ceil(H/p) prompt
//! tokens, p the card's `image_token_px` (the side of one image token once the vision encoder's
//! patches are merged). Only the PNG's header is read (its IHDR holds the size); the tokens
//! join the prompt, so the engine charges their encode as their prefill.

use super::ApiError;
use base64::Engine as _;
use serde_json::Value;

/// The prompt tokens of the image in `part` (`where_` names it in errors).
pub(crate) fn tokens(part: &Value, px: Option<u32>, where_: &str) -> Result<u32, ApiError> {
    let Some(px) = px else {
        return Err(ApiError::bad_request(format!(
            "{where_}: this model takes no images (its card has no image_token_px)"
        )));
    };
    let url = part
        .get("image_url")
        .and_then(|u| u.get("url").or(Some(u)))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let (width, height) = png_size(url).ok_or_else(|| {
        ApiError::bad_request(format!(
            "{where_}: srv-sim reads images as PNG data URLs (data:image/png;base64,...) with a valid header"
        ))
    })?;
    let tokens = u64::from(width.div_ceil(px)) * u64::from(height.div_ceil(px));
    u32::try_from(tokens).map_err(|_| {
        ApiError::bad_request(format!("{where_}: a {width}x{height} image is too large"))
    })
}

/// The width and height in a PNG data URL's header.
fn png_size(url: &str) -> Option<(u32, u32)> {
    let data = url.strip_prefix("data:image/png;base64,")?;
    // The signature (8 bytes) and the IHDR chunk's length, type, width and height (16): the
    // first 32 base64 characters are 24 bytes.
    let head = base64::engine::general_purpose::STANDARD
        .decode(data.get(..32)?)
        .ok()?;
    if head.get(..16)? != b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR" {
        return None;
    }
    let be = |at: usize| u32::from_be_bytes(head[at..at + 4].try_into().unwrap_or_default());
    let (width, height) = (be(16), be(20));
    (width > 0 && height > 0).then_some((width, height))
}
