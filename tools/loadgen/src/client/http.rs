//! A small HTTP/1.1 client on hyper's connection API: keep-alive connections pooled and
//! reused (the pool grows to the number of requests in flight, no further), TCP_NODELAY, and
//! response bodies read frame by frame as they arrive so each chunk is timed when it lands.
//! `https://` targets speak the same HTTP/1.1 over TLS ([`crate::client::tls`]).

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use servbench::record::ErrorClass;
use std::sync::Mutex;
use std::time::Duration;
use tokio::net::TcpStream;

/// The TLS side of an `https://` target.
#[derive(Clone)]
pub struct Tls {
    pub connector: tokio_rustls::TlsConnector,
    /// The name the server's certificate must carry.
    pub name: rustls::pki_types::ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.name)
    }
}

/// Where requests go: `http[s]://host:port[/prefix]`.
#[derive(Debug, Clone)]
pub struct Target {
    /// The URL as given, for messages.
    pub url: String,
    /// `host:port`, to connect to and for the Host header.
    pub authority: String,
    /// Path prefix without a trailing slash (`""` or `/proxy`).
    pub prefix: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The URL's host (brackets kept for IPv6), for the TLS server name.
    pub host: String,
    /// An `https://` URL: connections need [`Target::tls`].
    pub https: bool,
    /// Set by [`Target::with_trust`] for an https target.
    pub tls: Option<Tls>,
}

impl Target {
    /// Errors are one line that names the URL, for the caller to prefix with its source.
    pub fn parse(url: &str, headers: Vec<(HeaderName, HeaderValue)>) -> Result<Target, String> {
        const EXAMPLE: &str = "e.g. http://127.0.0.1:8000";
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e| format!("{url}: not a URL ({e}; {EXAMPLE})"))?;
        let https = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(format!("{url}: not an http:// or https:// URL ({EXAMPLE})")),
        };
        let Some(host) = uri.host().filter(|h| !h.is_empty()) else {
            return Err(format!("{url}: no host ({EXAMPLE})"));
        };
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(format!(
                "{url}: user info in the URL is not supported; use --header"
            ));
        }
        if uri.query().is_some() {
            return Err(format!(
                "{url}: a query (?...) is not supported in the base URL"
            ));
        }
        // `port_u16` is None both without a port and with one out of range (`:99999`).
        let written = uri
            .authority()
            .and_then(|a| a.as_str().strip_prefix(host))
            .and_then(|rest| rest.strip_prefix(':'))
            .unwrap_or("");
        let port = match uri.port_u16() {
            Some(p) => p,
            None if written.is_empty() && https => 443,
            None if written.is_empty() => 80,
            None => return Err(format!("{url}: port {written} is not a port number")),
        };
        // `host()` keeps an IPv6 address's brackets, as `host:port` needs them.
        let authority = format!("{host}:{port}");
        let mut prefix = uri.path().trim_end_matches('/').to_string();
        // `--url http://host:8000/v1` is a common way to write the OpenAI base URL.
        if prefix.ends_with("/v1") {
            prefix.truncate(prefix.len() - 3);
        }
        Ok(Target {
            url: url.trim_end_matches('/').to_string(),
            authority,
            prefix,
            headers,
            host: host.to_string(),
            https,
            tls: None,
        })
    }

    /// Sets up TLS for an https target with `trust`; for an http one, `trust` must be the
    /// default (a `--cacert` or `--insecure` that would do nothing is refused).
    pub fn with_trust(mut self, trust: &crate::client::tls::Trust) -> Result<Target, String> {
        if !self.https {
            return match trust {
                crate::client::tls::Trust::System => Ok(self),
                _ => Err(format!(
                    "{}: --cacert and --insecure apply to https:// URLs only",
                    self.url
                )),
            };
        }
        self.tls = Some(Tls {
            connector: crate::client::tls::connector(trust)?,
            name: crate::client::tls::server_name(&self.host)?,
        });
        Ok(self)
    }

    pub fn request(&self, method: hyper::Method, path: &str, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::new(Full::new(body));
        *req.method_mut() = method;
        // The path is ours and well formed; a bad prefix was rejected by `parse`.
        *req.uri_mut() = format!("{}{}", self.prefix, path)
            .parse()
            .unwrap_or_else(|_| hyper::Uri::from_static("/"));
        let h = req.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&self.authority) {
            h.insert(hyper::header::HOST, v);
        }
        h.insert(
            hyper::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        for (k, v) in &self.headers {
            h.insert(k.clone(), v.clone());
        }
        req
    }
}

/// A failure of one exchange, classified.
#[derive(Debug, Clone)]
pub struct Failure {
    pub class: ErrorClass,
    pub message: String,
    pub http_status: Option<u16>,
}

