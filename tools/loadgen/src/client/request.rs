//! One streaming request, timed: chunks are timestamped the moment their bytes are handed to
//! us, classified (content, reasoning, usage, error), and turned into the `request` record.
//! A non-streaming one (`--no-stream`) is timed at the end of its answer, tokens from its usage.

use crate::client::http::{
    Failure, Pool, encoding_failure, hyper_failure, read_whole, status_failure,
};
use crate::client::sse::{ChunkReader, Field, SseParser};
use crate::client::wire::Api;
use bytes::Bytes;
use http_body_util::BodyExt;
use servbench::record::{ErrorClass, PointKey, RequestError, RequestRecord, TokenSource};
use std::time::Instant;

/// What happened to one request, as raw instants.
#[derive(Debug)]
pub struct Outcome {
    pub first_content: Option<Instant>,
    pub first_reasoning: Option<Instant>,
    /// The first chunk of the answer itself (content or a tool call), reasoning not counted.
    pub first_answer: Option<Instant>,
    pub last_content: Option<Instant>,
    pub itl_ms: Vec<f64>,
    pub chunks: u32,
    /// Chunks that carried reasoning.
    pub reasoning_chunks: u32,
    pub usage_completion: Option<u32>,
    pub usage_prompt: Option<u32>,
    /// `usage.prompt_tokens_details.cached_tokens`, where the server reports it.
    pub cached_tokens: Option<u32>,
    /// The engine's own timing, from the answer or the stream's chunk that carried it.
    pub server_timing: Option<servbench::record::ServerTiming>,
    /// The answer's `id`, from the whole answer or the stream's first chunk.
    pub answer_id: Option<String>,
    /// The reply's text, collected only when this starts as `Some` (conversations resend it).
    pub reply: Option<String>,
    /// Where each content chunk's text ends in `reply` (bytes), kept only when this starts as
    /// `Some` (`--record-text`): the pieces a record carries ([`Outcome::pieces`]).
    pub piece_ends: Option<Vec<u32>>,
    pub end: Instant,
    pub failure: Option<Failure>,
    /// Abandoned on purpose this long after it left (`--cancel-rate`): not a failure.
    pub abandoned_after: Option<std::time::Duration>,
    /// Embeddings: the vectors the answer carried.
    pub inputs: Option<u32>,
}

/// Room for the gaps of the first this many tokens is made at once (more grow the list): a
/// request's gaps are one list growing to `max_tokens`, allocated seven times on the way to 256
/// otherwise, while a long `max_tokens` must not reserve memory per request in flight.
const GAPS_RESERVED: u32 = 1024;

impl Outcome {
    /// The outcome of a request asking for `max_tokens`: room made for its gaps.
    pub fn expecting(max_tokens: u32) -> Outcome {
        let room = max_tokens.clamp(1, GAPS_RESERVED) - 1;
        Outcome {
            itl_ms: Vec::with_capacity(room as usize),
            ..Outcome::default()
        }
    }

    /// The outcome of a request whose reply text is kept (`--record-text`, `--eval`), piece
    /// by piece.
    pub fn recording(max_tokens: u32) -> Outcome {
        Outcome {
            reply: Some(String::new()),
            piece_ends: Some(Vec::new()),
            ..Outcome::expecting(max_tokens)
        }
    }

    /// The reply's text so far, where it was kept.
    pub fn reply_text(&self) -> Option<&str> {
        self.reply.as_deref()
    }

    /// The reply's text cut at its chunks' ends, where it was kept piece by piece.
    pub fn pieces(&self) -> Option<Vec<String>> {
        let (text, ends) = (self.reply.as_deref()?, self.piece_ends.as_ref()?);
        let mut start = 0;
        let mut out = Vec::with_capacity(ends.len());
        for &end in ends {
            let end = (end as usize).clamp(start, text.len());
            out.push(text.get(start..end).unwrap_or_default().to_string());
            start = end;
        }
        Some(out)
    }

    /// Marks the end of one content chunk's text in the kept reply.
    fn end_piece(&mut self) {
        if let (Some(reply), Some(ends)) = (&self.reply, self.piece_ends.as_mut()) {
            ends.push(u32::try_from(reply.len()).unwrap_or(u32::MAX));
        }
    }
}

