//! known_hosts read as OpenSSH reads it (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"): a line is
//! `[@revoked|@cert-authority] patterns keytype base64-key [comment]`. Patterns are
//! comma-separated, with `*` and `?` wildcards and `!` negation, or one hashed name
//! (`|1|salt|hmac-sha1`, HashKnownHosts). Lines that do not parse are skipped (OpenSSH skips
//! them too). Several files are read as one (OpenSSH's UserKnownHostsFile and
//! GlobalKnownHostsFile), each entry remembering its file and line.
//!
//! Lookup, as OpenSSH 9 does it (checked against `ssh` itself): on port 22 a host is `addr`; on
//! any other port it is `[addr]:port`, and only when no plain entry names `[addr]:port` do the
//! entries for `addr` count, and then only as a match (a different key there is an unknown
//! host, not a changed one). A key marked `@revoked` for the host is refused whatever else the
//! files say. A host certificate is trusted when a `@cert-authority` entry for the host holds
//! its signing key and the certificate is valid now and names the host (`host_cert.rs`); if
//! not, its plain key is looked up as any key, and when that fails too the certificate's fault
//! is the answer.

use super::host_cert::{self, HostCert, wildcard_match};
use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use std::fmt;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A known_hosts file larger than this is refused (real ones are kilobytes).
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// Where an entry is: `file:line` (1-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    pub file: Arc<Path>,
    pub line: usize,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// What the known_hosts files say about a host's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A plain entry for the host holds this key.
    Known,
    /// A host certificate signed by the `@cert-authority` key at `ca`, valid now, for this host.
    Certified { ca: Place },
    /// Plain entries for the host exist, none with this key: the first of them, and the key
    /// types they hold.
    Changed { at: Place, known_types: Vec<String> },
    /// The key (or the certificate's signing key) is marked `@revoked` for the host.
    Revoked { at: Place },
    /// A certificate that a `@cert-authority` entry for the host should vouch for and does not
    /// (`why`), and no plain entry holds its key.
    CertRefused { why: String, ca: Option<Place> },
    /// Nothing about the host.
    Unknown,
}

/// The names a host is looked up by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostNames {
    /// `addr`, or `[addr]:port` off port 22 (lowercased, as ssh looks hosts up).
    pub primary: String,
    /// `addr` off port 22: its entries count when none names `[addr]:port`.
    pub fallback: Option<String>,
    /// The name a host certificate must list among its principals: `addr`.
    pub principal: String,
}

impl HostNames {
    pub fn new(addr: &str, port: u16) -> HostNames {
        let addr = addr.to_ascii_lowercase();
        if port == 22 {
            HostNames {
                primary: addr.clone(),
                fallback: None,
                principal: addr,
            }
        } else {
            HostNames {
                primary: format!("[{addr}]:{port}"),
                fallback: Some(addr.clone()),
                principal: addr,
            }
        }
    }

    fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.primary.as_str()).chain(self.fallback.as_deref())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
    CertAuthority,
}

#[derive(Debug, Clone)]
struct Entry {
    place: Place,
    marker: Marker,
    patterns: String,
    key_type: String,
    key: Vec<u8>,
}

/// The parsed entries of one or more known_hosts files.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

impl KnownHosts {
    /// Reads `files` in order; a file that does not exist is skipped, one that cannot be read
    /// (or is over [`MAX_FILE_BYTES`]) is an error naming it.
    pub fn load(files: &[PathBuf]) -> Result<KnownHosts, String> {
        let mut known = KnownHosts::default();
        for file in files {
            let f = match std::fs::File::open(file) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
            };
            let mut bytes = Vec::new();
            f.take(MAX_FILE_BYTES + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            if bytes.len() as u64 > MAX_FILE_BYTES {
                return Err(format!(
                    "{} is larger than {} MiB: not a known_hosts file?",
                    file.display(),
                    MAX_FILE_BYTES >> 20
                ));
            }
            known.add(file, &String::from_utf8_lossy(&bytes));
        }
        Ok(known)
    }

    /// The entries of `text`, read as the file `file`.
    #[cfg(test)]
    pub fn parse(file: &Path, text: &str) -> KnownHosts {
        let mut known = KnownHosts::default();
        known.add(file, text);
        known
    }

