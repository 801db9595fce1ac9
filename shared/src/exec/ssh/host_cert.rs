//! OpenSSH host certificates (PROTOCOL.certkeys in openssh-portable) and the SSH key blobs
//! they carry: parsed, and checked as ssh(1) checks one against a `@cert-authority` key: a
//! host (not user) certificate, valid now, naming the host among its principals (wildcards
//! allowed), no critical options, signed by that key. Signatures are verified with ring:
//! Ed25519, ECDSA P-256/P-384, and RSA with SHA-256/512 (`ssh-rsa` SHA-1 signatures are refused,
//! as OpenSSH's default CASignatureAlgorithms refuses them; P-521 CA keys are not supported).

use base64::Engine;
use ring::signature;

/// The suffix of every certificate key type and host-key algorithm.
pub const CERT_SUFFIX: &str = "-cert-v01@openssh.com";

/// OpenSSH's certificate type for hosts (1 is a user certificate).
const SSH2_CERT_TYPE_HOST: u32 = 2;

/// A parsed host certificate.
#[derive(Debug, Clone)]
pub struct HostCert {
    /// The certified key as a plain key blob (`ssh-ed25519 ...`), as known_hosts holds keys.
    pub plain_key: Vec<u8>,
    /// The CA's public key blob.
    pub signature_key: Vec<u8>,
    cert_type: u32,
    key_id: String,
    principals: Vec<String>,
    valid_after: u64,
    valid_before: u64,
    critical_options: Vec<u8>,
    /// The bytes the signature covers: the blob up to the signature field.
    signed: Vec<u8>,
    signature: Vec<u8>,
}

/// The key type a blob begins with (RFC 4253 6.6: `string type`), if it has one.
pub fn key_type(blob: &[u8]) -> Option<&str> {
    Wire::new(blob)
        .string()
        .ok()
        .and_then(|t| std::str::from_utf8(t).ok())
}

pub fn is_certificate(blob: &[u8]) -> bool {
    key_type(blob).is_some_and(|t| t.ends_with(CERT_SUFFIX))
}

/// The plain key type a host-key algorithm or key type belongs to: `rsa-sha2-512` and
/// `ssh-rsa-cert-v01@openssh.com` are `ssh-rsa`, `ssh-ed25519-cert-v01@...` is `ssh-ed25519`.
pub fn key_family(alg: &str) -> &str {
    let plain = alg.strip_suffix(CERT_SUFFIX).unwrap_or(alg);
    match plain {
        "rsa-sha2-256" | "rsa-sha2-512" => "ssh-rsa",
        other => other,
    }
}

/// `SHA256:base64` of a key blob, as ssh-keygen -l prints it.
pub fn fingerprint(blob: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, blob);
    format!(
        "SHA256:{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(digest.as_ref())
    )
}

impl HostCert {
    pub fn parse(blob: &[u8]) -> Result<HostCert, String> {
        let mut w = Wire::new(blob);
        let cert_key_type = w.utf8()?;
        let plain_type = cert_key_type
            .strip_suffix(CERT_SUFFIX)
            .ok_or("not a certificate")?
            .to_string();
        let _nonce = w.string()?;
        // The certified key's fields, per type; re-encoded after the plain type they make the
        // plain key blob.
        let key_fields = match plain_type.as_str() {
            "ssh-ed25519" => 1,                     // pk
            "ssh-rsa" => 2,                         // e, n
            t if t.starts_with("ecdsa-sha2-") => 2, // curve, point
            t => return Err(format!("unsupported certificate key type {t}{CERT_SUFFIX}")),
        };
        let mut plain_key = Vec::new();
        put_string(&mut plain_key, plain_type.as_bytes());
        for _ in 0..key_fields {
            put_string(&mut plain_key, w.string()?);
        }
        let _serial = w.u64()?;
        let cert_type = w.u32()?;
        let key_id = w.utf8()?.to_string();
        let mut principals = Vec::new();
        let mut list = Wire::new(w.string()?);
        while !list.rest.is_empty() {
            principals.push(list.utf8()?.to_string());
        }
        let valid_after = w.u64()?;
        let valid_before = w.u64()?;
        let critical_options = w.string()?.to_vec();
        let _extensions = w.string()?;
        let _reserved = w.string()?;
        let signature_key = w.string()?.to_vec();
        let signed = blob[..blob.len() - w.rest.len()].to_vec();
        let signature = w.string()?.to_vec();
        Ok(HostCert {
            plain_key,
            signature_key,
            cert_type,
            key_id,
            principals,
            valid_after,
            valid_before,
            critical_options,
            signed,
            signature,
        })
    }

