//! Trust in both directions: the server's host key checked against known_hosts (an unknown
//! key refused unless `--accept-new-host`, a changed key always), then our authentication (an
//! explicit key, else the agent, else the default keys). Each refusal says what to fix.

use super::host::{HostSpec, SshOptions};
use crate::diag;
use crate::exec::ExecError;
use std::io::Write;
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
    let mut known = session
        .known_hosts()
        .map_err(|e| ExecError::Connect(format!("ssh {spec}: known_hosts: {e}")))?;
    // Line by line, so one entry libssh2 cannot parse (certificates, sk keys) does not hide
    // the others.
    if let Ok(text) = std::fs::read_to_string(&file) {
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
                continue;
            }
            let _ = known.read_str(line, ssh2::KnownHostFileKind::OpenSSH);
        }
    }
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
    match known.check_port(&spec.addr, spec.port, key) {
        ssh2::CheckResult::Match => Ok(()),
        ssh2::CheckResult::Mismatch => Err(ExecError::Connect(format!(
            "ssh {spec}: HOST KEY CHANGED: {} in {} does not match the {type_name} key the server \
             sent ({fingerprint}); refusing to connect. If the host was reinstalled, remove the old \
             line (ssh-keygen -R '{}' -f {}) and rerun",
            spec.known_hosts_name(),
            file.display(),
            spec.known_hosts_name(),
            file.display()
        ))),
        ssh2::CheckResult::NotFound if opts.accept_new_host => {
            use base64::Engine;
            let line = format!(
                "{} {type_name} {}\n",
                spec.known_hosts_name(),
                base64::engine::general_purpose::STANDARD.encode(key)
            );
            if let Some(dir) = file.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .and_then(|mut f| f.write_all(line.as_bytes()))
                .map_err(|e| {
                    ExecError::Connect(format!(
                        "ssh {spec}: cannot record the new host key in {}: {e}",
                        file.display()
                    ))
                })?;
            diag::info(format!(
                "trusting new host key for {} ({type_name} {fingerprint}), added to {}",
                spec.known_hosts_name(),
                file.display()
            ));
            Ok(())
        }
        ssh2::CheckResult::NotFound => Err(ExecError::Connect(format!(
            "ssh {spec}: unknown host key ({type_name} {fingerprint}): {} is not in {}; verify the \
             fingerprint and rerun with --accept-new-host to trust it",
            spec.known_hosts_name(),
            file.display()
        ))),
        ssh2::CheckResult::Failure => Err(ExecError::Connect(format!(
            "ssh {spec}: cannot check the host key against {}",
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
