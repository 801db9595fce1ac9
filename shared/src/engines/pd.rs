//! How an engine runs as a disaggregated prefill/decode group (`srv-launch ENGINE --pd xPyD`),
//! as data: each member's own flags and the proxy (or router) in front of them.

use crate::record::PdRole;

/// `{kv_dir}` in a member's flags: the group's directory for a connector that moves the KV
/// cache through the file system (beside the members' logs).
pub const KV_DIR: &str = "{kv_dir}";
/// `{bootstrap_port}` in a member's flags: a free port of the member's own (SGLang's prefill
/// servers each listen on one for the KV handshake).
pub const BOOTSTRAP_PORT: &str = "{bootstrap_port}";
/// A proxy program of `SRV_SIM` is srv-sim (the sibling binary where there is one).
pub const SRV_SIM: &str = "srv-sim";

/// One engine's group recipe.
#[derive(Debug, Clone, Copy)]
pub struct PdRecipe {
    /// What a prefill server gets, after the preset's own flags and before the user's (which
    /// come after `--` and so may override them: engines take an option's last value).
    pub prefill: &'static [&'static str],
    /// What a decode server gets, the same way.
    pub decode: &'static [&'static str],
    pub proxy: ProxyRecipe,
    /// How the KV cache moves, said on stderr at launch.
    pub note: &'static str,
}

/// The proxy or router the clients load.
#[derive(Debug, Clone, Copy)]
pub struct ProxyRecipe {
    /// Program and fixed arguments ([`SRV_SIM`] first: srv-sim).
    pub program: &'static [&'static str],
    pub host_flag: &'static str,
    pub port_flag: &'static str,
    /// Given once per prefill server, followed by its URL.
    pub prefill_flag: &'static str,
    /// The prefill server's bootstrap port follows its URL (SGLang's router).
    pub prefill_bootstrap: bool,
    /// Given once per decode server, followed by its URL.
    pub decode_flag: &'static str,
    /// Answers 200 once the proxy serves.
    pub health_path: &'static str,
}

impl PdRecipe {
    /// The member flags of `role` (none for the proxy), placeholders filled.
    pub fn member_flags(&self, role: PdRole, kv_dir: &str, bootstrap_port: u16) -> Vec<String> {
        let flags = match role {
            PdRole::Prefill => self.prefill,
            PdRole::Decode => self.decode,
            PdRole::Proxy => &[],
        };
        flags
            .iter()
            .map(|f| {
                f.replace(KV_DIR, kv_dir)
                    .replace(BOOTSTRAP_PORT, &bootstrap_port.to_string())
            })
            .collect()
    }

    /// Whether a member of `role` needs a bootstrap port of its own.
    pub fn needs_bootstrap_port(&self, role: PdRole) -> bool {
        self.member_flags(role, "", 0) != self.member_flags(role, "", 1)
    }

    /// The proxy's argv (without its program): its address, then each side's servers as
    /// (URL, bootstrap port).
    pub fn proxy_args(
        &self,
        bind: &str,
        port: u16,
        prefill: &[(String, u16)],
        decode: &[String],
    ) -> Vec<String> {
        let p = &self.proxy;
        let mut argv: Vec<String> = p.program[1..].iter().map(|s| s.to_string()).collect();
        argv.extend([p.host_flag.to_string(), bind.to_string()]);
        argv.extend([p.port_flag.to_string(), port.to_string()]);
        for (url, bootstrap) in prefill {
            argv.extend([p.prefill_flag.to_string(), url.clone()]);
            if p.prefill_bootstrap {
                argv.push(bootstrap.to_string());
            }
        }
        for url in decode {
            argv.extend([p.decode_flag.to_string(), url.clone()]);
        }
        argv
    }
}

/// srv-sim's proxy role: vLLM's disaggregated-proxy protocol (a prefill with `max_tokens` 1
/// and `kv_transfer_params`, then the decode), in front of any engine that speaks it.
const SIM_PROXY: ProxyRecipe = ProxyRecipe {
    program: &[SRV_SIM, "--pd-role", "proxy"],
    host_flag: "--host",
    port_flag: "--port",
    prefill_flag: "--prefill-url",
    prefill_bootstrap: false,
    decode_flag: "--decode-url",
    health_path: "/health",
};

