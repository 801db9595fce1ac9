//! srv-kill's GPU side on a machine without GPUs: `--gpu` finds its targets, and every kill
//! confirms the GPU memory was released, through nvidia-smi's query interface. nvidia-smi is not
//! ours, so a small stand-in script answers the two queries srv-kill makes, from a table the test
//! writes: GPU i is held by the process on line i ("PID MIB", or "PID MIB stuck" for a context the
//! driver keeps after the process is gone). Everything else (srv-kill, the processes it kills,
//! /proc) is real. The stand-in goes first on PATH, so a GPU machine's real nvidia-smi is never
//! asked, and its processes never targeted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use testkit::stderr;
use testkit::{Guard, json_lines, matched_pids, wait_gone};

/// Answers `--query-compute-apps=pid` and `--query-gpu=index,memory.used` like nvidia-smi with
/// `--format=csv,noheader,nounits`. A zombie holds nothing: the driver frees a context at exit.
const FAKE_NVIDIA_SMI: &str = r#"#!/bin/sh
held() {
  [ "$2" = stuck ] && return 0
  [ -r "/proc/$1/stat" ] || return 1
  state=$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)
  [ "$state" != Z ] && [ "$state" != X ]
}
case "$*" in
  *--query-compute-apps=pid*)
    while read -r pid mib stuck; do held "$pid" "$stuck" && echo "$pid"; done < "$SERVBENCH_FAKE_GPUS"
    true ;;
  *--query-gpu=index,memory.used*)
    i=0
    while read -r pid mib stuck; do
      if held "$pid" "$stuck"; then echo "$i, $mib"; else echo "$i, 0"; fi
      i=$((i + 1))
    done < "$SERVBENCH_FAKE_GPUS" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 2 ;;
esac
"#;

struct FakeGpus {
    dir: PathBuf,
    table: PathBuf,
}

impl FakeGpus {
    fn new(name: &str, table: &str) -> FakeGpus {
        let dir = std::env::temp_dir().join(format!("servbench-gpu-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let smi = dir.join("bin/nvidia-smi");
        std::fs::write(&smi, FAKE_NVIDIA_SMI).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
        let table_path = dir.join("gpus");
        std::fs::write(&table_path, table).unwrap();
        FakeGpus {
            dir,
            table: table_path,
        }
    }

    /// srv-kill with the stand-in first on PATH.
    fn srv_kill(&self, args: &[&str]) -> testkit::Run {
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        testkit::call("srv-kill")
            .args(args)
            .env("PATH", path)
            .env("SERVBENCH_FAKE_GPUS", &self.table)
            .run()
    }
}

impl Drop for FakeGpus {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A process standing for a GPU worker; `ignore_term` makes it survive SIGTERM as stuck
/// NCCL workers do.
fn worker(ignore_term: bool) -> Guard {
    let script = if ignore_term {
        "trap '' TERM; while :; do sleep 1; done"
    } else {
        "sleep 60"
    };
    let mut c = Command::new("sh");
    c.arg("-c").arg(script);
    Guard::spawn(c)
}

const MIB: u64 = 1 << 20;

#[test]
fn gpu_kills_every_compute_process_and_confirms_the_memory_released() {
    let (a, b) = (worker(false), worker(true));
    let gpus = FakeGpus::new("all", &format!("{} 1000\n{} 2000\n", a.pid(), b.pid()));
    let out = gpus.srv_kill(&["--gpu", "--grace", "500ms", "--gpu-wait", "10s"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let recs = json_lines(&out.stdout);
    assert_eq!(recs.len(), 1);
    let k = &recs[0];
    assert_eq!(k["kind"], "kill");
    assert_eq!(k["target"], "gpu");
    assert_eq!(k["ok"], true, "{k}");
    let matched = matched_pids(k);
    assert!(matched.contains(&a.pid()), "{k}");
    assert!(matched.contains(&b.pid()), "{k}");
    // The TERM-ignoring worker needed SIGKILL.
    assert_eq!(k["signals"], serde_json::json!(["TERM", "KILL"]));
    assert_eq!(
        k["gpu_used_before_bytes"],
        serde_json::json!([1000 * MIB, 2000 * MIB])
    );
    assert_eq!(k["gpu_used_after_bytes"], serde_json::json!([0, 0]));
    assert_eq!(k["gpu_released"], true);
    assert!(wait_gone(&[a.pid(), b.pid()], Duration::from_secs(2)));
}

#[test]
fn memory_still_held_after_the_kill_is_a_failure_not_a_success() {
    let w = worker(false);
    let gpus = FakeGpus::new("stuck", &format!("{} 4000 stuck\n", w.pid()));
    let pid = w.pid().to_string();
    let out = gpus.srv_kill(&["--pid", &pid, "--gpu-wait", "1s"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let k = &json_lines(&out.stdout)[0];
    assert_eq!(k["ok"], false, "{k}");
    assert_eq!(k["gpu_released"], false);
    assert_eq!(k["gpu_used_after_bytes"], serde_json::json!([4000 * MIB]));
    assert!(
        k["error"]
            .as_str()
            .unwrap()
            .contains("GPU memory still held"),
        "{k}"
    );
    assert!(err.contains("GPU memory still held"), "{err}");
    // The process itself is gone: only the GPU side failed.
    assert!(wait_gone(&[w.pid()], Duration::from_secs(2)));
}

#[test]
fn gpu_without_nvidia_smi_fails_with_a_clear_reason() {
    // PATH holds a shell and nothing else: no nvidia-smi to find.
    let dir = FakeGpus::new("none", "");
    let bin = dir.dir.join("shell-only");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(Path::new("/bin/sh"), bin.join("sh")).unwrap();
    let out = testkit::call("srv-kill")
        .arg("--gpu")
        .env("PATH", &bin)
        .run();
    let err = stderr(&out);
    // A target that cannot be resolved is a failed kill, as data: a record and exit 1.
    assert_eq!(out.status.code(), Some(1), "{err}");
    let k = &json_lines(&out.stdout)[0];
    assert_eq!(k["ok"], false);
    assert_eq!(k["matched"], serde_json::json!([]));
    let why = "--gpu needs nvidia-smi, which localhost does not have";
    assert_eq!(k["error"], why);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.starts_with("srv-kill: ") && err.contains(why), "{err}");
}
