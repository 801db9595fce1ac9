use super::*;

fn write(bytes: &[u8]) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f.txt");
    std::fs::write(&p, bytes).unwrap();
    let p = p.to_str().unwrap().to_string();
    (dir, p)
}

#[test]
fn an_endless_device_is_read_only_up_to_the_bound_of_its_kind() {
    let e = read("/dev/zero", FileKind::Certificates).unwrap_err();
    assert!(e.contains("/dev/zero") && e.contains("16 MiB"), "{e}");
    let mut lines = lines("/dev/zero", FileKind::Trace).unwrap();
    let e = lines.next().unwrap().unwrap_err();
    assert!(e.contains("/dev/zero:1") && e.contains("16 MiB"), "{e}");
    assert!(lines.next().is_none(), "nothing after the error");
}

#[test]
fn a_regular_file_over_the_bound_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.safetensors");
    let f = std::fs::File::create(&p).unwrap();
    // Sparse: the size is there, the bytes are not.
    f.set_len(FileKind::Prompts.max_bytes() + 1).unwrap();
    let p = p.to_str().unwrap();
    for kind in [FileKind::RequestBody, FileKind::Prompts, FileKind::Card] {
        let e = read(p, kind).unwrap_err();
        assert!(e.contains("model.safetensors: larger than"), "{e}");
    }
    assert!(lines(p, FileKind::Trace).is_err());
}

#[test]
fn text_that_is_not_utf8_is_named_by_its_line() {
    let (_d, p) = write(b"a,b\n1,2\n3,\xff4\n");
    let e = read_text(&p, FileKind::Trace).unwrap_err();
    assert!(e.contains("f.txt:3:") && e.contains("byte 3"), "{e}");
    let got: Vec<_> = lines(&p, FileKind::Trace).unwrap().collect();
    assert_eq!(got[1], Ok((2, "1,2".to_string())));
    assert!(got[2].as_ref().unwrap_err().contains("f.txt:3:"), "{got:?}");
}

#[test]
fn a_byte_order_mark_is_skipped() {
    let (_d, p) = write(b"\xef\xbb\xbftimestamp,x\r\n1,2\n");
    assert_eq!(
        read_text(&p, FileKind::Trace).unwrap(),
        "timestamp,x\r\n1,2\n"
    );
    let got: Vec<_> = lines(&p, FileKind::Trace)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(got, vec![(1, "timestamp,x".into()), (2, "1,2".into())]);
    let mut l = lines(&p, FileKind::Trace).unwrap();
    assert_eq!(l.peek_non_space().unwrap(), Some(b't'));
    assert_eq!(l.next().unwrap().unwrap(), (1, "timestamp,x".into()));
}

#[test]
fn peeking_past_blank_lines_keeps_the_line_numbers() {
    let (_d, p) = write(b"\n  \n [\n1,\n\xff]");
    let mut l = lines(&p, FileKind::Prompts).unwrap();
    assert_eq!(l.peek_non_space().unwrap(), Some(b'['));
    let e = l.rest().unwrap_err();
    assert!(e.contains("f.txt:5:"), "{e}");
    let (_d, p) = write(b"\n\n{\"a\":1}\n");
    let mut l = lines(&p, FileKind::Prompts).unwrap();
    assert_eq!(l.peek_non_space().unwrap(), Some(b'{'));
    assert_eq!(l.next().unwrap().unwrap(), (3, "{\"a\":1}".into()));
}

#[test]
fn a_line_is_read_within_its_bound() {
    let mut r = std::io::Cursor::new(b"abcd\nabcdef\nab".to_vec());
    let mut buf = Vec::new();
    assert_eq!(
        read_line_within(&mut r, &mut buf, 4).unwrap(),
        LineRead::Line
    );
    assert_eq!(buf, b"abcd\n");
    buf.clear();
    assert_eq!(
        read_line_within(&mut r, &mut buf, 4).unwrap(),
        LineRead::TooLong
    );
    assert_eq!(buf.len(), 5);
}

#[test]
fn a_record_line_without_end_ends_its_source() {
    use std::io::Read as _;
    let endless = std::io::BufReader::new(
        std::io::Cursor::new(b"{\"kind\":\"x\"}\n".to_vec()).chain(std::io::repeat(b'a')),
    );
    let mut strict = crate::jsonl::RecordReader::new("zero".into(), endless, true);
    assert!(strict.next().unwrap().is_ok());
    let e = strict.next().unwrap().unwrap_err().to_string();
    assert!(e.contains("zero:2: a line longer than 256 MiB"), "{e}");
    assert!(strict.next().is_none(), "nothing after the bound");
    let lenient = crate::jsonl::RecordReader::new(
        "zero".into(),
        std::io::BufReader::new(std::io::repeat(b'a')),
        false,
    );
    assert_eq!(lenient.count(), 0, "warned, and the source ends");
}
