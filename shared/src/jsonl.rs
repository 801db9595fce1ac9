//! JSON-lines input and output shared by every tool.
//!
//! Input: stdin or files (`-` is stdin), blank lines skipped, each line parsed into a [`Record`].
//! A malformed line is an [`InputError`] naming `source:line` with a short excerpt; by default the
//! reader warns and goes on (a count per source at the end), with `--strict` it is an error (exit 2).
//! A line is at most [`MAX_RECORD_LINE_BYTES`]; a longer one ends its source the same way (a
//! warning, or with `--strict` an error).
//!
//! Output: one record per line, each written whole and flushed at once so a pipeline streams.
//! A write error is an [`OutputError`]: a closed stdout (EPIPE: the next tool exited) is
//! [`OutputError::Closed`], which `cli::main` turns into a quiet exit 0; any other
//! failure (a full disk) is one error line and exit 1.

pub use crate::diag::OutputError;

use crate::diag;
use crate::files::{LineRead, read_line_within};
use crate::record::{Record, RecordKind, SCHEMA_VERSION};
use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where records come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Stdin,
    File(PathBuf),
}

impl Source {
    /// `-` means stdin, anything else a file path.
    pub fn parse(arg: &str) -> Source {
        if arg == "-" {
            Source::Stdin
        } else {
            Source::File(PathBuf::from(arg))
        }
    }

    pub fn name(&self) -> String {
        match self {
            Source::Stdin => "stdin".to_string(),
            Source::File(p) => p.display().to_string(),
        }
    }

    /// Opens the source; a missing or unreadable file is a usage error naming the path.
    pub fn open(&self, strict: bool) -> anyhow::Result<RecordReader<Box<dyn BufRead + Send>>> {
        let reader: Box<dyn BufRead + Send> = match self {
            Source::Stdin => stdin_reader(),
            Source::File(path) => Box::new(BufReader::with_capacity(1 << 16, open_file(path)?)),
        };
        Ok(RecordReader::new(self.name(), reader, strict))
    }
}

/// Stdin for reading records: once the tool caught Ctrl-C ([`crate::interrupt::catch`]), a
/// [`crate::interrupt::DrainingStdin`] (the first signal reads on to the end of the input, a
/// second or the drain bound stops the reading at once); else stdin, buffered.
pub fn stdin_reader() -> Box<dyn BufRead + Send> {
    if crate::interrupt::caught() {
        Box::new(crate::interrupt::DrainingStdin::new())
    } else {
        Box::new(BufReader::with_capacity(1 << 16, io::stdin()))
    }
}

fn open_file(path: &Path) -> anyhow::Result<File> {
    File::open(path).map_err(|e| diag::usage(format!("cannot read {}: {e}", path.display())))
}

/// True when stdin is a pipe or file: tools read upstream records only then, so a tool typed
/// at a terminal does not sit waiting for input.
pub fn stdin_is_piped() -> bool {
    !io::stdin().is_terminal()
}

/// One input line that parsed as a record, with where it came from.
#[derive(Debug, Clone)]
pub struct Line {
    pub source: Arc<str>,
    pub line_no: usize,
    /// The line as read (no newline; valid UTF-8, or it would be malformed): pass-through
    /// writes exactly this.
    pub raw: String,
    pub record: Record,
}

impl Line {
    /// `source:line`, for messages.
    pub fn location(&self) -> String {
        format!("{}:{}", self.source, self.line_no)
    }
}

/// A line that is not a record (or an I/O failure reading the source).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("{source_name}:{line_no}: {reason} (line: {excerpt})")]
    Malformed {
        source_name: String,
        line_no: usize,
        reason: String,
        excerpt: String,
    },
    #[error("{source_name}: read failed: {err}")]
    Io { source_name: String, err: io::Error },
    #[error(
        "{source_name}:{line_no}: a line longer than {} without its end (no record is that long: is it a file of records?)",
        crate::files::size_text(MAX_RECORD_LINE_BYTES)
    )]
    TooLong { source_name: String, line_no: usize },
}

/// The longest record line read: a request record with a million ITL values is about 10 MB.
/// Past it the line is not a record, and the rest of its source is not read (where the next
/// line begins is unknown, and finding it could mean reading without end).
pub const MAX_RECORD_LINE_BYTES: u64 = 256 << 20;

/// How many malformed lines to describe one by one before only counting them.
const MALFORMED_SHOWN: usize = 3;

/// Iterates over the records of one source. Non-strict readers warn about malformed lines
/// (the first few in full, then a count when the reader is dropped) and skip them.
pub struct RecordReader<R: BufRead> {
    source: Arc<str>,
    reader: R,
    line_no: usize,
    strict: bool,
    malformed: usize,
    warned_version: bool,
    buf: Vec<u8>,
    /// A line past [`MAX_RECORD_LINE_BYTES`] ended this source.
    ended: bool,
}