    fn add(&mut self, file: &Path, text: &str) {
        let file: Arc<Path> = Arc::from(file);
        self.entries.extend(
            text.lines()
                .enumerate()
                .filter_map(|(i, line)| parse_line(&file, i + 1, line)),
        );
    }

    /// Entries with `marker` whose patterns match any of the host's names.
    fn marked<'a>(
        &'a self,
        host: &'a HostNames,
        marker: Marker,
    ) -> impl Iterator<Item = &'a Entry> {
        self.entries.iter().filter(move |e| {
            e.marker == marker && host.names().any(|n| host_matches(&e.patterns, n))
        })
    }

    /// The plain entries that decide for the host: those naming `primary`, or else those naming
    /// `fallback`; and whether they are the primary ones.
    fn plain_for(&self, host: &HostNames) -> (Vec<&Entry>, bool) {
        let naming = |name: &str| -> Vec<&Entry> {
            self.entries
                .iter()
                .filter(|e| e.marker == Marker::None && host_matches(&e.patterns, name))
                .collect()
        };
        let primary = naming(&host.primary);
        match &host.fallback {
            Some(f) if primary.is_empty() => (naming(f), false),
            _ => (primary, true),
        }
    }

    /// The host-key algorithms to offer, in order (OpenSSH's HostKeyAlgorithms ordering): the
    /// certificate algorithms first when a `@cert-authority` entry covers the host, then the
    /// algorithms of the key types already known for it, then the other plain ones, then any
    /// remaining certificate algorithms; each group in `supported`'s order.
    pub fn host_key_preference<'a>(&self, host: &HostNames, supported: &[&'a str]) -> Vec<&'a str> {
        let has_ca = self.marked(host, Marker::CertAuthority).next().is_some();
        let known: Vec<&str> = self
            .plain_for(host)
            .0
            .iter()
            .map(|e| e.key_type.as_str())
            .collect();
        let is_cert = |a: &str| a.ends_with(host_cert::CERT_SUFFIX);
        let known_family = |a: &str| known.contains(&host_cert::key_family(a));
        let groups: [&dyn Fn(&str) -> bool; 4] = [
            &|a| is_cert(a) && has_ca,
            &|a| !is_cert(a) && known_family(a),
            &|a| !is_cert(a),
            &|_| true,
        ];
        let mut order: Vec<&'a str> = Vec::new();
        for group in groups {
            for a in supported {
                if group(a) && !order.contains(a) {
                    order.push(a);
                }
            }
        }
        order
    }

    /// The verdict on `blob` (the host key or certificate, as the server sent it) for `host`,
    /// at `now` (seconds since the epoch, for certificate validity).
    pub fn check(&self, host: &HostNames, blob: &[u8], now: u64) -> Verdict {
        let cert = host_cert::is_certificate(blob).then(|| HostCert::parse(blob));
        let plain = match &cert {
            Some(Ok(c)) => c.plain_key.clone(),
            _ => blob.to_vec(),
        };
        let signer = match &cert {
            Some(Ok(c)) => Some(c.signature_key.as_slice()),
            _ => None,
        };
        if let Some(e) = self
            .marked(host, Marker::Revoked)
            .find(|e| e.key == plain || Some(e.key.as_slice()) == signer)
        {
            return Verdict::Revoked {
                at: e.place.clone(),
            };
        }
        let mut cert_fault = None;
        match &cert {
            Some(Ok(c)) => {
                let cas: Vec<&Entry> = self.marked(host, Marker::CertAuthority).collect();
                match cas.iter().find(|e| e.key == c.signature_key) {
                    Some(ca) => match c.check(&host.principal, now) {
                        Ok(()) => {
                            return Verdict::Certified {
                                ca: ca.place.clone(),
                            };
                        }
                        Err(why) => cert_fault = Some((why, Some(ca.place.clone()))),
                    },
                    None if !cas.is_empty() => {
                        cert_fault = Some((
                            format!(
                                "it is signed by CA key {}, which no @cert-authority line for the \
                                 host holds (they are at {})",
                                host_cert::fingerprint(&c.signature_key),
                                cas.iter()
                                    .map(|e| e.place.to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            ),
                            None,
                        ))
                    }
                    None => {}
                }
            }
            Some(Err(why)) => cert_fault = Some((format!("it does not parse: {why}"), None)),
            None => {}
        }
        let (plain_entries, primary) = self.plain_for(host);
        if plain_entries.iter().any(|e| e.key == plain) {
            return Verdict::Known;
        }
        if let Some((why, ca)) = cert_fault {
            return Verdict::CertRefused { why, ca };
        }
        match plain_entries.first() {
            Some(first) if primary => {
                let mut known_types: Vec<String> = Vec::new();
                for e in &plain_entries {
                    if !known_types.contains(&e.key_type) {
                        known_types.push(e.key_type.clone());
                    }
                }
                Verdict::Changed {
                    at: first.place.clone(),
                    known_types,
                }
            }
            _ => Verdict::Unknown,
        }
    }
}

