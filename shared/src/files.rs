//! Reading the files that flags name (`--extra-body @FILE`, `--trace`, `--prompts`,
//! `--cacert`, `--comm-from`, card files), each within a bound of its kind: a wrong file given
//! by mistake (`--extra-body @model.safetensors`, `/dev/zero`) is one error line naming the
//! file and the bound, never a read until memory runs out.
//!
//! Bounds ([`FileKind::max_bytes`] for the whole file, [`FileKind::max_line_bytes`] for one
//! line of a line-oriented file) sit far above any real file of the kind and far below the
//! machine's memory. A regular file is measured before it is read; anything else (a pipe, a
//! device) is read through the bound. Text is UTF-8: a line that is not is named by its
//! number. A UTF-8 byte-order mark at the start (as Excel and Notepad write) is skipped.

use std::io::{BufRead, BufReader, Read};

/// What a file given as a flag holds; each kind has its own bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// A JSON request body (`--extra-body @FILE`).
    RequestBody,
    /// PEM certificates (`--cacert`).
    Certificates,
    /// A request trace (`--trace`): JSON lines or CSV.
    Trace,
    /// Prompts or conversations (`--prompts`): JSON lines, or a ShareGPT JSON list.
    Prompts,
    /// A model or hardware card (JSON).
    Card,
}

const MIB: u64 = 1 << 20;
const BOM: &[u8] = b"\xef\xbb\xbf";

impl FileKind {
    /// The most bytes a file of this kind may have.
    pub fn max_bytes(self) -> u64 {
        match self {
            // A body is a few fields; a CA bundle (Mozilla's) is about 220 KB; a card a page.
            FileKind::RequestBody => 64 * MIB,
            FileKind::Certificates | FileKind::Card => 16 * MIB,
            // Ten million trace rows with hash ids are about 900 MB; ShareGPT V3 is 642 MB.
            FileKind::Trace | FileKind::Prompts => 2048 * MIB,
        }
    }

    /// The longest line of a line-oriented file of this kind.
    pub fn max_line_bytes(self) -> u64 {
        match self {
            // A Mooncake row of 10 M tokens has about 20 000 hash ids (160 KB).
            FileKind::Trace => 16 * MIB,
            // One prompt of 10 M tokens (loadgen's longest) is about 60 MB.
            FileKind::Prompts => 64 * MIB,
            other => other.max_bytes(),
        }
    }

    /// What the file is, for messages.
    pub fn what(self) -> &'static str {
        match self {
            FileKind::RequestBody => "a request body",
            FileKind::Certificates => "a certificate file",
            FileKind::Trace => "a trace",
            FileKind::Prompts => "a prompts file",
            FileKind::Card => "a card",
        }
    }
}

/// `bytes` as people read a bound: `64 MiB`, `2 GiB`.
pub fn size_text(bytes: u64) -> String {
    if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{} MiB", bytes.div_ceil(MIB))
    }
}

fn too_big(path: &str, kind: FileKind) -> String {
    format!(
        "{path}: larger than {} ({} is at most that): is it the right file?",
        size_text(kind.max_bytes()),
        kind.what()
    )
}

fn open(path: &str, kind: FileKind) -> Result<std::fs::File, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    // A regular file is measured before any byte is read; a device or pipe is not.
    if let Ok(meta) = file.metadata()
        && meta.is_file()
        && meta.len() > kind.max_bytes()
    {
        return Err(too_big(path, kind));
    }
    Ok(file)
}

/// The whole file, at most [`FileKind::max_bytes`] of it.
pub fn read(path: &str, kind: FileKind) -> Result<Vec<u8>, String> {
    let file = open(path, kind)?;
    let mut out = Vec::new();
    file.take(kind.max_bytes() + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    if out.len() as u64 > kind.max_bytes() {
        return Err(too_big(path, kind));
    }
    Ok(out)
}

/// The whole file as text (see [`read`]); a byte that is not UTF-8 is named by its line.
pub fn read_text(path: &str, kind: FileKind) -> Result<String, String> {
    text(path, 0, read(path, kind)?)
}

/// `bytes` as UTF-8, without a leading byte-order mark; `first_line` is the line number of
/// the first byte less one.
fn text(path: &str, first_line: usize, bytes: Vec<u8>) -> Result<String, String> {
    match String::from_utf8(bytes) {
        Ok(mut s) => {
            if first_line == 0 && s.starts_with('\u{feff}') {
                s.drain(..'\u{feff}'.len_utf8());
            }
            Ok(s)
        }
        Err(e) => {
            let upto = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = first_line + 1 + bytes[..upto].iter().filter(|&&b| b == b'\n').count();
            let col = upto
                - bytes[..upto]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
            Err(format!(
                "{path}:{line}: not valid UTF-8 (byte {} of the line): save the file as UTF-8",
                col + 1
            ))
        }
    }
}

/// What [`read_line_within`] read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineRead {
    /// The input ended before any byte.
    End,
    /// One line (its newline included, where it had one).
    Line,
    /// More than the bound without a newline: `buf` holds the first bytes, the rest is unread.
    TooLong,
}

