//! A program stand-in for the tests: a shell script written as `DIR/bin/NAME` in a temporary
//! directory. Put [`StandIn::bin`] first on PATH ([`StandIn::path`]) so the machine's own program
//! is never asked, or name [`StandIn::program`] where PATH cannot be set (over SSH: the loopback
//! sshd is this machine).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

pub struct StandIn {
    pub dir: tempfile::TempDir,
    name: &'static str,
}

impl StandIn {
    /// `script` as `bin/name` in a fresh temporary directory.
    pub fn new(name: &'static str, script: &str) -> StandIn {
        StandIn::in_dir(tempfile::tempdir().expect("temp dir"), name, script)
    }

    /// `script` as `bin/name` in `dir` (for a script that names other files of the directory).
    pub fn in_dir(dir: tempfile::TempDir, name: &'static str, script: &str) -> StandIn {
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).expect("bin dir");
        let program = bin.join(name);
        std::fs::write(&program, script).expect("write the stand-in");
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        StandIn { dir, name }
    }

    pub fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    /// Its path.
    pub fn program(&self) -> String {
        self.bin().join(self.name).to_string_lossy().into_owned()
    }

    /// PATH with the stand-in first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.bin().display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }
}
