//! `--images N --image-size WxH`: chat requests carry N synthetic PNGs, and their
//! `prompt_tokens` are the text's tokens plus the images' as srv-sim charged them by its model
//! card (qwen2.5-vl-7b: 28 pixels per image token side).

use testkit::{loadgen, of_kind};

#[test]
fn image_tokens_are_what_srv_sim_charged() {
    let (_sim, url) =
        testkit::srv_sim(&["--model", "qwen2.5-vl-7b", "--ttft", "20ms", "--itl", "2ms"]);
    // 448 x 448: 16 x 16 = 256 tokens each; 300 x 100: 11 x 4 = 44.
    for (size, per_image) in [("448x448", 256), ("300x100", 44)] {
        let (code, recs, err) = loadgen(&[
            "--url",
            &url,
            "--api",
            "chat",
            "--images",
            "2",
            "--image-size",
            size,
            "-c",
            "2",
            "-n",
            "6",
            "--input-len",
            "32",
            "--max-tokens",
            "4",
        ])
        .parts();
        assert_eq!(code, Some(0), "{err}");
        let reqs = of_kind(&recs, "request");
        assert_eq!(reqs.len(), 6);
        for r in &reqs {
            assert_eq!(r["images"], 2, "{r}");
            assert_eq!(r["prompt_tokens"], 32 + 2 * per_image, "{size}: {r}");
            assert!(r.get("prompt_tokens_target").is_none(), "{r}");
            assert_eq!(r["output_tokens"], 4, "{r}");
        }
        assert_eq!(of_kind(&recs, "summary")[0]["ok"], 6);
    }
}

#[test]
fn images_outside_chat_or_of_a_bad_size_are_refused() {
    let (_sim, url) = testkit::srv_sim(&["--ttft", "1ms", "--itl", "1ms"]);
    for (args, says) in [
        (
            &["--api", "completions", "--images", "1"][..],
            "--images with --api completions: images go in chat messages",
        ),
        (
            &["--api", "chat", "--images", "1", "--image-size", "0x4"][..],
            "--image-size 0x4: give WIDTHxHEIGHT",
        ),
    ] {
        let mut all = vec!["--url", url.as_str(), "-n", "1"];
        all.extend_from_slice(args);
        let (code, _, err) = loadgen(&all).parts();
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(says), "{err}");
    }
    // A text model's srv-sim refuses the images: one typed error record each.
    let (code, recs, _) = loadgen(&[
        "--url",
        &url,
        "--api",
        "chat",
        "--images",
        "1",
        "-n",
        "2",
        "--max-tokens",
        "2",
    ])
    .parts();
    assert_ne!(code, Some(0));
    for r in of_kind(&recs, "request") {
        assert_eq!(r["error"]["class"], "http_4xx", "{r}");
        let message = r["error"]["message"].as_str().unwrap();
        assert!(message.contains("this model takes no images"), "{message}");
    }
}

/// Text-only and image points are different measurements (the point's `images`): summarize
/// shows them side by side, one row per modality, each with its own figures.
#[test]
fn summarize_breaks_the_figures_down_by_modality() {
    let (_sim, url) =
        testkit::srv_sim(&["--model", "qwen2.5-vl-7b", "--ttft", "20ms", "--itl", "2ms"]);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "--url",
            url.as_str(),
            "--api",
            "chat",
            "-c",
            "2",
            "-n",
            "4",
            "--input-len",
            "16",
            "--max-tokens",
            "4",
        ];
        args.extend_from_slice(extra);
        testkit::loadgen_ok(&args).out()
    };
    let text = run(&[]);
    let images = run(&["--images", "1", "--image-size", "448x448"]);
    let records: Vec<serde_json::Value> = testkit::json_lines(images.as_bytes());
    assert_eq!(of_kind(&records, "summary")[0]["point"]["images"], 1);
    let table = testkit::run::summarize_table(&format!("{text}{images}"));
    let header = table
        .lines()
        .find(|l| l.contains("req/s"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(header.split_whitespace().any(|c| c == "images"), "{table}");
    // One group per modality (a blank line between), and no note comparing one with the other.
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.contains("req/s"))
        .skip(1)
        .take_while(|l| !l.starts_with("note:") && !l.starts_with('#'))
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(rows.len(), 2, "one row per modality: {table}");
    assert_eq!(rows[0].split_whitespace().next(), Some("-"), "{table}");
    assert_eq!(rows[1].split_whitespace().next(), Some("1"), "{table}");
    assert!(!table.contains("throughput falls"), "{table}");
}