    /// Whether the certificate vouches for the host `principal` at `now` (seconds since the
    /// epoch), its signing key already trusted: the reason it does not, if not.
    pub fn check(&self, principal: &str, now: u64) -> Result<(), String> {
        let id = &self.key_id;
        if self.cert_type != SSH2_CERT_TYPE_HOST {
            return Err(format!(
                "certificate '{id}' is a user certificate, not a host one"
            ));
        }
        if now < self.valid_after {
            return Err(format!(
                "certificate '{id}' is not valid before {} (now {now}, seconds since 1970)",
                self.valid_after
            ));
        }
        if now >= self.valid_before {
            return Err(format!(
                "certificate '{id}' expired at {} (now {now}, seconds since 1970)",
                self.valid_before
            ));
        }
        if !self
            .principals
            .iter()
            .any(|p| wildcard_match(&p.to_ascii_lowercase(), principal))
        {
            return Err(format!(
                "certificate '{id}' is for {}, not for {principal}",
                if self.principals.is_empty() {
                    "no host (it lists no principals)".to_string()
                } else {
                    self.principals.join(", ")
                }
            ));
        }
        if !self.critical_options.is_empty() {
            return Err(format!(
                "certificate '{id}' carries critical options, which host certificates must not"
            ));
        }
        verify_signature(&self.signature_key, &self.signed, &self.signature)
            .map_err(|e| format!("certificate '{id}': {e}"))
    }
}

/// Verifies an SSH signature blob (`string alg, string sig`) by `key` (a public key blob).
fn verify_signature(key: &[u8], data: &[u8], sig: &[u8]) -> Result<(), String> {
    let mut k = Wire::new(key);
    let key_type = k.utf8()?;
    let mut s = Wire::new(sig);
    let alg = s.utf8()?;
    let sig = s.string()?;
    let bad = || format!("its {alg} signature does not verify with the CA key");
    match (key_type, alg) {
        ("ssh-ed25519", "ssh-ed25519") => {
            signature::UnparsedPublicKey::new(&signature::ED25519, k.string()?)
                .verify(data, sig)
                .map_err(|_| bad())
        }
        ("ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256")
        | ("ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384") => {
            let _curve = k.string()?;
            let point = k.string()?;
            let (algorithm, width): (&signature::EcdsaVerificationAlgorithm, usize) =
                if alg.ends_with("256") {
                    (&signature::ECDSA_P256_SHA256_FIXED, 32)
                } else {
                    (&signature::ECDSA_P384_SHA384_FIXED, 48)
                };
            // The SSH form is `mpint r, mpint s`; ring wants r and s fixed-width, big-endian.
            let mut rs = Wire::new(sig);
            let mut fixed = Vec::with_capacity(2 * width);
            for _ in 0..2 {
                let n = rs.string()?;
                let n = &n[n.iter().take_while(|b| **b == 0).count()..];
                if n.len() > width {
                    return Err(bad());
                }
                fixed.extend(std::iter::repeat_n(0, width - n.len()));
                fixed.extend_from_slice(n);
            }
            signature::UnparsedPublicKey::new(algorithm, point)
                .verify(data, &fixed)
                .map_err(|_| bad())
        }
        ("ssh-rsa", "rsa-sha2-256" | "rsa-sha2-512") => {
            let e = k.string()?;
            let n = k.string()?;
            let strip = |v: &[u8]| v[v.iter().take_while(|b| **b == 0).count()..].to_vec();
            let params = if alg == "rsa-sha2-256" {
                &signature::RSA_PKCS1_2048_8192_SHA256
            } else {
                &signature::RSA_PKCS1_2048_8192_SHA512
            };
            signature::RsaPublicKeyComponents {
                n: strip(n),
                e: strip(e),
            }
            .verify(params, data, sig)
            .map_err(|_| bad())
        }
        ("ssh-rsa", "ssh-rsa") => Err(
            "it is signed with ssh-rsa (SHA-1), which OpenSSH refuses for certificates: re-sign it \
             with `ssh-keygen -s CA -t rsa-sha2-512`"
                .to_string(),
        ),
        (k, a) => Err(format!(
            "a {a} signature by a {k} CA key is not supported (Ed25519, ECDSA P-256/P-384 and RSA \
             SHA-2 are)"
        )),
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// A reader of SSH wire fields (RFC 4251 5), every length checked against what is left.
struct Wire<'a> {
    rest: &'a [u8],
}

impl<'a> Wire<'a> {
    fn new(bytes: &'a [u8]) -> Wire<'a> {
        Wire { rest: bytes }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.rest.len() < n {
            return Err("truncated".to_string());
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }

    fn string(&mut self) -> Result<&'a [u8], String> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn utf8(&mut self) -> Result<&'a str, String> {
        std::str::from_utf8(self.string()?).map_err(|_| "a name that is not UTF-8".to_string())
    }
}

/// The plain key of a host key or certificate blob.
pub fn plain_key(blob: &[u8]) -> Result<Vec<u8>, String> {
    if is_certificate(blob) {
        HostCert::parse(blob)
            .map(|c| c.plain_key)
            .map_err(|e| format!("certificate does not parse: {e}"))
    } else {
        Ok(blob.to_vec())
    }
}

/// `*` matches any run of characters, `?` any one character: known_hosts host patterns and a
/// certificate's principals.
pub(super) fn wildcard_match(pattern: &str, text: &str) -> bool {
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
