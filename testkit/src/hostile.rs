//! Stand-ins for things outside servbench that lie: an OpenAI-style server whose `/metrics`
//! pages are given (NaN, negative, repeated series, a page that hangs from the Nth scrape),
//! and an nvidia-smi printing given lines (tried-to-break-it-3.md's appendix).

use crate::{Guard, StandIn, free_port, wait_port};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The server: stdlib Python on loopback. `/metrics` answers `DIR/N.prom` at its Nth scrape
/// (counting from 0; past the last page, the last again) and hangs from scrape `HANG_AFTER`
/// on; completions stream `max_tokens` one-word chunks with usage.
const HOSTILE_SERVER: &str = r#"
import json, os, socket, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
DIR = os.environ["PAGES"]
HANG = int(os.environ.get("HANG_AFTER", "-1"))
PAGES = sorted(int(f[:-5]) for f in os.listdir(DIR) if f.endswith(".prom"))
lock = threading.Lock()
scrapes = [0]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def setup(self):
        super().setup(); self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def send(self, code, body, ctype="application/json"):
        self.send_response(code); self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def do_GET(self):
        if self.path == "/v1/models":
            return self.send(200, b'{"data":[{"id":"m","max_model_len":131072}]}')
        if self.path == "/metrics":
            with lock:
                n = scrapes[0]; scrapes[0] += 1
            if 0 <= HANG <= n:
                time.sleep(3600)
            page = max([p for p in PAGES if p <= n] or PAGES[:1])
            return self.send(200, open(os.path.join(DIR, "%d.prom" % page), "rb").read(), "text/plain")
        self.send(404, b"{}")
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/tokenize":
            return self.send(200, json.dumps({"count": len(str(req.get("prompt") or "").split())}).encode())
        n = int(req.get("max_tokens") or 16)
        self.send_response(200); self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked"); self.end_headers()
        def ev(obj):
            d = b"data: " + json.dumps(obj).encode() + b"\n\n"; self.wfile.write(b"%x\r\n%s\r\n" % (len(d), d))
        for i in range(n):
            ev({"choices": [{"index": 0, "text": " t", "finish_reason": "length" if i == n - 1 else None}]})
            time.sleep(0.002)
        ev({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}})
        self.wfile.write(b"14\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
"#;

/// A running [`HOSTILE_SERVER`]; dropped, it is killed.
pub struct HostileServer {
    pub url: String,
    _guard: Guard,
    _dir: tempfile::TempDir,
}

/// Serves `pages` as the successive answers of `/metrics` (the last repeated), hanging from
/// scrape `hang_after` on.
pub fn hostile_server(pages: &[String], hang_after: Option<usize>) -> HostileServer {
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, p) in pages.iter().enumerate() {
        std::fs::write(dir.path().join(format!("{i}.prom")), p).expect("write a page");
    }
    let script = dir.path().join("server.py");
    std::fs::write(&script, HOSTILE_SERVER).expect("write the server");
    let port = free_port();
    let mut c = Command::new("python3");
    c.arg(&script)
        .env("PAGES", dir.path())
        .env("PORT", port.to_string())
        .env(
            "HANG_AFTER",
            hang_after.map_or("-1".to_string(), |n| n.to_string()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let guard = Guard::spawn(c);
    assert!(
        wait_port(port, Duration::from_secs(20)),
        "the hostile server did not listen on {port}"
    );
    HostileServer {
        url: format!("http://127.0.0.1:{port}"),
        _guard: guard,
        _dir: dir,
    }
}

/// An nvidia-smi stand-in that answers every `--query-gpu` with `lines` (CSV, as nvidia-smi's
/// `--format=csv,noheader,nounits`) and anything else with nothing.
pub struct LyingNvidiaSmi(StandIn);

impl LyingNvidiaSmi {
    pub fn new(lines: &[&str]) -> LyingNvidiaSmi {
        let mut script = String::from("#!/bin/sh\ncase \"$*\" in\n  *--query-gpu=*)\n");
        for l in lines {
            script.push_str(&format!("    echo '{l}'\n"));
        }
        script.push_str("    ;;\nesac\n");
        LyingNvidiaSmi(StandIn::new("nvidia-smi", &script))
    }

    pub fn program(&self) -> PathBuf {
        PathBuf::from(self.0.program())
    }
}