impl Failure {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Failure {
        Failure {
            class,
            message: message.into(),
            http_status: None,
        }
    }
}

/// Keep-alive connections to one target.
pub struct Pool {
    pub target: Target,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
}

/// A connection checked out of the pool; `reused` says whether it served a request before.
pub struct Conn {
    pub sender: SendRequest<Full<Bytes>>,
    pub reused: bool,
}

impl Pool {
    pub fn new(target: Target) -> Pool {
        Pool {
            target,
            idle: Mutex::new(Vec::new()),
        }
    }

    pub async fn checkout(&self) -> Result<Conn, Failure> {
        loop {
            let popped = self.idle.lock().map(|mut v| v.pop()).unwrap_or(None);
            match popped {
                Some(sender) if sender.is_ready() => {
                    return Ok(Conn {
                        sender,
                        reused: true,
                    });
                }
                Some(_) => continue,
                None => break,
            }
        }
        Ok(Conn {
            sender: self.connect().await?,
            reused: false,
        })
    }

    /// A new connection (TLS handshake included for https), its driver task spawned.
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, Failure> {
        let stream = TcpStream::connect(&self.target.authority)
            .await
            .map_err(|e| connect_failure(&self.target, &e))?;
        let _ = stream.set_nodelay(true);
        match (&self.target.tls, self.target.https) {
            (None, false) => handshake(stream).await,
            (Some(tls), _) => {
                let stream = tls
                    .connector
                    .connect(tls.name.clone(), stream)
                    .await
                    .map_err(|e| tls_failure(&self.target, &e))?;
                handshake(stream).await
            }
            (None, true) => Err(Failure::new(
                ErrorClass::Tls,
                format!("{}: no TLS set up for this https target", self.target.url),
            )),
        }
    }

    /// Opens connections until `n` are idle, so a point's first requests do not pay for the
    /// TCP handshake inside their TTFT. Failures are left for the requests to meet; each
    /// connection gets at most `limit`.
    pub async fn prewarm(self: &std::sync::Arc<Self>, n: usize, limit: Duration) {
        let have = self.idle.lock().map(|v| v.len()).unwrap_or(0);
        let mut set = tokio::task::JoinSet::new();
        for _ in have..n {
            let pool = self.clone();
            set.spawn(async move {
                if let Ok(Ok(sender)) = tokio::time::timeout(limit, pool.connect()).await {
                    pool.give_back(Conn {
                        sender,
                        reused: false,
                    });
                }
            });
            // Bounded: never more than 512 handshakes in flight.
            if set.len() >= 512 {
                set.join_next().await;
            }
        }
        while set.join_next().await.is_some() {}
    }

    /// Returns a connection whose response was read to the end, for the next request.
    pub fn give_back(&self, conn: Conn) {
        if !conn.sender.is_closed()
            && let Ok(mut v) = self.idle.lock()
        {
            v.push(conn.sender);
        }
    }

    /// Sends a request on a pooled connection; retries once on a fresh connection when a reused
    /// one turns out to have been closed by the server while idle.
    pub async fn send(
        &self,
        make: impl Fn() -> Request<Full<Bytes>>,
    ) -> Result<(Response<Incoming>, Conn), Failure> {
        let mut conn = self.checkout().await?;
        let _ = std::future::poll_fn(|cx| conn.sender.poll_ready(cx)).await;
        match conn.sender.send_request(make()).await {
            Ok(resp) => Ok((resp, conn)),
            Err(e)
                if conn.reused
                    && (e.is_canceled() || e.is_closed() || e.is_incomplete_message()) =>
            {
                let mut fresh = Conn {
                    sender: self.connect().await?,
                    reused: false,
                };
                let resp = fresh
                    .sender
                    .send_request(make())
                    .await
                    .map_err(|e| hyper_failure(&e))?;
                Ok((resp, fresh))
            }
            Err(e) => Err(hyper_failure(&e)),
        }
    }

    /// A whole small exchange (models, tokenize, probes): status and body, within `limit`
    /// (`--timeout`), connecting included.
    pub async fn exchange(
        &self,
        method: hyper::Method,
        path: &str,
        body: Bytes,
        limit: Duration,
    ) -> Result<(u16, Bytes), Failure> {
        self.exchange_bounded(method, path, body, limit, MAX_WHOLE_BODY_BYTES)
            .await
    }

