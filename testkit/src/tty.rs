//! A terminal of its own for tests of what a user types: an interactive bash in a tmux pane
//! (`scripts/setup/tmux.sh` installs tmux), on a tmux server of the test's own socket. A
//! command line typed there runs as a job in the terminal's foreground process group, and
//! [`Tty::ctrl_c`] is the key press: the terminal sends SIGINT to that whole group, exactly as
//! when a user presses Ctrl-C. The tmux server (and the shell in it) ends with the guard.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

static SOCKETS: AtomicUsize = AtomicUsize::new(0);

/// One terminal: a tmux server on a socket of its own, one pane running `bash`, its working
/// directory a fresh temporary directory.
pub struct Tty {
    tmux: String,
    socket: String,
    dir: tempfile::TempDir,
}

impl Tty {
    /// Starts the terminal (200 columns, so no table line wraps) with the workspace's binaries
    /// first on PATH and `env` set.
    pub fn start(env: &[(&str, &str)]) -> Tty {
        let tmux = crate::setup_env("SERVBENCH_TMUX", "tmux");
        let socket = format!(
            "servbench-test-{}-{}",
            std::process::id(),
            SOCKETS.fetch_add(1, Ordering::SeqCst)
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let path = format!(
            "{}:{}",
            crate::bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let tty = Tty { tmux, socket, dir };
        let status = tty
            .command()
            .args(["new-session", "-d", "-s", "t", "-x", "200", "-y", "50"])
            .arg("-c")
            .arg(tty.dir.path())
            .args(["bash", "--norc", "--noprofile"])
            .env("PATH", path)
            .env("PS1", "$ ")
            .envs(env.iter().copied())
            .status()
            .expect("run tmux");
        assert!(status.success(), "tmux new-session failed");
        // History for the whole run: the table is read back from the terminal's scrollback.
        tty.tmux(&["set-option", "-t", "t", "history-limit", "10000"]);
        tty
    }

    fn command(&self) -> Command {
        let mut c = Command::new(&self.tmux);
        c.args(["-L", &self.socket, "-f", "/dev/null"])
            .stdin(Stdio::null());
        c
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The terminal's working directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Types `line` and Enter, as a user would.
    pub fn type_line(&self, line: &str) {
        self.tmux(&["send-keys", "-t", "t", "-l", line]);
        self.tmux(&["send-keys", "-t", "t", "Enter"]);
    }

    /// Presses Ctrl-C: the terminal sends SIGINT to its foreground process group.
    pub fn ctrl_c(&self) {
        self.tmux(&["send-keys", "-t", "t", "C-c"]);
    }

    /// Everything the terminal shows and showed (wrapped lines joined).
    pub fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-"])
    }

    /// Waits until the terminal shows `text`; panics with the screen past `limit`.
    pub fn wait_for(&self, text: &str, limit: Duration) {
        let end = Instant::now() + limit;
        while !self.screen().contains(text) {
            assert!(
                Instant::now() < end,
                "the terminal never showed {text:?} within {limit:?}:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the file `name` in the working directory holds a whole line; its text.
    pub fn wait_file(&self, name: &str, limit: Duration) -> String {
        let path: PathBuf = self.dir.path().join(name);
        let end = Instant::now() + limit;
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && text.ends_with('\n')
            {
                return text;
            }
            assert!(
                Instant::now() < end,
                "{name} was not written within {limit:?}; the terminal:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Types `pipeline` followed by the capture of every stage's exit code (bash's
    /// `PIPESTATUS`) into a file, read back with [`Tty::exit_codes`].
    pub fn run_pipeline(&self, pipeline: &str) {
        self.type_line(&format!(
            "{pipeline}; echo \"${{PIPESTATUS[*]}}\" > exit-codes"
        ));
    }

    /// The exit codes of the pipeline [`Tty::run_pipeline`] typed, once it ended.
    pub fn exit_codes(&self, limit: Duration) -> Vec<i32> {
        self.wait_file("exit-codes", limit)
            .split_whitespace()
            .map(|c| c.parse().expect("an exit code"))
            .collect()
    }
}

impl Drop for Tty {
    fn drop(&mut self) {
        // Ends the shell and anything still running in the terminal (SIGHUP to its group).
        let _ = self.command().arg("kill-server").status();
    }
}
