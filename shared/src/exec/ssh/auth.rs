//! Trust in both directions: the server's host key checked against known_hosts as OpenSSH
//! reads it (`known_hosts.rs`: an unknown key refused unless `--accept-new-host`, a changed or
//! revoked key always), then our authentication (an explicit key, else the agent, else the
//! default keys). Each refusal says what to fix.

use super::host_cert;
use super::known_hosts::{self, HostNames, KnownHosts, Verdict};
use super::{HostSpec, SshOptions};
use crate::diag;
use crate::exec::ExecError;
use std::path::PathBuf;

/// The known_hosts files, in the order OpenSSH reads them by default: the user's
/// (`--known-hosts FILE`, else ~/.ssh/known_hosts and ~/.ssh/known_hosts2), then the system's
/// (/etc/ssh/ssh_known_hosts, /etc/ssh/ssh_known_hosts2). New keys go to the first.
fn known_hosts_files(opts: &SshOptions) -> Vec<PathBuf> {
    let mut files = match &opts.known_hosts {
        Some(f) => vec![f.clone()],
        None => vec![
            home_dir().join(".ssh/known_hosts"),
            home_dir().join(".ssh/known_hosts2"),
        ],
    };
    files.extend(opts.global_known_hosts.iter().cloned());
    files
}

/// Reads the known_hosts files for a connection to `spec`.
pub(super) fn load_known_hosts(
    spec: &HostSpec,
    opts: &SshOptions,
) -> Result<KnownHosts, ExecError> {
    KnownHosts::load(&known_hosts_files(opts))
        .map_err(|e| ExecError::Connect(format!("ssh {spec}: {e}")))
}

/// Before the handshake: asks for the host-key algorithms known_hosts can vouch for first, as
/// OpenSSH orders HostKeyAlgorithms, so a host known by its ECDSA or RSA key (what OpenSSH
/// before 8.5 recorded) presents that key and not the ed25519 one libssh2 prefers.
pub(super) fn prefer_known_host_key_types(
    session: &ssh2::Session,
    spec: &HostSpec,
    known: &KnownHosts,
) -> Result<(), ExecError> {
    let fail = |e: ssh2::Error| {
        ExecError::Connect(format!(
            "ssh {spec}: cannot set the host-key algorithms: {e}"
        ))
    };
    let supported = session
        .supported_algs(ssh2::MethodType::HostKey)
        .map_err(fail)?;
    let names = HostNames::new(&spec.addr, spec.port);
    let order = known.host_key_preference(&names, &supported);
    session
        .method_pref(ssh2::MethodType::HostKey, &order.join(","))
        .map_err(fail)
}

