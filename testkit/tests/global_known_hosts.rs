//! The system's known_hosts files (OpenSSH's GlobalKnownHostsFile, /etc/ssh/ssh_known_hosts
//! and ssh_known_hosts2 by default) are read after the user's, against the real loopback sshd:
//! a key found only there is trusted, and a missing one is skipped.

use servbench::exec::{Ssh, SshOptions};

#[test]
fn a_host_key_in_the_system_known_hosts_file_is_trusted() {
    let s = testkit::sshd();
    let dir = tempfile::tempdir().unwrap();
    let user_file = dir.path().join("known_hosts");
    let system_file = dir.path().join("ssh_known_hosts");
    let opts = |accept_new_host| SshOptions {
        identity: Some(s.key.clone().into()),
        known_hosts: Some(user_file.clone()),
        global_known_hosts: vec![dir.path().join("absent"), system_file.clone()],
        accept_new_host,
        ..SshOptions::default()
    };
    let refused = Ssh::connect(&s.target, &opts(false))
        .err()
        .expect("unknown key refused");
    assert!(
        refused.to_string().contains("unknown host key"),
        "{refused}"
    );
    assert!(
        refused.to_string().contains("ssh_known_hosts"),
        "names the files: {refused}"
    );
    std::fs::copy(&s.known_hosts, &system_file).unwrap();
    Ssh::connect(&s.target, &opts(false)).expect("the system file's key is trusted");
    assert!(!user_file.exists(), "nothing recorded for a known key");
}
