//! Trust in both directions: the server's host key checked against known_hosts as OpenSSH
//! reads it (`known_hosts.rs`: an unknown key refused unless `--accept-new-host`, a changed or
//! revoked key always), then our authentication (an explicit key, else the agent, else the
//! default keys). Each refusal says what to fix.

use super::host::{HostSpec, SshOptions};
use super::known_hosts::{self, KnownHosts, Verdict};
use crate::diag;
use crate::exec::ExecError;
use std::path::PathBuf;

pub(super) fn check_host_key(
    session: &ssh2::Session,
    spec: &HostSpec,
    opts: &SshOptions,
) -> Result<(), ExecError> {
    let (key, key_type) = session
        .host_key()
        .ok_or_else(|| ExecError::Connect(format!("ssh {spec}: the server sent no host key")))?;
    let file = opts
        .known_hosts
        .clone()
        .unwrap_or_else(|| home_dir().join(".ssh/known_hosts"));
    let text = match std::fs::read(&file) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            return Err(ExecError::Connect(format!(
                "ssh {spec}: cannot read {}: {e}",
                file.display()
            )));
        }
    };
    let fingerprint = session
        .host_key_hash(ssh2::HashType::Sha256)
        .map(|h| {
            use base64::Engine;
            format!(
                "SHA256:{}",
                base64::engine::general_purpose::STANDARD_NO_PAD.encode(h)
            )
        })
        .unwrap_or_else(|| "unknown".into());
    let type_name = match key_type {
        ssh2::HostKeyType::Rsa => "ssh-rsa",
        ssh2::HostKeyType::Dss => "ssh-dss",
        ssh2::HostKeyType::Ecdsa256 => "ecdsa-sha2-nistp256",
        ssh2::HostKeyType::Ecdsa384 => "ecdsa-sha2-nistp384",
        ssh2::HostKeyType::Ecdsa521 => "ecdsa-sha2-nistp521",
        ssh2::HostKeyType::Ed25519 => "ssh-ed25519",
        ssh2::HostKeyType::Unknown => "unknown",
    };
    let name = spec.known_hosts_name();
    match KnownHosts::parse(&text).check(&name, key) {
        Verdict::Known => Ok(()),
        Verdict::Revoked { line } => Err(ExecError::Connect(format!(
            "ssh {spec}: REVOKED HOST KEY: the {type_name} key the server sent ({fingerprint}) is \
             marked @revoked in {}:{line}; refusing to connect (--accept-new-host never trusts a \
             revoked key). Ask the host's administrator for its current key",
            file.display()
        ))),
        Verdict::Changed { line } => Err(ExecError::Connect(format!(
            "ssh {spec}: HOST KEY CHANGED: {name} in {}:{line} does not match the {type_name} key \
             the server sent ({fingerprint}); refusing to connect. If the host was reinstalled, \
             remove the old line (ssh-keygen -R '{name}' -f {}) and rerun",
            file.display(),
            file.display()
        ))),
        Verdict::Unknown if opts.accept_new_host => {
            known_hosts::append(&file, &name, type_name, key).map_err(|e| {
                ExecError::Connect(format!(
                    "ssh {spec}: cannot record the new host key in {}: {e}",
                    file.display()
                ))
            })?;
            diag::info(format!(
                "trusting new host key for {name} ({type_name} {fingerprint}), added to {}",
                file.display()
            ));
            Ok(())
        }
        Verdict::Unknown => Err(ExecError::Connect(format!(
            "ssh {spec}: unknown host key ({type_name} {fingerprint}): {name} is not in {}; verify \
             the fingerprint and rerun with --accept-new-host to trust it",
            file.display()
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
