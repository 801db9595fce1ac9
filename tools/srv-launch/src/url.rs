//! The parts of a readiness URL srv-launch needs: its origin and the port it names.

/// The authority of an `http://` URL; `None` for anything else (or a `{port}` not yet replaced).
fn http_authority(url: &str) -> Option<http::uri::Authority> {
    let uri: http::Uri = url.parse().ok()?;
    (uri.scheme_str() == Some("http"))
        .then(|| uri.authority().cloned())
        .flatten()
        .filter(|a| !a.host().is_empty())
}

/// `http://host:port` of an `http://` URL.
pub(crate) fn origin_of(url: &str) -> Option<String> {
    http_authority(url).map(|a| format!("http://{a}"))
}

/// The port an `http://` URL names, when it names one.
pub(crate) fn port_of_url(url: &str) -> Option<u16> {
    http_authority(url)?.port_u16()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_urls_give_their_origin_and_port() {
        assert_eq!(
            origin_of("http://127.0.0.1:8000/health").as_deref(),
            Some("http://127.0.0.1:8000")
        );
        assert_eq!(port_of_url("http://127.0.0.1:8000/health"), Some(8000));
        assert_eq!(
            origin_of("http://[::1]:9000/v1/models?x=1").as_deref(),
            Some("http://[::1]:9000")
        );
        assert_eq!(port_of_url("http://[::1]:9000/"), Some(9000));
        // No port named, or not yet replaced: srv-launch picks a free one.
        assert_eq!(port_of_url("http://gpu1/health"), None);
        assert_eq!(port_of_url("http://127.0.0.1:{port}/health"), None);
        assert_eq!(port_of_url("http://[::1]/"), None);
        for bad in ["https://h:1/", "127.0.0.1:8000", "http://", "ftp://h/"] {
            assert_eq!(origin_of(bad), None, "{bad}");
        }
    }
}
