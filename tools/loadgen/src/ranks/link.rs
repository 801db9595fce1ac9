//! The connections of a loadgen job: a star around rank 0, built by the shared rendezvous
//! ([`servbench::ranks`]), then framed messages both ways. Each connection has a reader
//! thread; one thread sends a heartbeat on every connection each second, so a rank that dies
//! (its connection closes) or goes silent (stopped, hung, cut off: nothing for
//! [`SILENCE`]) is noticed within seconds whatever the others are doing. Noticing one pulls
//! the run's stop on this rank and, on rank 0, tells every other rank why: the point fails
//! everywhere, naming the rank, and nothing waits for it.
//!
//! Under `--rank-output rank0` the other ranks' records travel here as messages too, and rank
//! 0's reader threads write them to its stdout, each line whole.

use crate::stop::Stop;
use serde::{Deserialize, Serialize};
use servbench::cli;
use servbench::jsonl::RecordWriter;
use servbench::ranks::clock::{self, Offset};
use servbench::ranks::frame::{self, FrameError};
use servbench::ranks::rendezvous::{self, Hello, Protocol, remaining};
use servbench::ranks::{Identity, hostname};
use std::io::{self, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

pub const PROTOCOL: Protocol = Protocol {
    magic: *b"LGN1",
    tool: "loadgen",
    args_hint: "url, load, lengths, duration, seed, ...; only --label, --threads and the rank flags may differ",
};

/// Message tags after the greeting.
pub mod tag {
    /// Rank 0 to all: the target and the upstream labels.
    pub const JOB: u8 = 10;
    /// Both ways once, after the greeting: who is at the other end (host, pid).
    pub const INFO: u8 = 11;
    /// To rank 0: ready for synchronization `seq`.
    pub const READY: u8 = 12;
    /// Rank 0 to all: `seq` starts at this instant (rank 0's clock).
    pub const START: u8 = 13;
    /// To rank 0: this rank's summary of a point.
    pub const SUMMARY: u8 = 14;
    /// Rank 0 to all: the merged summary of a point.
    pub const MERGED: u8 = 15;
    /// To rank 0: a record line for rank 0's stdout.
    pub const RECORD: u8 = 16;
    /// Both ways: still here.
    pub const BEAT: u8 = 17;
    /// Both ways: the sender failed, or (from rank 0) another rank did: why.
    pub const FAIL: u8 = 18;
    /// To rank 0: everything sent, exiting.
    pub const BYE: u8 = 19;
}

const BEAT_EVERY: Duration = Duration::from_secs(1);
/// A rank heard nothing from for this long counts as gone.
pub const SILENCE: Duration = Duration::from_secs(10);
/// Largest message: a record line (a request with a long ITL list) or a summary.
const MAX_MESSAGE: usize = 64 << 20;
const CLOCK_SAMPLES: usize = 16;

/// A message from another rank, or word that one is gone.
#[derive(Debug)]
pub enum Inbound {
    Msg {
        from: usize,
        tag: u8,
        body: Vec<u8>,
    },
    /// A rank died, went silent or failed: the message names it.
    Lost(String),
}

#[derive(Serialize, Deserialize)]
struct Info {
    host: String,
    pid: u32,
}

/// This rank's side of the job's connections, shared by its threads.
pub struct Link {
    pub rank: usize,
    pub world: usize,
    /// How each rank is named in messages (`rank 2 (pid 4242 on b07)`); rank 0 knows all,
    /// the others know rank 0 and themselves.
    names: Vec<String>,
    writers: Vec<Option<Mutex<TcpStream>>>,
    failure: Mutex<Option<String>>,
    stop: Stop,
    /// Set at the end of the run: heartbeats stop, a closing peer is no failure.
    done: AtomicBool,
    readers: Mutex<Vec<JoinHandle<()>>>,
}

/// What [`connect`] gives: the link, its inbox, this rank's clock against rank 0's.
pub struct Connected {
    pub link: Arc<Link>,
    pub inbox: UnboundedReceiver<Inbound>,
    pub clock: Offset,
}

/// Joins the job: the rendezvous, who is who, the clock offset; then starts the reader and
/// heartbeat threads. `forward`: rank 0 writes the records other ranks send to its stdout.
pub fn connect(
    id: &Identity,
    fingerprint: u64,
    timeout: Duration,
    stop: Stop,
    forward: bool,
) -> anyhow::Result<Connected> {
    let deadline = Instant::now() + timeout;
    let me = Info {
        host: hostname(),
        pid: std::process::id(),
    };
    let mut names: Vec<String> = (0..id.world).map(|r| format!("rank {r}")).collect();
    names[id.rank] = name(id.rank, &me);
    let mut streams: Vec<Option<TcpStream>> = (0..id.world).map(|_| None).collect();
    let mut offset = Offset::ZERO;
    let info = serde_json::to_vec(&me)?;
    if id.rank == 0 {
        let listener = rendezvous::listen(&id.coordinator)?;
        let joined = rendezvous::gather(&listener, id.world, &PROTOCOL, fingerprint, deadline)?;
        for j in joined.into_iter().flatten() {
            let r = j.hello.rank;
            let mut s = j.stream;
            s.set_read_timeout(Some(remaining(deadline)))?;
            frame::write_frame(&mut s, tag::INFO, &info)?;
            let theirs = read_info(&mut s).map_err(|e| anyhow::anyhow!("rank {r}: {e}"))?;
            names[r] = name(r, &theirs);
            clock::answer(&mut s, CLOCK_SAMPLES)
                .map_err(|e| anyhow::anyhow!("{}: clock probe failed: {e}", names[r]))?;
            streams[r] = Some(s);
        }
    } else {
        let mut s = rendezvous::connect(id.rank, &id.coordinator, deadline)?;
        let hello = Hello {
            rank: id.rank,
            world: id.world,
            fingerprint,
            port: 0,
        };
        rendezvous::greet(&mut s, &PROTOCOL, &hello)?;
        s.set_read_timeout(Some(remaining(deadline)))?;
        let root = read_info(&mut s).map_err(|e| {
            anyhow::anyhow!(
                "rank {}: rank 0 closed the rendezvous before every rank joined (see its error): {e}",
                id.rank
            )
        })?;
        names[0] = name(0, &root);
        frame::write_frame(&mut s, tag::INFO, &info)?;
        offset = clock::measure(&mut s, CLOCK_SAMPLES)
            .map_err(|e| anyhow::anyhow!("{}: clock probe failed: {e}", names[0]))?;
        streams[0] = Some(s);
    }
    let (tx, inbox) = unbounded_channel();
    let mut writers = Vec::with_capacity(id.world);
    let mut readers = Vec::new();
    for s in &streams {
        match s {
            Some(s) => {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(SILENCE))?;
                writers.push(Some(Mutex::new(s.try_clone()?)));
            }
            None => writers.push(None),
        }
    }
    let link = Arc::new(Link {
        rank: id.rank,
        world: id.world,
        names,
        writers,
        failure: Mutex::new(None),
        stop,
        done: AtomicBool::new(false),
        readers: Mutex::new(Vec::new()),
    });
    for (peer, s) in streams.into_iter().enumerate() {
        if let Some(s) = s {
            let (link, tx) = (link.clone(), tx.clone());
            readers.push(std::thread::spawn(move || {
                read_loop(&link, peer, s, &tx, forward)
            }));
        }
    }
    *lock(&link.readers) = readers;
    let beat = link.clone();
    std::thread::spawn(move || {
        while !beat.done.load(Ordering::SeqCst) {
            for peer in 0..beat.world {
                // A failed beat shows up on the reader side as a closed connection.
                let _ = beat.send(peer, tag::BEAT, &[]);
            }
            std::thread::sleep(BEAT_EVERY);
        }
    });
    Ok(Connected {
        link,
        inbox,
        clock: offset,
    })
}