impl Default for Outcome {
    fn default() -> Self {
        Outcome {
            first_content: None,
            first_reasoning: None,
            first_answer: None,
            last_content: None,
            itl_ms: Vec::new(),
            chunks: 0,
            reasoning_chunks: 0,
            usage_completion: None,
            usage_prompt: None,
            cached_tokens: None,
            server_timing: None,
            answer_id: None,
            reply: None,
            piece_ends: None,
            end: Instant::now(),
            failure: None,
            abandoned_after: None,
            inputs: None,
        }
    }
}

/// The longest SSE line held while its end has not arrived: a chunk is a few hundred bytes,
/// and a server that never ends its line must not grow loadgen without end.
const MAX_SSE_LINE_BYTES: usize = 16 << 20;

/// The longest reply a conversation keeps to resend: far above any `max_tokens` a turn asks
/// for (a token is a few bytes), and the bound on a server that ignores `max_tokens`.
pub const MAX_REPLY_BYTES: usize = 16 << 20;

fn reply_too_long() -> Failure {
    Failure::new(
        ErrorClass::Protocol,
        format!(
            "a reply longer than {} MiB: the server ignores max_tokens? (a conversation keeps every reply to resend)",
            MAX_REPLY_BYTES >> 20
        ),
    )
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Sends one request and reads its answer to the end into `o`: a stream, or with `stream`
/// false one whole JSON answer.
pub async fn stream_into(pool: &Pool, api: Api, body: Bytes, stream: bool, o: &mut Outcome) {
    let result = if stream {
        stream_inner(pool, api, body, o).await
    } else {
        whole_inner(pool, api, body, o).await
    };
    o.end = Instant::now();
    if let Err(f) = result {
        o.failure = Some(f);
    }
}

/// A non-streaming request: the whole answer, its `usage` as the token counts.
async fn whole_inner(pool: &Pool, api: Api, body: Bytes, o: &mut Outcome) -> Result<(), Failure> {
    let path = api.path();
    let (resp, conn) = pool
        .send(|| pool.target.request(hyper::Method::POST, path, body.clone()))
        .await?;
    let status = resp.status().as_u16();
    let (head, body) = resp.into_parts();
    let bytes = read_whole(body).await?;
    if !(200..300).contains(&status) {
        return Err(status_failure(status, &head.headers, &bytes));
    }
    if let Some(f) = encoding_failure(&head.headers) {
        return Err(f);
    }
    pool.give_back(conn);
    let v: serde_json::Value = serde_json::from_slice(&bytes).map_err(|e| {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(400)]);
        Failure::new(
            ErrorClass::Protocol,
            format!(
                "malformed JSON answer ({e}): {}",
                servbench::jsonl::excerpt(&text, 120)
            ),
        )
    })?;
    if v.get("error").is_some_and(|e| !e.is_null()) {
        return Err(Failure::new(
            ErrorClass::Protocol,
            format!(
                "error in answer: {}",
                servbench::jsonl::excerpt(&v["error"].to_string(), 200)
            ),
        ));
    }
    // The same rule as a stream's usage: counts that are not token counts (negative,
    // fractional, past u32) make the answer malformed; and without completion tokens a whole
    // answer has no token count at all.
    let answer = api
        .wire()
        .answer(&v, o.reply.as_mut())
        .map_err(|why| Failure::new(ErrorClass::Protocol, why))?;
    let usage = answer.usage;
    if usage.completion_tokens.is_none() {
        return Err(Failure::new(
            ErrorClass::Protocol,
            "answer without usage.completion_tokens: a whole answer has no other token count (stream it instead: drop --no-stream)",
        ));
    }
    o.usage_completion = usage.completion_tokens;
    o.usage_prompt = usage.prompt_tokens;
    o.cached_tokens = usage.cached_tokens;
    o.inputs = answer.inputs;
    o.server_timing = crate::client::server_timing::of_answer(&v);
    o.answer_id = crate::client::server_timing::answer_id(&v);
    // The wire put the answer's text where a conversation (or --record-text) keeps it.
    if o.reply.as_ref().is_some_and(|r| r.len() > MAX_REPLY_BYTES) {
        return Err(reply_too_long());
    }
    if o.reply.is_some() {
        o.end_piece();
    }
    Ok(())
}