/// Appends `name keytype base64-key` to `file` (creating it), on a line of its own: a file
/// that does not end in a newline gets one first, or the new entry would be glued onto the
/// last line and corrupt it.
pub fn append(file: &Path, name: &str, key_type: &str, key: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = file.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let needs_newline = match std::fs::read(file) {
        Ok(bytes) => bytes.last().is_some_and(|b| *b != b'\n'),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let line = format!(
        "{}{name} {key_type} {}\n",
        if needs_newline { "\n" } else { "" },
        base64::engine::general_purpose::STANDARD.encode(key)
    );
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)?
        .write_all(line.as_bytes())
}

fn parse_line(file: &Arc<Path>, line: usize, text: &str) -> Option<Entry> {
    let mut fields = text.split_ascii_whitespace();
    let first = fields.next().filter(|f| !f.starts_with('#'))?;
    let (marker, patterns) = match first {
        "@revoked" => (Marker::Revoked, fields.next()?),
        "@cert-authority" => (Marker::CertAuthority, fields.next()?),
        m if m.starts_with('@') => return None,
        patterns => (Marker::None, patterns),
    };
    let key_type = fields.next()?;
    let key = base64::engine::general_purpose::STANDARD
        .decode(fields.next()?)
        .ok()?;
    // A key blob begins with its type's name (RFC 4253 6.6): it must be the one the line says.
    if host_cert::key_type(&key)? != key_type {
        return None;
    }
    Some(Entry {
        place: Place {
            file: file.clone(),
            line,
        },
        marker,
        patterns: patterns.to_string(),
        key_type: key_type.to_string(),
        key,
    })
}

/// OpenSSH's host matching: a hashed name, or a pattern list where any negated match rules
/// the host out and otherwise one positive match is needed. Names are compared lowercased.
fn host_matches(patterns: &str, name: &str) -> bool {
    if let Some(hashed) = patterns.strip_prefix("|1|") {
        return hashed_matches(hashed, name);
    }
    let mut positive = false;
    for pattern in patterns.split(',') {
        let (negated, pattern) = match pattern.strip_prefix('!') {
            Some(p) => (true, p),
            None => (false, pattern),
        };
        if wildcard_match(&pattern.to_ascii_lowercase(), name) {
            if negated {
                return false;
            }
            positive = true;
        }
    }
    positive
}

