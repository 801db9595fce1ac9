//! known_hosts read as OpenSSH reads it (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT"): a line is
//! `[@revoked|@cert-authority] patterns keytype base64-key [comment]`. A host is looked up by
//! `addr` on port 22 and by `[addr]:port` on any other port, so an entry without a port names
//! port 22 only. Patterns are comma-separated, with `*` and `?` wildcards and `!` negation, or
//! one hashed name (`|1|salt|hmac-sha1`, HashKnownHosts). A key marked `@revoked` for the host is
//! refused whatever else the file says. `@cert-authority` lines vouch for certificates, which we
//! never accept, so they are skipped; so are lines that do not parse (OpenSSH skips them too).

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use std::io::Write;
use std::path::Path;

/// What known_hosts says about a host's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An entry for the host holds this key.
    Known,
    /// Entries for the host exist, none with this key (first such line, 1-based).
    Changed { line: usize },
    /// The key is marked `@revoked` for the host (that line, 1-based).
    Revoked { line: usize },
    /// Nothing about the host.
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Marker {
    None,
    Revoked,
    CertAuthority,
}

#[derive(Debug, Clone)]
struct Entry {
    line: usize,
    marker: Marker,
    patterns: String,
    key: Vec<u8>,
}

/// The parsed entries of one known_hosts file.
#[derive(Debug, Clone, Default)]
pub struct KnownHosts {
    entries: Vec<Entry>,
}

impl KnownHosts {
    pub fn parse(text: &str) -> KnownHosts {
        let entries = text
            .lines()
            .enumerate()
            .filter_map(|(i, line)| parse_line(i + 1, line))
            .collect();
        KnownHosts { entries }
    }

    /// The verdict on `key` (the SSH wire blob, as the server sent it) for `name`, the host's
    /// lookup name (`addr`, or `[addr]:port` off port 22: `HostSpec::known_hosts_name`).
    pub fn check(&self, name: &str, key: &[u8]) -> Verdict {
        let name = name.to_ascii_lowercase();
        let for_host: Vec<&Entry> = self
            .entries
            .iter()
            .filter(|e| host_matches(&e.patterns, &name))
            .collect();
        let with = |m: Marker| for_host.iter().filter(move |e| e.marker == m);
        if let Some(e) = with(Marker::Revoked).find(|e| e.key == key) {
            return Verdict::Revoked { line: e.line };
        }
        if with(Marker::None).any(|e| e.key == key) {
            return Verdict::Known;
        }
        match with(Marker::None).next() {
            Some(e) => Verdict::Changed { line: e.line },
            None => Verdict::Unknown,
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

fn parse_line(line: usize, text: &str) -> Option<Entry> {
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
    let len = u32::from_be_bytes(key.get(..4)?.try_into().ok()?) as usize;
    if key.get(4..4 + len)? != key_type.as_bytes() {
        return None;
    }
    Some(Entry {
        line,
        marker,
        patterns: patterns.to_string(),
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

/// `*` matches any run of characters, `?` any one character.
fn wildcard_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    // Iterative glob with one backtrack point (the last `*`): linear for what known_hosts holds.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIFQObTS8rniAow4kvQ9NqMI/CSAmuKusAq9ubmsxOF88";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIKz9vWq3hh8Bk8v0d7vjGdwdDFb4w0mVOk0YmUpvYK2n";

    fn key(b64: &str) -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap()
    }

    #[test]
    fn an_entry_without_a_port_names_port_22_only() {
        let known = KnownHosts::parse(&format!("gpu1 ssh-ed25519 {KEY_A}\n"));
        assert_eq!(known.check("gpu1", &key(KEY_A)), Verdict::Known);
        assert_eq!(known.check("[gpu1]:2222", &key(KEY_A)), Verdict::Unknown);
        let known = KnownHosts::parse(&format!("[gpu1]:2222 ssh-ed25519 {KEY_A}\n"));
        assert_eq!(known.check("[gpu1]:2222", &key(KEY_A)), Verdict::Known);
        assert_eq!(known.check("gpu1", &key(KEY_A)), Verdict::Unknown);
    }

    #[test]
    fn a_revoked_key_is_revoked_whatever_else_the_file_says() {
        let text = format!(
            "# comment\ngpu1 ssh-ed25519 {KEY_A}\n@revoked * ssh-ed25519 {KEY_A}\n\
             @cert-authority *.lab ssh-ed25519 {KEY_B}\n"
        );
        let known = KnownHosts::parse(&text);
        assert_eq!(
            known.check("gpu1", &key(KEY_A)),
            Verdict::Revoked { line: 3 }
        );
        assert_eq!(
            known.check("other", &key(KEY_A)),
            Verdict::Revoked { line: 3 }
        );
        // Another key for gpu1 is a changed key; the CA line vouches for no plain key.
        assert_eq!(
            known.check("gpu1", &key(KEY_B)),
            Verdict::Changed { line: 2 }
        );
        assert_eq!(known.check("x.lab", &key(KEY_B)), Verdict::Unknown);
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
        let known = KnownHosts::parse(&text);
        assert_eq!(known.check("good.LAB", &key(KEY_A)), Verdict::Known);
        assert_eq!(known.check("bad.lab", &key(KEY_A)), Verdict::Unknown);
        assert_eq!(known.check("gpu7.example.org", &key(KEY_B)), Verdict::Known);
        assert_eq!(
            known.check("gpu17.example.org", &key(KEY_B)),
            Verdict::Unknown
        );
        // The hashed lines are OpenSSH's own `ssh-keygen -H` of "192.168.1.61" and of
        // "[Gpu1.Lab]:2222" (which it lowercases before hashing, as ssh looks hosts up).
        assert_eq!(known.check("192.168.1.61", &key(KEY_B)), Verdict::Known);
        assert_eq!(known.check("192.168.1.62", &key(KEY_B)), Verdict::Unknown);
        assert_eq!(known.check("[GPU1.lab]:2222", &key(KEY_A)), Verdict::Known);
        assert_eq!(
            known.check("[gpu1.lab]:2200", &key(KEY_A)),
            Verdict::Unknown
        );
        assert_eq!(known.entries.len(), 4);
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
        let known = KnownHosts::parse(&text);
        assert_eq!(known.check("gpu1", &key(KEY_B)), Verdict::Known);
        assert_eq!(known.check("[h]:2222", &key(KEY_A)), Verdict::Known);
    }
}
