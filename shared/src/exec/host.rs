//! Naming a remote host (`[user@]addr[:port]`) and how to reach and trust it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How to reach and trust a remote host.
#[derive(Debug, Clone)]
pub struct SshOptions {
    /// Private key file; without one the agent is tried, then ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
    pub identity: Option<PathBuf>,
    /// The user's known_hosts file (default ~/.ssh/known_hosts and ~/.ssh/known_hosts2).
    pub known_hosts: Option<PathBuf>,
    /// The system's known_hosts files, read after the user's (OpenSSH's GlobalKnownHostsFile).
    pub global_known_hosts: Vec<PathBuf>,
    /// Trust (and record) a host key that is not yet known. A changed key is always refused.
    pub accept_new_host: bool,
    pub connect_timeout: Duration,
    /// Limit on each blocking SSH operation.
    pub command_timeout: Duration,
    pub keepalive: Duration,
}

impl Default for SshOptions {
    fn default() -> Self {
        SshOptions {
            identity: None,
            known_hosts: None,
            global_known_hosts: vec![
                PathBuf::from("/etc/ssh/ssh_known_hosts"),
                PathBuf::from("/etc/ssh/ssh_known_hosts2"),
            ],
            accept_new_host: false,
            connect_timeout: Duration::from_secs(10),
            command_timeout: Duration::from_secs(60),
            keepalive: Duration::from_secs(15),
        }
    }
}

/// `[user@]addr[:port]`, with `[v6addr]:port` for IPv6.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSpec {
    pub user: String,
    pub addr: String,
    pub port: u16,
}

impl HostSpec {
    pub fn parse(s: &str) -> Result<HostSpec, String> {
        let (user, rest) = match s.rsplit_once('@') {
            Some((u, r)) if !u.is_empty() => (u.to_string(), r),
            Some(_) => return Err(format!("'{s}': empty user before '@'")),
            None => (current_user(), s),
        };
        let (addr, port) = if let Some(v6) = rest.strip_prefix('[') {
            let (a, tail) = v6
                .split_once(']')
                .ok_or_else(|| format!("'{s}': missing ']' after an IPv6 address"))?;
            let port = match tail.strip_prefix(':') {
                Some(p) => p
                    .parse()
                    .map_err(|_| format!("'{s}': '{p}' is not a port"))?,
                None => 22,
            };
            (a.to_string(), port)
        } else {
            match rest.rsplit_once(':') {
                Some((a, p)) if !a.contains(':') => (
                    a.to_string(),
                    p.parse()
                        .map_err(|_| format!("'{s}': '{p}' is not a port"))?,
                ),
                _ => (rest.to_string(), 22),
            }
        };
        if addr.is_empty() {
            return Err(format!("'{s}': no host address"));
        }
        Ok(HostSpec { user, addr, port })
    }

    /// How known_hosts names this host: `addr`, or `[addr]:port` off port 22.
    pub fn known_hosts_name(&self) -> String {
        if self.port == 22 {
            self.addr.clone()
        } else {
            format!("[{}]:{}", self.addr, self.port)
        }
    }
}

impl fmt::Display for HostSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.addr.contains(':') {
            write!(f, "{}@[{}]:{}", self.user, self.addr, self.port)
        } else {
            write!(f, "{}@{}:{}", self.user, self.addr, self.port)
        }
    }
}

fn current_user() -> String {
    if let Ok(u) = std::env::var("USER")
        && !u.is_empty()
    {
        return u;
    }
    // SAFETY: getpwuid returns a pointer into static storage or null; read at once.
    unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        if !pw.is_null() && !(*pw).pw_name.is_null() {
            return std::ffi::CStr::from_ptr((*pw).pw_name)
                .to_string_lossy()
                .into_owned();
        }
    }
    "root".to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_specs() {
        let h = HostSpec::parse("bob@gpu1:2222").unwrap();
        assert_eq!(
            (h.user.as_str(), h.addr.as_str(), h.port),
            ("bob", "gpu1", 2222)
        );
        assert_eq!(h.known_hosts_name(), "[gpu1]:2222");
        let h = HostSpec::parse("gpu1").unwrap();
        assert_eq!((h.addr.as_str(), h.port), ("gpu1", 22));
        assert_eq!(h.known_hosts_name(), "gpu1");
        let h = HostSpec::parse("u@[::1]:2200").unwrap();
        assert_eq!((h.addr.as_str(), h.port), ("::1", 2200));
        assert!(HostSpec::parse("u@h:notaport").is_err());
        assert!(HostSpec::parse("@h").is_err());
    }
}