impl<R: BufRead> RecordReader<R> {
    pub fn new(source: String, reader: R, strict: bool) -> Self {
        RecordReader {
            source: source.into(),
            reader,
            line_no: 0,
            strict,
            malformed: 0,
            warned_version: false,
            buf: Vec::new(),
            ended: false,
        }
    }

    /// Malformed lines skipped so far.
    pub fn malformed(&self) -> usize {
        self.malformed
    }

    fn next_line(&mut self) -> Option<Result<Line, InputError>> {
        loop {
            if self.ended {
                return None;
            }
            self.buf.clear();
            // Bytes, not `read_line`: one line that is not UTF-8 is a malformed line like any
            // other, not the end of the input.
            let read = read_line_within(&mut self.reader, &mut self.buf, MAX_RECORD_LINE_BYTES);
            match read {
                Ok(LineRead::End) => return None,
                Ok(LineRead::Line) => {}
                Ok(LineRead::TooLong) => {
                    self.line_no += 1;
                    self.ended = true;
                    let err = InputError::TooLong {
                        source_name: self.source.to_string(),
                        line_no: self.line_no,
                    };
                    if self.strict {
                        return Some(Err(err));
                    }
                    diag::warn(format!("{err}: the rest of {} is not read", self.source));
                    return None;
                }
                Err(err) => {
                    return Some(Err(InputError::Io {
                        source_name: self.source.to_string(),
                        err,
                    }));
                }
            }
            self.line_no += 1;
            let end = self
                .buf
                .iter()
                .rposition(|b| !matches!(b, b'\n' | b'\r'))
                .map_or(0, |i| i + 1);
            let bytes = &self.buf[..end];
            if bytes.trim_ascii().is_empty() {
                continue;
            }
            let parsed = line_text(bytes)
                .and_then(|text| Ok((text, Record::parse(text).map_err(|e| e.to_string())?)));
            match parsed {
                Ok((text, record)) => {
                    if record.version() > SCHEMA_VERSION && !self.warned_version {
                        self.warned_version = true;
                        diag::warn(format!(
                            "{}:{}: record schema v{} is newer than this tool's v{}: fields it does not know are passed through",
                            self.source,
                            self.line_no,
                            record.version(),
                            SCHEMA_VERSION
                        ));
                    }
                    return Some(Ok(Line {
                        source: self.source.clone(),
                        line_no: self.line_no,
                        raw: text.to_string(),
                        record,
                    }));
                }
                Err(reason) => {
                    let err = InputError::Malformed {
                        source_name: self.source.to_string(),
                        line_no: self.line_no,
                        reason,
                        excerpt: excerpt(&String::from_utf8_lossy(bytes), 60),
                    };
                    if self.strict {
                        return Some(Err(err));
                    }
                    self.malformed += 1;
                    if self.malformed <= MALFORMED_SHOWN {
                        diag::warn(format!("skipping malformed line: {err}"));
                    }
                }
            }
        }
    }
}

impl<R: BufRead> Iterator for RecordReader<R> {
    type Item = Result<Line, InputError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.next_line()
    }
}

impl<R: BufRead> Drop for RecordReader<R> {
    fn drop(&mut self) {
        if self.malformed > 0 {
            diag::warn(format!(
                "{}: skipped {} malformed line(s) (--strict makes this an error)",
                self.source, self.malformed
            ));
        }
    }
}

/// A line's bytes as text, or why it is malformed: records are UTF-8 (RFC 8259), and a line
/// that is not is skipped (or, with `--strict`, an error) like any other bad line. Every reader
/// of records goes through this.
pub fn line_text(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes)
        .map_err(|e| format!("not valid UTF-8 (byte {} of the line)", e.valid_up_to() + 1))
}

/// The first `max` characters of a line, for error messages.
pub fn excerpt(text: &str, max: usize) -> String {
    let mut out: String = text.chars().take(max).collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// Reads every source in order, calling `each` per record; usage errors (strict malformed
/// input, unreadable files) end the read.
pub fn read_all(
    sources: &[Source],
    strict: bool,
    mut each: impl FnMut(Line) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for source in sources {
        for line in source.open(strict)? {
            let line = line.map_err(|e| diag::usage(e.to_string()))?;
            each(line)?;
        }
    }
    Ok(())
}

/// What a tool does with an upstream record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Pass it on downstream, unchanged.
    Forward,
    /// The tool used it up (srv-kill consumes `server` records and emits `kill` records).
    Consume,
}

