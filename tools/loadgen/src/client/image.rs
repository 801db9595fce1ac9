//! Synthetic images for chat requests (`--images N --image-size WxH`): PNG data URLs, a
//! different picture for every image of every request (a server that caches images across
//! requests, as vLLM's encoder cache does, must encode each), deterministic from the run's seed.
//! PNG by the `png` crate with its fast compression; the pixels are a pattern of the image's
//! seed, cheap to draw.

use base64::Engine as _;

/// `--image-size WxH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageSize {
    pub width: u32,
    pub height: u32,
}

/// The largest side taken: far above any model's image input, and the bound on the memory one
/// image costs (3 bytes a pixel).
const MAX_SIDE: u32 = 8192;

impl ImageSize {
    /// Parses `WxH` (`512x512`); the error is one line naming the flag.
    pub fn parse(s: &str) -> Result<ImageSize, String> {
        let bad = || {
            format!(
                "--image-size {s}: give WIDTHxHEIGHT in pixels, 1 to {MAX_SIDE} each (e.g. 512x512)"
            )
        };
        let (w, h) = s.split_once(['x', 'X']).ok_or_else(bad)?;
        let side = |v: &str| {
            v.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_SIDE).contains(n))
        };
        Ok(ImageSize {
            width: side(w).ok_or_else(bad)?,
            height: side(h).ok_or_else(bad)?,
        })
    }
}

/// The images of each request: `count` of `size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Images {
    pub count: u32,
    pub size: ImageSize,
}

impl Images {
    /// The data URLs of one request's images, drawn from `seed`.
    pub fn data_urls(&self, seed: u64) -> Vec<String> {
        (0..u64::from(self.count))
            .map(|i| {
                data_url(&png(
                    self.size,
                    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ i,
                ))
            })
            .collect()
    }
}

fn data_url(png: &[u8]) -> String {
    let mut url = String::from("data:image/png;base64,");
    base64::engine::general_purpose::STANDARD.encode_string(png, &mut url);
    url
}

/// An RGB PNG of `size` whose pixels are a pattern of `seed`.
pub fn png(size: ImageSize, seed: u64) -> Vec<u8> {
    let (w, h) = (size.width as usize, size.height as usize);
    let s = seed.to_le_bytes();
    let mut pixels = vec![0u8; w * h * 3];
    for (y, row) in pixels.chunks_exact_mut(w * 3).enumerate() {
        for (x, px) in row.chunks_exact_mut(3).enumerate() {
            px[0] = (x as u8).wrapping_add(s[0]);
            px[1] = (y as u8).wrapping_add(s[1]) ^ s[2];
            px[2] = ((x ^ y) as u8).wrapping_mul(s[3] | 1).wrapping_add(s[4]);
        }
    }
    let mut out = Vec::with_capacity(w * h / 4 + 64);
    let mut enc = png::Encoder::new(&mut out, size.width, size.height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    // Writing to memory fails only on a header the sizes above cannot make.
    if let Ok(mut writer) = enc.write_header() {
        let _ = writer.write_image_data(&pixels);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_are_valid_pngs_of_the_size_asked_and_differ_by_seed() {
        let size = ImageSize::parse("300x100").unwrap();
        let a = png(size, 1);
        let decoder = png::Decoder::new(std::io::Cursor::new(&a));
        let reader = decoder.read_info().unwrap();
        assert_eq!((reader.info().width, reader.info().height), (300, 100));
        assert_ne!(a, png(size, 2));
        assert_eq!(a, png(size, 1));
        let urls = Images { count: 2, size }.data_urls(7);
        assert_eq!(urls.len(), 2);
        assert_ne!(urls[0], urls[1]);
        assert!(urls[0].starts_with("data:image/png;base64,iVBORw0KGgo"));
    }

    #[test]
    fn a_bad_size_is_one_line_naming_the_flag() {
        for bad in ["512", "0x5", "ax5", "9000x10", "5x"] {
            let e = ImageSize::parse(bad).unwrap_err();
            assert!(
                e.starts_with(&format!("--image-size {bad}: give WIDTHxHEIGHT")),
                "{e}"
            );
        }
    }
}
