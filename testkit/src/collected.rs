//! A child's output pipe read on a thread of its own, its text so far at hand: a test waits
//! for a line (a tool saying it caught a signal) before its next step, instead of sleeping.

use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Collected {
    text: Arc<Mutex<Vec<u8>>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Collected {
    /// Starts reading `pipe` (a child's stdout or stderr) to its end.
    pub fn start(mut pipe: impl Read + Send + 'static) -> Collected {
        let text = Arc::new(Mutex::new(Vec::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Collected {
            text,
            reader: Some(reader),
        }
    }

    /// The text read so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.text.lock().unwrap()).into_owned()
    }

    /// Waits until the text holds `needle`; panics with the text past `limit`.
    pub fn wait_for(&self, needle: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.text().contains(needle) {
            assert!(
                Instant::now() < end,
                "{needle:?} never came within {limit:?}; got: {}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Everything, once the pipe ended (the child exited and no one else holds the pipe).
    pub fn finish(mut self) -> String {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        self.text()
    }
}