/// `salt|hash`, both base64: HMAC-SHA1 keyed by the salt over the name equals the hash.
fn hashed_matches(hashed: &str, name: &str) -> bool {
    let b64 = base64::engine::general_purpose::STANDARD;
    let Some((salt, hash)) = hashed.split_once('|') else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (b64.decode(salt), b64.decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = <Hmac<sha1::Sha1> as KeyInit>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIFQObTS8rniAow4kvQ9NqMI/CSAmuKusAq9ubmsxOF88";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIKz9vWq3hh8Bk8v0d7vjGdwdDFb4w0mVOk0YmUpvYK2n";

    fn parse(text: &str) -> KnownHosts {
        KnownHosts::parse(Path::new("kh"), text)
    }

    fn at(line: usize) -> Place {
        Place {
            file: Arc::from(Path::new("kh")),
            line,
        }
    }

    /// `name` as ssh looks it up: `host` on port 22, `[host]:port` elsewhere.
    fn host(name: &str) -> HostNames {
        match name.strip_prefix('[').and_then(|r| r.split_once("]:")) {
            Some((addr, port)) => HostNames::new(addr, port.parse().unwrap()),
            None => HostNames::new(name, 22),
        }
    }

    fn check(known: &KnownHosts, name: &str, key: &[u8]) -> Verdict {
        known.check(&host(name), key, 0)
    }

    fn key(b64: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
    }

    #[test]
    fn an_entry_without_a_port_counts_off_port_22_only_when_no_entry_names_the_port() {
        let known = parse(&format!("gpu1 ssh-ed25519 {KEY_A}\n"));
        assert_eq!(check(&known, "gpu1", &key(KEY_A)), Verdict::Known);
        assert_eq!(check(&known, "[gpu1]:2222", &key(KEY_A)), Verdict::Known);
        // A different key under the plain name is no evidence for another port: unknown there.
        assert_eq!(check(&known, "[gpu1]:2222", &key(KEY_B)), Verdict::Unknown);
        assert_eq!(
            check(&known, "gpu1", &key(KEY_B)),
            Verdict::Changed {
                at: at(1),
                known_types: vec!["ssh-ed25519".into()]
            }
        );
        // An entry naming the port decides alone.
        let known = parse(&format!(
            "[gpu1]:2222 ssh-ed25519 {KEY_A}\ngpu1 ssh-ed25519 {KEY_B}\n"
        ));
        assert_eq!(check(&known, "[gpu1]:2222", &key(KEY_A)), Verdict::Known);
        assert_eq!(
            check(&known, "[gpu1]:2222", &key(KEY_B)),
            Verdict::Changed {
                at: at(1),
                known_types: vec!["ssh-ed25519".into()]
            }
        );
        assert_eq!(check(&known, "gpu1", &key(KEY_B)), Verdict::Known);
        let known = parse(&format!("[gpu1]:2222 ssh-ed25519 {KEY_A}\n"));
        assert_eq!(check(&known, "gpu1", &key(KEY_A)), Verdict::Unknown);
    }

    #[test]
    fn a_revoked_key_is_revoked_whatever_else_the_file_says() {
        let text = format!(
            "# comment\ngpu1 ssh-ed25519 {KEY_A}\n@revoked * ssh-ed25519 {KEY_A}\n\
             @cert-authority *.lab ssh-ed25519 {KEY_B}\n"
        );
        let known = parse(&text);
        assert_eq!(
            check(&known, "gpu1", &key(KEY_A)),
            Verdict::Revoked { at: at(3) }
        );
        assert_eq!(
            check(&known, "other", &key(KEY_A)),
            Verdict::Revoked { at: at(3) }
        );
        // Another key for gpu1 is a changed key; the CA line vouches for no plain key.
        assert_eq!(
            check(&known, "gpu1", &key(KEY_B)),
            Verdict::Changed {
                at: at(2),
                known_types: vec!["ssh-ed25519".into()]
            }
        );
        assert_eq!(check(&known, "x.lab", &key(KEY_B)), Verdict::Unknown);
    }

    #[test]
    fn patterns_wildcards_negation_case_and_hashed_names_match_as_in_openssh() {
        let text = format!(
            "*.lab,!bad.lab ssh-ed25519 {KEY_A}\n\
             gpu?.example.org ssh-ed25519 {KEY_B}\n\
             |1|FxI7wDj19U9zmuGbdGSVAWXRCqw=|fo9OBMdDWEpM3pwim3NayeUbWU0= ssh-ed25519 {KEY_B}\n\
             |1|NIrrAyABL6Iln/W40ZNIW9mIN/g=|UmLDnsRnBz+rI43SMz3RMvdA/ss= ssh-ed25519 {KEY_A}\n\
             this line does not parse\n\
             @unknown-marker host ssh-ed25519 {KEY_A}\n"
        );
        let known = parse(&text);
        assert_eq!(check(&known, "good.LAB", &key(KEY_A)), Verdict::Known);
        assert_eq!(check(&known, "bad.lab", &key(KEY_A)), Verdict::Unknown);
        assert_eq!(
            check(&known, "gpu7.example.org", &key(KEY_B)),
            Verdict::Known
        );
        assert_eq!(
            check(&known, "gpu17.example.org", &key(KEY_B)),
            Verdict::Unknown
        );
        // The hashed lines are OpenSSH's own `ssh-keygen -H` of "192.168.1.61" and of
        // "[Gpu1.Lab]:2222" (which it lowercases before hashing, as ssh looks hosts up).
        assert_eq!(check(&known, "192.168.1.61", &key(KEY_B)), Verdict::Known);
        assert_eq!(check(&known, "192.168.1.62", &key(KEY_B)), Verdict::Unknown);
        assert_eq!(
            check(&known, "[GPU1.lab]:2222", &key(KEY_A)),
            Verdict::Known
        );
        // On port 2200 the hashed [gpu1.lab]:2222 entry does not apply: KEY_B is vouched for
        // by no entry, and KEY_A only through the plain `*.lab` one.
        assert_eq!(
            check(&known, "[gpu1.lab]:2200", &key(KEY_B)),
            Verdict::Unknown
        );
        assert_eq!(known.entries.len(), 4);
    }

    #[test]
    fn the_key_types_known_for_a_host_are_asked_for_first() {
        const ECDSA: &str = "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBBwGPWAL2JdvWyIpavveNDAn85PqpbxgnBqJ2Nx55T5xjB4GJgi/DqsnYXe6aNxaalW0sh6H/gKav0j4YFqOlhk=";
        let supported = [
            "ssh-ed25519-cert-v01@openssh.com",
            "ssh-ed25519",
            "ecdsa-sha2-nistp256",
            "rsa-sha2-512",
            "ssh-rsa",
        ];
        let known = parse(&format!(
            "gpu1 ecdsa-sha2-nistp256 {ECDSA}\n@cert-authority *.lab ssh-ed25519 {KEY_A}\n"
        ));
        // Known as ECDSA (on port 22, and through the plain entry on another port).
        for name in ["gpu1", "[gpu1]:2222"] {
            assert_eq!(
                known.host_key_preference(&host(name), &supported),
                [
                    "ecdsa-sha2-nistp256",
                    "ssh-ed25519",
                    "rsa-sha2-512",
                    "ssh-rsa",
                    "ssh-ed25519-cert-v01@openssh.com"
                ]
            );
        }
        // Covered by a CA: certificates first.
        assert_eq!(
            known.host_key_preference(&host("x.lab"), &supported)[0],
            "ssh-ed25519-cert-v01@openssh.com"
        );
        // Unknown: plain keys in libssh2's order, certificates last.
        assert_eq!(
            known.host_key_preference(&host("other"), &supported),
            [
                "ssh-ed25519",
                "ecdsa-sha2-nistp256",
                "rsa-sha2-512",
                "ssh-rsa",
                "ssh-ed25519-cert-v01@openssh.com"
            ]
        );
    }

    #[test]
    fn wildcards() {
        for (p, t, m) in [
            ("*", "", true),
            ("a*b*c", "aXXbYc", true),
            ("a*b*c", "aXXbY", false),
            ("??", "ab", true),
            ("??", "abc", false),
            ("[h]:22*", "[h]:2222", true),
        ] {
            assert_eq!(wildcard_match(p, t), m, "{p} {t}");
        }
    }

    #[test]
    fn a_new_entry_goes_on_a_line_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ssh/known_hosts");
        append(&file, "[h]:2222", "ssh-ed25519", &key(KEY_A)).unwrap();
        std::fs::write(&file, format!("gpu1 ssh-ed25519 {KEY_B}")).unwrap();
        append(&file, "[h]:2222", "ssh-ed25519", &key(KEY_A)).unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            format!("gpu1 ssh-ed25519 {KEY_B}\n[h]:2222 ssh-ed25519 {KEY_A}\n")
        );
        let known = parse(&text);
        assert_eq!(check(&known, "gpu1", &key(KEY_B)), Verdict::Known);
        assert_eq!(check(&known, "[h]:2222", &key(KEY_A)), Verdict::Known);
    }
}
