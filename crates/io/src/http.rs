//! The one way sentinel builds an HTTP agent: explicit timeouts, every
//! status returned as a response (never thrown), no automatic redirects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// An agent for one peer. `ca_file` replaces the built-in roots with a
/// private CA's PEM certificates (self-hosted instances).
pub fn agent(timeout: Duration, ca_file: Option<&Path>) -> Result<ureq::Agent, String> {
    let mut builder = ureq::Agent::config_builder()
        .http_status_as_error(false)
        // Redirects are for the caller to judge: a token must never follow
        // one to another host.
        .max_redirects(0)
        .max_redirects_will_error(false)
        .timeout_connect(Some(timeout.min(Duration::from_secs(10))))
        .timeout_global(Some(timeout))
        .user_agent(concat!("sentinel/", env!("CARGO_PKG_VERSION")));
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| {
            format!(
                "cannot read the CA bundle `{}`: {e}; check --ca-file (or SSL_CERT_FILE)",
                path.display()
            )
        })?;
        let certs: Vec<ureq::tls::Certificate<'static>> = ureq::tls::parse_pem(&pem)
            .filter_map(|item| match item {
                Ok(ureq::tls::PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        if certs.is_empty() {
            return Err(format!(
                "the CA bundle `{}` holds no PEM certificate; point --ca-file at the CA's certificate",
                path.display()
            ));
        }
        builder = builder.tls_config(
            ureq::tls::TlsConfig::builder()
                .root_certs(ureq::tls::RootCerts::Specific(Arc::new(certs)))
                .build(),
        );
    }
    Ok(builder.build().into())
}

/// A transport failure in a few words, without the URL's query (which may
/// carry paths) and never with a header value (which may carry a token).
pub fn transport_message(e: &ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(_) => "timed out".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::Io(io) => format!("connection error ({})", io.kind()),
        other => format!("request failed ({other})"),
    }
}

/// The fields of a request to GitLab whose values are words: a title, a
/// description, a commit message, a note. They quote what models and
/// agents said, which may quote a file holding a secret.
const WORD_FIELDS: [&str; 4] = ["title", "description", "commit_message", "body"];

/// `body` with its words redacted; its data (a file's content, a path, a
/// branch, an id) is left as it is (invariant 20: content that would carry
/// a secret to a branch is refused before it gets here, never mangled).
fn redact_words(mut body: serde_json::Value) -> serde_json::Value {
    if let serde_json::Value::Object(fields) = &mut body {
        for key in WORD_FIELDS {
            if let Some(serde_json::Value::String(text)) = fields.get_mut(key) {
                *text = sentinel_core::redact::text(text);
            }
        }
    }
    body
}

/// One request to GitLab's API with its token in `PRIVATE-TOKEN` (the
/// dashboard issue, the merge request, the sandbox's commits): the status
/// and at most 4 MiB of the body. A `POST` or `PUT` sends `body` as JSON,
/// its words redacted: every text that leaves for GitLab passes here.
pub fn gitlab_send(
    agent: &ureq::Agent,
    token: Option<&str>,
    method: &str,
    url: &str,
    body: Option<serde_json::Value>,
) -> Result<(u16, Vec<u8>), String> {
    let body = body.map(redact_words);
    let result = if method == "GET" {
        let mut r = agent.get(url);
        if let Some(t) = token {
            r = r.header("PRIVATE-TOKEN", t);
        }
        r.call()
    } else {
        let mut r = if method == "POST" {
            agent.post(url)
        } else {
            agent.put(url)
        };
        if let Some(t) = token {
            r = r.header("PRIVATE-TOKEN", t);
        }
        r.header("Content-Type", "application/json")
            .send(body.unwrap_or(serde_json::Value::Null).to_string())
    };
    let mut response = result.map_err(|e| transport_message(&e))?;
    let status = response.status().as_u16();
    let bytes = response
        .body_mut()
        .with_config()
        .limit(4 << 20)
        .read_to_vec()
        .map_err(|e| transport_message(&e))?;
    Ok((status, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_file_without_certificates_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate").unwrap();
        let err = agent(Duration::from_secs(1), Some(&path)).unwrap_err();
        assert!(err.contains("ca.pem") && err.contains("--ca-file"), "{err}");
        let err = agent(
            Duration::from_secs(1),
            Some(&dir.path().join("missing.pem")),
        )
        .unwrap_err();
        assert!(err.contains("missing.pem"), "{err}");
    }
}
