//! A hostile stand-in for an OpenAI-style server, for answers no real engine of ours sends:
//! each POST is answered by a test's own function, as raw bytes, and the connection closed
//! (so a stream's end is the socket's). `/v1/models` answers one model; other GETs 404.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// How one POST is answered.
pub enum Answer {
    /// A JSON body with this status.
    Json(u16, String),
    /// SSE: these lines are written as they are (each ends with `\n`), then the socket closed.
    Stream(Vec<String>),
    /// SSE: this line written again and again until the client goes away.
    Endless(String),
    /// SSE: these lines with this pause before each.
    Paced(Vec<String>, std::time::Duration),
    /// The whole answer as these bytes (status line, head and body), then the socket closed.
    Raw(Vec<u8>),
}

pub struct Hostile {
    port: u16,
}

impl Hostile {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// Serves on a free loopback port until the test process ends; `answer` gets each POST's path
/// and JSON body.
pub fn start(answer: fn(&str, &serde_json::Value) -> Answer) -> Hostile {
    start_with_gets(answer, |_| None)
}

/// A GET's answer by its path (status, JSON body); `None`: 404 (`/v1/models` aside).
pub type Gets = fn(&str) -> Option<(u16, String)>;

/// [`start`], with GETs answered by `gets` too.
pub fn start_with_gets(answer: fn(&str, &serde_json::Value) -> Answer, gets: Gets) -> Hostile {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || serve(conn, answer, gets));
        }
    });
    Hostile { port }
}

fn serve(conn: TcpStream, answer: fn(&str, &serde_json::Value) -> Answer, gets: Gets) {
    let mut out = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    let mut first = String::new();
    if r.read_line(&mut first).is_err() {
        return;
    }
    let mut len = 0usize;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len.min(64 << 20)];
    let _ = r.read_exact(&mut body);
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let json = |status: u16, body: &str| {
        format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    if method != "POST" {
        let reply = if path == "/v1/models" {
            json(200, r#"{"data":[{"id":"m","max_model_len":131072}]}"#)
        } else if let Some((status, body)) = gets(path) {
            json(status, &body)
        } else {
            json(404, "{}")
        };
        let _ = out.write_all(reply.as_bytes());
        return;
    }
    let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    const SSE: &str =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
    match answer(path, &req) {
        Answer::Json(status, body) => {
            let _ = out.write_all(json(status, &body).as_bytes());
        }
        Answer::Stream(lines) => {
            let _ = out.write_all(SSE.as_bytes());
            for l in lines {
                let _ = out.write_all(format!("{l}\n").as_bytes());
            }
        }
        Answer::Paced(lines, pause) => {
            let _ = out.write_all(SSE.as_bytes());
            for l in lines {
                std::thread::sleep(pause);
                let _ = out.write_all(format!("{l}\n").as_bytes());
            }
        }
        Answer::Raw(bytes) => {
            let _ = out.write_all(&bytes);
        }
        Answer::Endless(line) => {
            let _ = out.write_all(SSE.as_bytes());
            let line = format!("{line}\n\n");
            while out.write_all(line.as_bytes()).is_ok() {}
        }
    }
}

/// A chat or completions chunk carrying `text` (by the request's API).
pub fn chunk(req: &serde_json::Value, text: &str) -> String {
    let choice = if req.get("messages").is_some() {
        serde_json::json!({"index": 0, "delta": {"content": text}})
    } else {
        serde_json::json!({"index": 0, "text": text})
    };
    format!("data: {}\n", serde_json::json!({"choices": [choice]}))
}