async fn stream_inner(pool: &Pool, api: Api, body: Bytes, o: &mut Outcome) -> Result<(), Failure> {
    let (path, wire) = (api.path(), api.wire());
    let (resp, conn) = pool
        .send(|| pool.target.request(hyper::Method::POST, path, body.clone()))
        .await?;
    let status = resp.status().as_u16();
    let (head, mut incoming) = resp.into_parts();
    if !(200..300).contains(&status) {
        let mut excerpt = Vec::new();
        while let Some(Ok(frame)) = incoming.frame().await {
            if let Ok(data) = frame.into_data()
                && excerpt.len() < 4096
            {
                excerpt.extend_from_slice(&data);
            }
        }
        return Err(status_failure(status, &head.headers, &excerpt));
    }
    if let Some(f) = encoding_failure(&head.headers) {
        return Err(f);
    }
    let mut parser = SseParser::default();
    let mut chunks = ChunkReader::default();
    let mut done = false;
    let mut finished = false;
    let mut bad: Option<Failure> = None;
    while let Some(frame) = incoming.frame().await {
        let frame = frame.map_err(|e| hyper_failure(&e))?;
        let now = Instant::now();
        let Ok(data) = frame.into_data() else {
            continue;
        };
        parser.feed(&data, |field| {
            let payload = match field {
                Field::Data(payload) => payload,
                Field::Error(payload) => {
                    let text = String::from_utf8_lossy(payload);
                    bad = Some(Failure::new(
                        ErrorClass::Protocol,
                        format!(
                            "error in stream (an SSE error field or event): {}",
                            servbench::jsonl::excerpt(&text, 200)
                        ),
                    ));
                    return false;
                }
            };
            let (ev, reply_text) = match wire.event(&mut chunks, payload) {
                Ok(c) => (c.event, c.reply),
                Err(why) => {
                    let text = String::from_utf8_lossy(payload);
                    bad = Some(Failure::new(
                        ErrorClass::Protocol,
                        format!(
                            "malformed SSE data ({why}): {}",
                            servbench::jsonl::excerpt(&text, 120)
                        ),
                    ));
                    return false;
                }
            };
            if ev.done {
                done = true;
                return false;
            }
            if o.answer_id.is_none() {
                // Once a request: the engine's own reports name the request by it.
                o.answer_id = crate::client::server_timing::answer_id_of_chunk(payload);
            }
            finished |= ev.finished;
            if ev.error {
                let text = String::from_utf8_lossy(payload);
                bad = Some(Failure::new(
                    ErrorClass::Protocol,
                    format!(
                        "error event in stream: {}",
                        servbench::jsonl::excerpt(&text, 200)
                    ),
                ));
                return false;
            }
            if ev.has_content() {
                if ev.reasoning {
                    o.first_reasoning.get_or_insert(now);
                    o.reasoning_chunks += 1;
                }
                if ev.has_answer() {
                    o.first_answer.get_or_insert(now);
                }
                match o.last_content {
                    None => o.first_content = Some(now),
                    // Chunks of one read share its instant: their gap is 0 without the
                    // arithmetic (most gaps, where a server writes faster than it is read).
                    Some(last) if last == now => o.itl_ms.push(0.0),
                    Some(last) => o.itl_ms.push(ms(now - last)),
                }
                o.last_content = Some(now);
                o.chunks += 1;
                if ev.content
                    && let Some(reply) = o.reply.as_mut()
                {
                    reply_text.append_to(reply);
                    if reply.len() > MAX_REPLY_BYTES {
                        bad = Some(reply_too_long());
                        return false;
                    }
                    o.end_piece();
                }
            }
            if let Some(c) = ev.completion_tokens {
                o.usage_completion = Some(o.usage_completion.map_or(c, |p| p.max(c)));
            }
            if ev.prompt_tokens.is_some() {
                o.usage_prompt = ev.prompt_tokens;
            }
            if ev.cached_tokens.is_some() {
                o.cached_tokens = ev.cached_tokens;
            }
            if ev.server_timing {
                o.server_timing = crate::client::server_timing::of_chunk(payload);
            }
            true
        });
        if bad.is_some() || done {
            break;
        }
        if parser.pending() > MAX_SSE_LINE_BYTES {
            return Err(Failure::new(
                ErrorClass::Protocol,
                format!(
                    "an SSE line longer than {} MiB without its end: not a chunk of this stream",
                    MAX_SSE_LINE_BYTES >> 20
                ),
            ));
        }
    }
    if let Some(f) = bad {
        return Err(f);
    }
    if !done {
        // The body ended cleanly (an error would have returned above). After a
        // finish_reason the answer is whole: some servers never send [DONE].
        if finished {
            pool.give_back(conn);
            return Ok(());
        }
        return Err(Failure::new(
            ErrorClass::Reset,
            "stream ended without data: [DONE] or a finish_reason (incomplete)",
        ));
    }
    // Read the body's end (the terminating chunk) so the connection can be reused.
    loop {
        match incoming.frame().await {
            None => {
                pool.give_back(conn);
                break;
            }
            Some(Ok(_)) => continue,
            Some(Err(_)) => break,
        }
    }
    Ok(())
}