fn name(rank: usize, info: &Info) -> String {
    format!("rank {rank} (pid {} on {})", info.pid, info.host)
}

fn read_info(s: &mut TcpStream) -> anyhow::Result<Info> {
    let (t, body) = frame::read_frame(s, 4096)?;
    if t != tag::INFO {
        anyhow::bail!("expected who is at the other end, got message {t}");
    }
    Ok(serde_json::from_slice(&body)?)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One connection's reader: messages to the inbox, records (rank 0) to stdout, heartbeats
/// dropped, a closed or silent peer reported once.
fn read_loop(
    link: &Link,
    peer: usize,
    mut s: TcpStream,
    tx: &UnboundedSender<Inbound>,
    forward: bool,
) {
    let mut out = RecordWriter::stdout();
    let mut said_bye = false;
    loop {
        let (t, body) = match frame::read_frame(&mut s, MAX_MESSAGE) {
            Ok(m) => m,
            Err(_) if said_bye || link.done.load(Ordering::SeqCst) => return,
            Err(FrameError::Closed) => {
                return link.lose(peer, "closed its connection (it exited or was killed)", tx);
            }
            Err(e) if e.is_timeout() => {
                let why = format!(
                    "sent nothing for {} s (stopped, hung, or the network between is down)",
                    SILENCE.as_secs()
                );
                return link.lose(peer, &why, tx);
            }
            Err(e) => return link.lose(peer, &format!("connection failed: {e}"), tx),
        };
        match t {
            tag::BEAT => {}
            tag::BYE => said_bye = true,
            tag::RECORD if forward && link.rank == 0 => {
                let line = String::from_utf8_lossy(&body);
                if let Err(e) = out.write_raw(line.trim_end_matches('\n')) {
                    if e.is_closed() {
                        // Nobody reads rank 0's output any more: stop as a closed stdout does.
                        link.stop.abort();
                    } else {
                        link.fail(format!(
                            "rank 0 cannot write the records of {}: {e}",
                            link.names[peer]
                        ));
                    }
                }
            }
            tag::FAIL => {
                let why = String::from_utf8_lossy(&body).into_owned();
                return link.lost(why, peer, tx);
            }
            _ => {
                let _ = tx.send(Inbound::Msg {
                    from: peer,
                    tag: t,
                    body,
                });
            }
        }
    }
}

impl Link {
    pub fn name(&self, rank: usize) -> &str {
        &self.names[rank]
    }

    /// Sends one message to `peer` (a no-op for itself).
    pub fn send(&self, peer: usize, t: u8, body: &[u8]) -> io::Result<()> {
        let Some(w) = &self.writers[peer] else {
            return Ok(());
        };
        frame::write_frame(&mut *lock(w), t, body)
    }

    /// Sends to every rank but this one.
    pub fn broadcast(&self, t: u8, body: &[u8]) -> io::Result<()> {
        for peer in 0..self.world {
            self.send(peer, t, body)?;
        }
        Ok(())
    }

    /// The first failure noticed (a rank gone or failed), naming the rank.
    pub fn failed(&self) -> Option<String> {
        lock(&self.failure).clone()
    }

    /// `peer` is gone for `why`.
    fn lose(&self, peer: usize, why: &str, tx: &UnboundedSender<Inbound>) {
        self.lost(format!("{} {why}", self.names[peer]), peer, tx)
    }

    fn lost(&self, msg: String, peer: usize, tx: &UnboundedSender<Inbound>) {
        if self.done.load(Ordering::SeqCst) {
            return;
        }
        self.fail_except(msg.clone(), Some(peer));
        let _ = tx.send(Inbound::Lost(msg));
    }

    /// This rank's run cannot go on: every other rank hears why (rank 0 passes it on).
    pub fn fail(&self, msg: String) {
        self.fail_except(msg, None)
    }

    fn fail_except(&self, msg: String, gone: Option<usize>) {
        {
            let mut f = lock(&self.failure);
            if f.is_some() {
                return;
            }
            *f = Some(msg.clone());
        }
        // The ranks still there stop too; rank 0 relays, so every rank learns the cause.
        for peer in (0..self.world).filter(|p| Some(*p) != gone) {
            let _ = self.send(peer, tag::FAIL, msg.as_bytes());
        }
        self.stop.stop();
    }

    /// The end of this rank's run. Others: tell rank 0 everything was sent. Rank 0: wait
    /// (at most `wait`) until every other rank has said so or is gone, so their records are
    /// all written before rank 0 exits.
    pub fn finish(&self, wait: Duration) {
        if self.rank != 0 {
            let _ = self.send(0, tag::BYE, &[]);
            self.done.store(true, Ordering::SeqCst);
            if let Some(w) = &self.writers[0] {
                let _ = lock(w).shutdown(Shutdown::Write);
            }
            return;
        }
        let until = Instant::now() + wait;
        let readers = std::mem::take(&mut *lock(&self.readers));
        for r in readers {
            while !r.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(10));
            }
            if r.is_finished() {
                let _ = r.join();
            }
        }
        self.done.store(true, Ordering::SeqCst);
    }
}

/// `--rank-output rank0`, on the other ranks: the run's records go to rank 0 as messages,
/// one per line (the record writer flushes after each line).
pub struct Sink {
    link: Arc<Link>,
    line: Vec<u8>,
}

impl Sink {
    pub fn new(link: Arc<Link>) -> Sink {
        Sink {
            link,
            line: Vec::with_capacity(4096),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(b);
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.line.is_empty() {
            return Ok(());
        }
        let sent = self.link.send(0, tag::RECORD, &self.line);
        self.line.clear();
        // Not a broken pipe: a rank whose records cannot reach rank 0 failed, it did not end quietly.
        sent.map_err(|e| {
            io::Error::other(format!("records cannot reach {}: {e}", self.link.name(0)))
        })
    }
}

/// How long rank 0 waits for the others' last records at the end (they finish the same point).
pub fn finish_wait(grace: Duration) -> Duration {
    grace + SILENCE
}

/// A usage-or-failure line for a rank that cannot join.
pub fn join_error(rank: usize, err: anyhow::Error) -> anyhow::Error {
    cli::failure(format!("rank {rank}: {err:#}"))
}
