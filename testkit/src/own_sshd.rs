//! An OpenSSH server of a test's own, for host-key cases the shared loopback sshd
//! (scripts/setup/sshd.sh) must not be changed for: several host keys, host certificates. It
//! runs `/usr/sbin/sshd -D` (installed by that script) on a free loopback port with host keys
//! made here by `ssh-keygen`, accepts the shared server's user key, and ends with its guard.

use crate::{Guard, free_port, sshd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A running sshd of the test's own.
pub struct OwnSshd {
    pub port: u16,
    /// `user@127.0.0.1:port`.
    pub target: String,
    /// The user key it accepts (the shared server's).
    pub key: String,
    _guard: Guard,
}

/// Runs `ssh-keygen` with `args`, panicking with its stderr if it fails.
pub fn ssh_keygen(args: &[&str]) {
    let out = Command::new("ssh-keygen")
        .args(args)
        .output()
        .expect("run ssh-keygen");
    assert!(
        out.status.success(),
        "ssh-keygen {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Makes a key pair `dir/name` of `key_type` (`ed25519`, `ecdsa`, `rsa`); returns the private
/// key's path.
pub fn key_pair(dir: &Path, name: &str, key_type: &str) -> PathBuf {
    let path = dir.join(name);
    ssh_keygen(&[
        "-q",
        "-t",
        key_type,
        "-N",
        "",
        "-C",
        name,
        "-f",
        path.to_str().unwrap(),
    ]);
    path
}

/// `keytype base64` of a public key file (`path` + `.pub`).
pub fn public_key_fields(private: &Path) -> String {
    let text = std::fs::read_to_string(format!("{}.pub", private.display())).expect("read .pub");
    text.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

impl OwnSshd {
    /// Starts sshd in `dir` with `host_keys` (private key paths) and `extra` config lines
    /// (e.g. `HostCertificate PATH`); returns once it answers with its SSH banner.
    pub fn start(dir: &Path, host_keys: &[&Path], extra: &[&str]) -> OwnSshd {
        let shared = sshd();
        let port = free_port();
        let authorized = dir.join("authorized_keys");
        std::fs::copy(format!("{}.pub", shared.key), &authorized).expect("copy the user key");
        let mut config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nPidFile none\nAuthorizedKeysFile {}\n\
             PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nAllowUsers {}\nUsePAM no\nStrictModes no\nUseDNS no\n\
             PrintMotd no\nLogLevel VERBOSE\n",
            authorized.display(),
            shared.user
        );
        for k in host_keys {
            config.push_str(&format!("HostKey {}\n", k.display()));
        }
        for line in extra {
            config.push_str(line);
            config.push('\n');
        }
        let config_path = dir.join("sshd_config");
        std::fs::write(&config_path, config).expect("write sshd_config");
        let log = std::fs::File::create(dir.join("sshd.log")).expect("sshd log");
        let mut c = Command::new("/usr/sbin/sshd");
        c.arg("-D")
            .arg("-f")
            .arg(&config_path)
            .arg("-E")
            .arg(dir.join("sshd.log"));
        c.stdout(log.try_clone().unwrap()).stderr(log);
        let guard = Guard::spawn(c);
        assert!(
            banner_within(port, Duration::from_secs(10)),
            "own sshd on port {port} did not start: {}",
            std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
        );
        OwnSshd {
            port,
            target: format!("{}@127.0.0.1:{port}", shared.user),
            key: shared.key,
            _guard: guard,
        }
    }
}

fn banner_within(port: u16, limit: Duration) -> bool {
    use std::io::Read;
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
            let mut buf = [0u8; 8];
            if s.read_exact(&mut buf).is_ok() && buf.starts_with(b"SSH-") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// An sshd of the test's own whose login is not clean: its `ForceCommand` is `login`, a shell
/// script (`$SSH_ORIGINAL_COMMAND` is the command asked for), as a site's wrapper or login
/// script would be: a banner printed before every command, a session ended right after auth,
/// output swallowed.
pub struct LoginSshd {
    pub sshd: OwnSshd,
    pub known_hosts: String,
}

impl LoginSshd {
    pub fn start(dir: &Path, login: &str) -> LoginSshd {
        let script = dir.join("login.sh");
        std::fs::write(&script, format!("#!/bin/sh\n{login}\n")).expect("write the login");
        let made = Command::new("chmod")
            .arg("+x")
            .arg(&script)
            .status()
            .expect("chmod");
        assert!(made.success());
        let host_key = key_pair(dir, "host_ed25519", "ed25519");
        let force = format!("ForceCommand {}", script.display());
        let sshd = OwnSshd::start(dir, &[&host_key], &[&force]);
        let known_hosts = dir.join("known_hosts");
        std::fs::write(
            &known_hosts,
            format!(
                "[127.0.0.1]:{} {}\n",
                sshd.port,
                public_key_fields(&host_key)
            ),
        )
        .expect("write known_hosts");
        LoginSshd {
            sshd,
            known_hosts: known_hosts.display().to_string(),
        }
    }

    /// `--host T --identity K --known-hosts F`: what every tool that reaches a host takes.
    pub fn host_flags(&self) -> [&str; 6] {
        [
            "--host",
            &self.sshd.target,
            "--identity",
            &self.sshd.key,
            "--known-hosts",
            &self.known_hosts,
        ]
    }
}

/// The login of the round-4 "banner" host: two lines on stdout before every command.
pub const BANNER_LOGIN: &str = "echo 'Welcome to gpu-node-7! Last login: yesterday'\n\
echo '*** 3 GPUs are reserved by alice ***'\nexec sh -c \"$SSH_ORIGINAL_COMMAND\"";

/// The login of the round-4 "close" host: the session ends right after auth, running nothing.
pub const CLOSE_LOGIN: &str = "exit 0";