/// vLLM (0.32): the KV connector moves each request's KV cache from the prefill server to the
/// decode one. `ExampleConnector` (formerly SharedStorageConnector) does it through files in
/// `{kv_dir}`, needing no GPU and no extra package; on GPUs pass `-- --kv-transfer-config
/// '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'` (the last one given wins). vLLM's
/// wheel ships no proxy (its toy proxy is an example script), so srv-sim's proxy role fronts it.
pub const VLLM: PdRecipe = PdRecipe {
    prefill: &[
        "--kv-transfer-config",
        r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_connector_extra_config":{"shared_storage_path":"{kv_dir}"}}"#,
    ],
    decode: &[
        "--kv-transfer-config",
        r#"{"kv_connector":"ExampleConnector","kv_role":"kv_both","kv_connector_extra_config":{"shared_storage_path":"{kv_dir}"}}"#,
    ],
    proxy: SIM_PROXY,
    note: "vLLM's ExampleConnector moves the KV cache through files in the group's directory (whole blocks only); on GPUs pass -- --kv-transfer-config with NixlConnector",
};

/// SGLang (0.5): `--disaggregation-mode` per member (its default transfer backend; pass
/// `-- --disaggregation-transfer-backend nixl` for another), each prefill server's bootstrap
/// port its own, and its router in PD mode in front.
pub const SGLANG: PdRecipe = PdRecipe {
    prefill: &[
        "--disaggregation-mode",
        "prefill",
        "--disaggregation-bootstrap-port",
        BOOTSTRAP_PORT,
    ],
    decode: &["--disaggregation-mode", "decode"],
    proxy: ProxyRecipe {
        program: &[
            "python3",
            "-m",
            "sglang_router.launch_router",
            "--pd-disaggregation",
        ],
        host_flag: "--host",
        port_flag: "--port",
        prefill_flag: "--prefill",
        prefill_bootstrap: true,
        decode_flag: "--decode",
        health_path: "/health",
    },
    note: "SGLang's members transfer the KV cache with their --disaggregation-transfer-backend; its router fronts them",
};

/// srv-sim's roles: each models its side and the transfer between them.
pub const SIM: PdRecipe = PdRecipe {
    prefill: &["--pd-role", "prefill"],
    decode: &["--pd-role", "decode"],
    proxy: SIM_PROXY,
    note: "srv-sim's members model the prefill, the KV transfer and the decode",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_flags_fill_the_kv_dir_and_the_bootstrap_port() {
        let v = VLLM.member_flags(PdRole::Prefill, "/tmp/g-kv", 7);
        assert_eq!(v[0], "--kv-transfer-config");
        let cfg: serde_json::Value = serde_json::from_str(&v[1]).unwrap();
        assert_eq!(
            cfg["kv_connector_extra_config"]["shared_storage_path"],
            "/tmp/g-kv"
        );
        assert!(SGLANG.needs_bootstrap_port(PdRole::Prefill));
        assert!(!SGLANG.needs_bootstrap_port(PdRole::Decode));
        assert!(!VLLM.needs_bootstrap_port(PdRole::Prefill));
        assert_eq!(
            SGLANG.member_flags(PdRole::Prefill, "", 8998).join(" "),
            "--disaggregation-mode prefill --disaggregation-bootstrap-port 8998"
        );
        assert!(SIM.member_flags(PdRole::Proxy, "", 0).is_empty());
    }

    #[test]
    fn the_proxy_is_told_every_member() {
        let prefill = [
            ("http://a:1".to_string(), 9),
            ("http://b:2".to_string(), 10),
        ];
        let decode = ["http://c:3".to_string()];
        assert_eq!(
            SGLANG
                .proxy_args("0.0.0.0", 80, &prefill, &decode)
                .join(" "),
            "-m sglang_router.launch_router --pd-disaggregation --host 0.0.0.0 --port 80 --prefill http://a:1 9 --prefill http://b:2 10 --decode http://c:3"
        );
        assert_eq!(
            SIM.proxy_args("127.0.0.1", 80, &prefill[..1], &decode)
                .join(" "),
            "--pd-role proxy --host 127.0.0.1 --port 80 --prefill-url http://a:1 --decode-url http://c:3"
        );
    }
}