    /// [`Pool::exchange`] reading at most `max_bytes` of the answer.
    pub async fn exchange_bounded(
        &self,
        method: hyper::Method,
        path: &str,
        body: Bytes,
        limit: Duration,
        max_bytes: usize,
    ) -> Result<(u16, Bytes), Failure> {
        let work = async {
            let (resp, conn) = self
                .send(|| self.target.request(method.clone(), path, body.clone()))
                .await?;
            let status = resp.status().as_u16();
            let bytes = read_at_most(resp.into_body(), max_bytes).await?;
            self.give_back(conn);
            Ok((status, bytes))
        };
        tokio::time::timeout(limit, work).await.unwrap_or_else(|_| {
            Err(Failure::new(
                ErrorClass::Timeout,
                format!("no answer within --timeout {}s", limit.as_secs_f64()),
            ))
        })
    }
}

/// The most of one answer read whole into memory (probes, `/metrics`, a `--no-stream`
/// answer): a server that sends more fails the request instead of growing loadgen without end.
pub const MAX_WHOLE_BODY_BYTES: usize = 64 << 20;

/// An answer's whole body, at most [`MAX_WHOLE_BODY_BYTES`].
pub async fn read_whole(body: Incoming) -> Result<Bytes, Failure> {
    read_at_most(body, MAX_WHOLE_BODY_BYTES).await
}

/// An answer's whole body, at most `max` bytes.
async fn read_at_most(body: Incoming, max: usize) -> Result<Bytes, Failure> {
    match Limited::new(body, max).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Failure::new(
            ErrorClass::Protocol,
            format!(
                "answer larger than {} MiB: not an answer to this request",
                max >> 20
            ),
        )),
        Err(e) => match e.downcast::<hyper::Error>() {
            Ok(e) => Err(hyper_failure(&e)),
            Err(e) => Err(Failure::new(ErrorClass::Protocol, e.to_string())),
        },
    }
}

/// HTTP/1.1 over `io`, its connection driven by a task of its own.
async fn handshake<T>(io: T) -> Result<SendRequest<Full<Bytes>>, Failure>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, conn) = http1::Builder::new()
        .max_buf_size(8 << 20)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| Failure::new(ErrorClass::Connect, format!("HTTP handshake: {e}")))?;
    tokio::spawn(async move {
        // Ends when the server closes the connection or the sender is dropped.
        let _ = conn.await;
    });
    Ok(sender)
}