pub(super) fn check_host_key(
    session: &ssh2::Session,
    spec: &HostSpec,
    opts: &SshOptions,
    known: &KnownHosts,
) -> Result<(), ExecError> {
    let (blob, _) = session
        .host_key()
        .ok_or_else(|| ExecError::Connect(format!("ssh {spec}: the server sent no host key")))?;
    let key_type = host_cert::key_type(blob).unwrap_or("unknown").to_string();
    let fingerprint = host_cert::fingerprint(blob);
    let names = HostNames::new(&spec.addr, spec.port);
    let name = names.primary.clone();
    let file = known_hosts_files(opts).remove(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match known.check(&names, blob, now) {
        Verdict::Known | Verdict::Certified { .. } => Ok(()),
        Verdict::Revoked { at } => Err(ExecError::Connect(format!(
            "ssh {spec}: REVOKED HOST KEY: the {key_type} key the server sent ({fingerprint}) is \
             marked @revoked in {at}; refusing to connect (--accept-new-host never trusts a \
             revoked key). Ask the host's administrator for its current key"
        ))),
        Verdict::CertRefused { why, ca } => Err(ExecError::Connect(format!(
            "ssh {spec}: HOST CERTIFICATE REFUSED: the server presented a {key_type} ({fingerprint}) \
             and {why}{}; refusing to connect (--accept-new-host never trusts a certificate). \
             Renew the host's certificate, or fix the @cert-authority line",
            ca.map(|p| format!(" (@cert-authority at {p})"))
                .unwrap_or_default()
        ))),
        Verdict::Changed { at, known_types }
            if !known_types.contains(&host_cert::key_family(&key_type).to_string()) =>
        {
            Err(ExecError::Connect(format!(
                "ssh {spec}: HOST KEY CHANGED: known_hosts holds only {} key(s) for {name} \
                 ({at}) and the server offered none of that type, only a {key_type} key \
                 ({fingerprint}); refusing to connect. If the host was reinstalled, remove the old \
                 line (ssh-keygen -R '{name}' -f {}) and rerun",
                known_types.join(", "),
                at.file.display()
            )))
        }
        Verdict::Changed { at, .. } => Err(ExecError::Connect(format!(
            "ssh {spec}: HOST KEY CHANGED: {name} in {at} does not match the {key_type} key \
             the server sent ({fingerprint}); refusing to connect. If the host was reinstalled, \
             remove the old line (ssh-keygen -R '{name}' -f {}) and rerun",
            at.file.display()
        ))),
        Verdict::Unknown if opts.accept_new_host => {
            // A certificate no CA vouches for is pinned by its plain key, which known_hosts
            // can hold (the certificate blob would be an unreadable line).
            let plain = host_cert::plain_key(blob)
                .map_err(|e| ExecError::Connect(format!("ssh {spec}: the host key {e}")))?;
            let plain_type = host_cert::key_type(&plain).unwrap_or("unknown").to_string();
            known_hosts::append(&file, &name, &plain_type, &plain).map_err(|e| {
                ExecError::Connect(format!(
                    "ssh {spec}: cannot record the new host key in {}: {e}",
                    file.display()
                ))
            })?;
            diag::info(format!(
                "trusting new host key for {name} ({plain_type} {}), added to {}",
                host_cert::fingerprint(&plain),
                file.display()
            ));
            Ok(())
        }
        Verdict::Unknown => Err(ExecError::Connect(format!(
            "ssh {spec}: unknown host key ({key_type} {fingerprint}): {name} is in none of {}; \
             verify the fingerprint and rerun with --accept-new-host to trust it",
            known_hosts_files(opts)
                .iter()
                .map(|f| f.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub(super) fn authenticate(
    session: &ssh2::Session,
    spec: &HostSpec,
    opts: &SshOptions,
) -> Result<(), ExecError> {
    let user = spec.user.as_str();
    let mut tried = Vec::new();
    if let Some(key) = &opts.identity {
        if !key.exists() {
            return Err(ExecError::Connect(format!(
                "ssh {spec}: identity file {} does not exist",
                key.display()
            )));
        }
        return match session.userauth_pubkey_file(user, None, key, None) {
            Ok(()) if session.authenticated() => Ok(()),
            Ok(()) | Err(_) => Err(ExecError::Connect(format!(
                "ssh {spec}: authentication failed: the server refused key {} for user '{user}' \
                 (is its .pub in the remote authorized_keys?)",
                key.display()
            ))),
        };
    }
    if std::env::var_os("SSH_AUTH_SOCK").is_some()
        && let Ok(mut agent) = session.agent()
        && agent.connect().is_ok()
        && agent.list_identities().is_ok()
    {
        let ids = agent.identities().unwrap_or_default();
        tried.push(format!("agent ({} keys)", ids.len()));
        for id in &ids {
            if agent.userauth(user, id).is_ok() && session.authenticated() {
                return Ok(());
            }
        }
    }
    for name in ["id_ed25519", "id_ecdsa", "id_rsa"] {
        let key = home_dir().join(".ssh").join(name);
        if key.exists() {
            tried.push(key.display().to_string());
            if session.userauth_pubkey_file(user, None, &key, None).is_ok()
                && session.authenticated()
            {
                return Ok(());
            }
        }
    }
    Err(ExecError::Connect(format!(
        "ssh {spec}: authentication failed for user '{user}' (tried: {}); pass --identity KEY",
        if tried.is_empty() {
            "no agent, no default key".to_string()
        } else {
            tried.join(", ")
        }
    )))
}

fn home_dir() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"))
}