/// Reads one line into `buf` (appended), but never more than `max` bytes of it.
pub fn read_line_within(
    reader: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: u64,
) -> std::io::Result<LineRead> {
    let n = reader.by_ref().take(max + 1).read_until(b'\n', buf)? as u64;
    Ok(if n == 0 {
        LineRead::End
    } else if n > max && buf.last() != Some(&b'\n') {
        LineRead::TooLong
    } else {
        LineRead::Line
    })
}

/// The lines of a line-oriented file, each bounded by [`FileKind::max_line_bytes`] and all
/// together by [`FileKind::max_bytes`]: `(line number from 1, text without its line end)`.
/// After an error the iterator ends.
pub struct Lines {
    path: String,
    kind: FileKind,
    reader: BufReader<std::fs::File>,
    line_no: usize,
    total: u64,
    buf: Vec<u8>,
    failed: bool,
}

/// Opens `path` for [`Lines`].
pub fn lines(path: &str, kind: FileKind) -> Result<Lines, String> {
    Ok(Lines {
        path: path.to_string(),
        kind,
        reader: BufReader::with_capacity(1 << 16, open(path, kind)?),
        line_no: 0,
        total: 0,
        buf: Vec::new(),
        failed: false,
    })
}

impl Lines {
    /// The first byte that is not white space, without consuming it (`None`: nothing else).
    /// Tells a JSON list (`[`) from JSON lines before any line is read.
    pub fn peek_non_space(&mut self) -> Result<Option<u8>, String> {
        let mut bom_checked = self.total > 0;
        loop {
            let buf = self
                .reader
                .fill_buf()
                .map_err(|e| format!("cannot read {}: {e}", self.path))?;
            if buf.is_empty() {
                return Ok(None);
            }
            if !bom_checked {
                bom_checked = true;
                if buf.starts_with(BOM) {
                    self.reader.consume(BOM.len());
                    self.total += BOM.len() as u64;
                    continue;
                }
            }
            let space = buf
                .iter()
                .position(|b| !b.is_ascii_whitespace())
                .unwrap_or(buf.len());
            let first = buf.get(space).copied();
            self.line_no += buf[..space].iter().filter(|&&b| b == b'\n').count();
            self.total += space as u64;
            self.reader.consume(space);
            if first.is_some() {
                return Ok(first);
            }
        }
    }

    /// The rest of the file as one text (a JSON list), within the file's bound.
    pub fn rest(mut self) -> Result<String, String> {
        let left = self.kind.max_bytes().saturating_sub(self.total);
        let mut out = Vec::new();
        (&mut self.reader)
            .take(left + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("cannot read {}: {e}", self.path))?;
        if out.len() as u64 > left {
            return Err(too_big(&self.path, self.kind));
        }
        text(&self.path, self.line_no, out)
    }
}

impl Iterator for Lines {
    type Item = Result<(usize, String), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        self.buf.clear();
        let max = self.kind.max_line_bytes();
        let got = read_line_within(&mut self.reader, &mut self.buf, max);
        self.line_no += 1;
        self.total += self.buf.len() as u64;
        let result = match got {
            Ok(LineRead::End) => return None,
            Err(e) => Err(format!("cannot read {}: {e}", self.path)),
            Ok(LineRead::TooLong) => Err(format!(
                "{}:{}: a line longer than {} ({} has none that long): is it the right file?",
                self.path,
                self.line_no,
                size_text(max),
                self.kind.what()
            )),
            Ok(LineRead::Line) if self.total > self.kind.max_bytes() => {
                Err(too_big(&self.path, self.kind))
            }
            Ok(LineRead::Line) => {
                let end = self
                    .buf
                    .iter()
                    .rposition(|b| !matches!(b, b'\n' | b'\r'))
                    .map_or(0, |i| i + 1);
                self.buf.truncate(end);
                text(&self.path, self.line_no - 1, std::mem::take(&mut self.buf))
                    .map(|t| (self.line_no, t))
            }
        };
        self.failed = result.is_err();
        Some(result)
    }
}

#[cfg(test)]
mod tests;