/// The pass-through every tool in the middle of a pipeline does: when stdin is piped, reads
/// upstream records in order, shows each to `each`, and forwards the ones it does not consume,
/// byte for byte. Returns once stdin ends. With stdin a terminal, reads nothing.
pub fn pass_through<W: Write>(
    strict: bool,
    out: &mut RecordWriter<W>,
    mut each: impl FnMut(&Line) -> Disposition,
) -> anyhow::Result<()> {
    if !stdin_is_piped() {
        return Ok(());
    }
    for line in Source::Stdin.open(strict)? {
        let line = line.map_err(|e| diag::usage(e.to_string()))?;
        if each(&line) == Disposition::Forward {
            out.write_raw(&line.raw)?;
        }
    }
    Ok(())
}

/// Upstream records forwarded on a thread of their own while the tool works (srv-launch
/// waiting for readiness, loadgen given `--url`), through a writer of their own: each record is
/// one whole-line write, so lines never interleave with the tool's own records.
pub struct BackgroundPassThrough {
    handle: std::thread::JoinHandle<anyhow::Result<()>>,
    forwarded: Arc<std::sync::atomic::AtomicUsize>,
    stdin_is_file: bool,
}

impl BackgroundPassThrough {
    /// Starts forwarding when stdin is a pipe or a file (not a terminal, socket or device).
    pub fn start(strict: bool) -> Option<BackgroundPassThrough> {
        use std::os::unix::fs::FileTypeExt;
        let kind = std::fs::metadata("/proc/self/fd/0").ok()?.file_type();
        if !stdin_is_piped() || !(kind.is_fifo() || kind.is_file()) {
            return None;
        }
        let forwarded = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = forwarded.clone();
        let handle = std::thread::spawn(move || {
            let mut out = RecordWriter::stdout();
            for line in Source::Stdin.open(strict)? {
                let line = line.map_err(|e| diag::usage(e.to_string()))?;
                out.write_raw(&line.raw)?;
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
            Ok(())
        });
        Some(BackgroundPassThrough {
            handle,
            forwarded,
            stdin_is_file: kind.is_file(),
        })
    }

    /// Waits for the end of upstream input when there is an upstream: a file, or a pipe that
    /// has carried records. A pipe that carried nothing (a script's inherited stdin, an SSH
    /// session's) is not waited for, or the tool could block its own pipeline forever.
    pub fn finish(self) -> anyhow::Result<()> {
        if self.stdin_is_file || self.forwarded.load(std::sync::atomic::Ordering::SeqCst) > 0 {
            self.handle
                .join()
                .map_err(|_| diag::failure("stdin reader panicked"))??;
        }
        Ok(())
    }
}

/// Writes records, one whole line per write, flushed each time.
pub struct RecordWriter<W: Write> {
    out: W,
    line: String,
    /// Set by [`RecordWriter::deferring_errors`]: the first write error, kept for later.
    deferred: Option<Option<OutputError>>,
}

impl RecordWriter<io::Stdout> {
    pub fn stdout() -> Self {
        RecordWriter::new(io::stdout())
    }
}

impl<W: Write> RecordWriter<W> {
    pub fn new(out: W) -> Self {
        RecordWriter {
            out,
            line: String::with_capacity(512),
            deferred: None,
        }
    }

    /// A writer whose job comes first, whatever happens downstream (srv-kill kills even when
    /// its reader is gone or its disk full): a write error is kept, later writes are skipped,
    /// and every write returns `Ok`. [`RecordWriter::finish`] then returns the first error.
    pub fn deferring_errors(mut self) -> Self {
        self.deferred = Some(None);
        self
    }

    /// The first write error a deferring writer kept (`Ok` for any other writer).
    pub fn finish(&mut self) -> Result<(), OutputError> {
        match self.deferred.as_mut().and_then(Option::take) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }

    /// Writes one line exactly as given (pass-through of an upstream record).
    pub fn write_raw(&mut self, raw: &str) -> Result<(), OutputError> {
        self.line.clear();
        self.line.push_str(raw);
        self.line.push('\n');
        self.flush_line()
    }

    pub fn write_record(&mut self, record: &Record) -> Result<(), OutputError> {
        self.line.clear();
        self.line.push_str(&record.to_line());
        self.line.push('\n');
        self.flush_line()
    }

    /// Writes a typed record with `kind` first.
    pub fn emit<T: RecordKind>(&mut self, record: &T) -> Result<(), OutputError> {
        self.line.clear();
        let text = crate::record::to_line_with_kind(record).expect("records serialize");
        self.line.push_str(&text);
        self.line.push('\n');
        self.flush_line()
    }

    fn flush_line(&mut self) -> Result<(), OutputError> {
        if let Some(Some(_)) = &self.deferred {
            return Ok(());
        }
        let result = self
            .out
            .write_all(self.line.as_bytes())
            .and_then(|_| self.out.flush())
            .map_err(OutputError::from_io);
        match (&mut self.deferred, result) {
            (Some(kept), Err(err)) => {
                *kept = Some(err);
                Ok(())
            }
            (_, result) => result,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }
}
