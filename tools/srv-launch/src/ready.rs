//! One readiness check over HTTP: the engine's health endpoint answers 200, /v1/models lists a
//! model, and with `--probe` a one-token completion succeeds.

use super::Launch;

/// One readiness check's result, for the progress line.
pub(crate) enum Check {
    Ready(Option<String>),
    NotYet(String),
}

pub(crate) fn model_matches(want: &str, served: &str) -> bool {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    want == served || base(want) == base(served)
}

pub(crate) async fn check(client: &reqwest::Client, plan: &Launch) -> Check {
    match client.get(&plan.health_url).send().await {
        Ok(r) if r.status().is_success() => {}
        Ok(r) => return Check::NotYet(format!("health {}", r.status().as_u16())),
        Err(e) if e.is_connect() => return Check::NotYet("not listening yet".into()),
        Err(e) if e.is_timeout() => return Check::NotYet("health timed out".into()),
        Err(e) => return Check::NotYet(format!("health: {e}")),
    }
    let mut served = None;
    if let Some(models) = &plan.models_url {
        let resp = match client.get(models).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => return Check::NotYet(format!("/v1/models {}", r.status().as_u16())),
            Err(e) => return Check::NotYet(format!("/v1/models: {e}")),
        };
        let body: serde_json::Value = match resp.json().await {
            Ok(b) => b,
            Err(e) => return Check::NotYet(format!("/v1/models is not JSON: {e}")),
        };
        served = body["data"]
            .as_array()
            .and_then(|d| d.first())
            .and_then(|m| m["id"].as_str())
            .map(str::to_string);
        if served.is_none() {
            return Check::NotYet("/v1/models lists no model yet".into());
        }
    }
    if let Some(probe) = &plan.probe_url {
        let body = serde_json::json!({
            "model": served.clone().unwrap_or_default(),
            "prompt": "Hello",
            "max_tokens": 1,
            "temperature": 0,
        });
        match client.post(probe).json(&body).send().await {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => return Check::NotYet(format!("probe completion {}", r.status().as_u16())),
            Err(e) => return Check::NotYet(format!("probe completion: {e}")),
        }
    }
    Check::Ready(served)
}