/// Output tokens that were reasoning: `tokens` times the share of `chunks` that reasoned (a
/// chunk is a token with most servers; with several a chunk, the share still holds).
fn reasoning_share(tokens: u32, reasoning_chunks: u32, chunks: u32) -> u32 {
    if chunks == 0 {
        return 0;
    }
    let share = u64::from(tokens) * u64::from(reasoning_chunks.min(chunks)) / u64::from(chunks);
    share as u32
}

/// Everything the record of one request needs besides its outcome.
pub struct RequestMeta {
    pub point: PointKey,
    pub id: u64,
    pub point_start: Instant,
    pub intended: Instant,
    pub dispatched: Instant,
    pub prompt_tokens_target: Option<u32>,
    pub max_tokens: Option<u32>,
    /// `--images`: how many the request carried.
    pub images: Option<u32>,
    /// Conversations: (session, turn from 1).
    pub turn: Option<(u64, u32)>,
}

/// The `request` record: every time from the intended send time.
pub fn to_record(
    meta: RequestMeta,
    o: Outcome,
    labels: &servbench::record::Labels,
) -> RequestRecord {
    let since = |t: Instant| ms(t.saturating_duration_since(meta.intended));
    let ttft_ms = o.first_content.map(since);
    let ok = o.failure.is_none() && o.abandoned_after.is_none();
    // A failed or abandoned request's end is when it stopped, not its last token.
    let e2e_ms = Some(since(o.last_content.filter(|_| ok).unwrap_or(o.end)));
    let (output_tokens, source, from_chunks) = match o.usage_completion {
        Some(u) => (u, TokenSource::Usage, (u != o.chunks).then_some(o.chunks)),
        None => (o.chunks, TokenSource::Chunks, None),
    };
    let reasoned = o.reasoning_chunks > 0;
    let output_pieces = o.pieces();
    let tpot_ms = match (ok, ttft_ms, e2e_ms) {
        (true, Some(t), Some(e)) if output_tokens > 1 => {
            Some((e - t) / f64::from(output_tokens - 1))
        }
        _ => None,
    };
    let started = RequestRecord::started(
        labels.clone(),
        meta.point,
        meta.id,
        ms(meta.intended.saturating_duration_since(meta.point_start)),
        ms(meta.dispatched.saturating_duration_since(meta.intended)),
    );
    RequestRecord {
        ttft_ms,
        ttft_reasoning_ms: o.first_reasoning.map(since),
        ttfo_ms: o.first_answer.filter(|_| reasoned).map(since),
        e2e_ms,
        tpot_ms,
        itl_ms: o.itl_ms,
        chunks: o.chunks,
        output_tokens,
        output_tokens_source: (o.chunks > 0 || o.usage_completion.is_some()).then_some(source),
        output_tokens_chunks: from_chunks,
        reasoning_tokens: reasoned
            .then(|| reasoning_share(output_tokens, o.reasoning_chunks, o.chunks)),
        prompt_tokens: o.usage_prompt,
        prompt_tokens_target: meta.prompt_tokens_target,
        max_tokens: meta.max_tokens,
        error: o.failure.map(|f| RequestError {
            class: f.class,
            message: f.message,
            http_status: f.http_status,
        }),
        cancelled_after_ms: o.abandoned_after.map(ms),
        inputs: o.inputs,
        images: meta.images,
        session: meta.turn.map(|t| t.0),
        turn: meta.turn.map(|t| t.1),
        cached_tokens: o.cached_tokens,
        server_timing: o.server_timing,
        output_pieces,
        response_id: o.answer_id,
        ..started
    }
}