/// A failed TLS handshake, with the fix for what failed: a certificate for other names, one
/// not signed by a trusted CA, a CA certificate used as the server's own, or a server that
/// answered in plain HTTP.
pub fn tls_failure(target: &Target, e: &std::io::Error) -> Failure {
    use rustls::{CertificateError, Error as Tls, InvalidMessage};
    let host = target
        .authority
        .rsplit_once(':')
        .map_or(target.authority.as_str(), |(h, _)| h);
    let fix = match e.get_ref().and_then(|inner| inner.downcast_ref::<Tls>()) {
        Some(Tls::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => format!(
            " (the certificate is for other names than {host}: connect by a name it lists, or give the server a certificate for {host}; a CA file does not change the names)"
        ),
        Some(Tls::InvalidCertificate(CertificateError::Other(o)))
            if o.to_string().contains("CaUsedAsEndEntity") =>
        {
            // `openssl req -x509` marks its self-signed certificates CA:TRUE by default.
            " (the server presents a CA certificate as its own: pass that very certificate with --cacert to pin it, or give the server a certificate signed by a CA passed with --cacert; or --insecure to skip the check)".to_string()
        }
        Some(Tls::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            " (the server's certificate is not signed by a CA loadgen trusts: pass --cacert FILE with that CA, or --insecure to skip the check)".to_string()
        }
        Some(Tls::InvalidMessage(InvalidMessage::InvalidContentType)) => {
            " (the server answered in plain HTTP, not TLS: use an http:// URL)".to_string()
        }
        _ => String::new(),
    };
    Failure::new(
        ErrorClass::Tls,
        format!("TLS handshake with {} failed: {e}{fix}", target.url),
    )
}

pub fn connect_failure(target: &Target, e: &std::io::Error) -> Failure {
    Failure::new(
        ErrorClass::Connect,
        format!(
            "cannot connect to {} ({}): {e}",
            target.url, target.authority
        ),
    )
}

/// Classifies a hyper error: resets and early closes, else protocol errors.
pub fn hyper_failure(e: &hyper::Error) -> Failure {
    let io_kind = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(|io| io.kind());
    let class = if e.is_incomplete_message()
        || e.is_closed()
        || e.is_canceled()
        || matches!(
            io_kind,
            Some(
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        ) {
        ErrorClass::Reset
    } else if e.is_parse() || e.is_user() {
        ErrorClass::Protocol
    } else {
        ErrorClass::Reset
    };
    // hyper's own text is terse ("connection error"): add the cause chain.
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    if e.is_parse() && message.contains("invalid HTTP version") {
        // What a TLS server's alert (0x15 0x03 ...) reads as to an HTTP/1.1 parser.
        message.push_str(
            " (the answer is not HTTP/1.x; an HTTPS server answers a plain request so: if it serves TLS, use an https:// URL)",
        );
    }
    Failure::new(class, message)
}

/// The HTTP status class of a non-2xx answer. A redirect (3xx) is a protocol failure naming
/// where it points: loadgen measures the address it was given and follows none.
pub fn status_failure(status: u16, headers: &hyper::HeaderMap, body: &[u8]) -> Failure {
    let text = String::from_utf8_lossy(&body[..body.len().min(400)]);
    let excerpt = servbench::jsonl::excerpt(text.trim(), 200).replace('\n', " ");
    if (300..400).contains(&status) {
        let to = headers
            .get(hyper::header::LOCATION)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        let to = match to {
            Some(l) => format!("to {}", servbench::jsonl::excerpt(&l, 200)),
            None => "without a Location".to_string(),
        };
        return Failure {
            class: ErrorClass::Protocol,
            message: format!(
                "HTTP {status}: a redirect {to}; loadgen follows no redirect: give --url the address that serves the API"
            ),
            http_status: Some(status),
        };
    }
    let class = if status >= 500 {
        ErrorClass::Http5xx
    } else {
        ErrorClass::Http4xx
    };
    Failure {
        class,
        message: format!("HTTP {status}: {excerpt}"),
        http_status: Some(status),
    }
}

/// An answer whose body is content-encoded (gzip, br, ...): loadgen asks for none and
/// decodes none, so its bytes are not the stream; refused by the encoding's name.
pub fn encoding_failure(headers: &hyper::HeaderMap) -> Option<Failure> {
    let enc = headers.get(hyper::header::CONTENT_ENCODING)?;
    let enc = String::from_utf8_lossy(enc.as_bytes()).trim().to_string();
    if enc.is_empty() || enc.eq_ignore_ascii_case("identity") {
        return None;
    }
    Some(Failure::new(
        ErrorClass::Protocol,
        format!(
            "the answer is content-encoded ({}), which loadgen did not ask for and does not decode: turn compression off in the server or the proxy in front of it",
            servbench::jsonl::excerpt(&enc, 60)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("http://127.0.0.1:8000", vec![]).unwrap();
        assert_eq!(
            (t.authority.as_str(), t.prefix.as_str()),
            ("127.0.0.1:8000", "")
        );
        let t = Target::parse("http://localhost:9/v1/", vec![]).unwrap();
        assert_eq!(
            (t.authority.as_str(), t.prefix.as_str()),
            ("localhost:9", "")
        );
        let t = Target::parse("http://h/api", vec![]).unwrap();
        assert_eq!((t.authority.as_str(), t.prefix.as_str()), ("h:80", "/api"));
        let t = Target::parse("https://h/v1", vec![]).unwrap();
        assert_eq!((t.authority.as_str(), t.https), ("h:443", true));
        assert!(
            Target::parse("http://h", vec![])
                .unwrap()
                .with_trust(&crate::client::tls::Trust::Insecure)
                .unwrap_err()
                .contains("--cacert and --insecure apply to https:// URLs only")
        );
        assert!(Target::parse("h:80", vec![]).is_err());
        let t = Target::parse("http://[::1]:9000/proxy/", vec![]).unwrap();
        assert_eq!(
            (t.authority.as_str(), t.prefix.as_str()),
            ("[::1]:9000", "/proxy")
        );
        let t = Target::parse("http://[::1]", vec![]).unwrap();
        assert_eq!(t.authority, "[::1]:80");
    }

    /// Every rejected URL gets one line that names it and says what is wrong.
    #[test]
    fn bad_urls_are_named_in_one_line() {
        for (url, says) in [
            ("ftp://x", "not an http:// or https:// URL"),
            ("h:80", "not an http:// or https:// URL"),
            ("127.0.0.1:8000", "not an http:// or https:// URL"),
            ("http://", "not a URL"),
            ("http://h:99999", "not a port number"),
            ("http://a b", "not a URL"),
            ("http://u:p@h:80", "user info"),
            ("http://h:80/?x=1", "query"),
        ] {
            let e = Target::parse(url, vec![]).unwrap_err();
            assert!(e.starts_with(&format!("{url}: ")), "{url}: {e}");
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains('\n'), "{url}: {e}");
        }
    }

    #[test]
    fn status_classes() {
        let none = hyper::HeaderMap::new();
        assert_eq!(
            status_failure(503, &none, b"busy").class,
            ErrorClass::Http5xx
        );
        let f = status_failure(404, &none, b"{\"error\":\"no such model\"}");
        assert_eq!(f.class, ErrorClass::Http4xx);
        assert!(f.message.contains("no such model"), "{}", f.message);
    }
}
