//! Where webhooks may go: the operator's list of hosts (`[serve]
//! webhook_hosts`); a client's URL must name one of them, over http or https,
//! with no user name or password in it.

use reqwest::Url;

/// The hosts a webhook may be sent to: `example.com` (any port) or
/// `example.com:8443` (that port only), compared without case.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WebhookHosts {
    hosts: Vec<String>,
}

/// Why a webhook URL is refused (a sentence for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct UrlRefused(pub String);

impl WebhookHosts {
    /// The hosts of `[serve] webhook_hosts`; an empty entry, or one with a
    /// scheme or a path, is refused naming it.
    pub fn new(hosts: &[String]) -> Result<WebhookHosts, UrlRefused> {
        let mut out = Vec::with_capacity(hosts.len());
        for host in hosts {
            let h = host.trim().to_ascii_lowercase();
            if h.is_empty() || h.contains('/') || h.contains('@') {
                return Err(UrlRefused(format!(
                    "{host:?}: expected a host name or address, optionally with :PORT"
                )));
            }
            out.push(h);
        }
        Ok(WebhookHosts { hosts: out })
    }

    /// Whether no host is allowed.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// `url` as it will be POSTed to, when it is an http(s) URL to an
    /// allowed host; else why not.
    pub fn check(&self, url: &str) -> Result<String, UrlRefused> {
        let parsed = Url::parse(url).map_err(|e| UrlRefused(format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(UrlRefused(format!(
                "the scheme must be http or https, not {:?}",
                parsed.scheme()
            )));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(UrlRefused("a webhook URL may not carry credentials".into()));
        }
        let Some(host) = parsed.host_str().map(str::to_ascii_lowercase) else {
            return Err(UrlRefused("the URL names no host".into()));
        };
        let port = parsed.port_or_known_default();
        let with_port = port.map(|p| format!("{host}:{p}"));
        let allowed = self
            .hosts
            .iter()
            .any(|h| *h == host || Some(h) == with_port.as_ref());
        if !allowed {
            return Err(UrlRefused(format!(
                "host {host:?} is not one webhooks may be sent to (the server's [serve] webhook_hosts)"
            )));
        }
        Ok(parsed.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_http_urls_to_listed_hosts_pass() {
        let hosts = WebhookHosts::new(&["127.0.0.1".into(), "Hooks.Example.com:8443".into()])
            .unwrap_or_default();
        assert!(hosts.check("http://127.0.0.1:9/hook").is_ok());
        assert!(hosts.check("https://hooks.example.com:8443/x").is_ok());
        for bad in [
            "https://hooks.example.com/x",
            "http://127.0.0.2/",
            "ftp://127.0.0.1/",
            "http://user:pw@127.0.0.1/",
            "http://127.0.0.1.evil.com/",
            "not a url",
        ] {
            assert!(hosts.check(bad).is_err(), "{bad}");
        }
        assert!(WebhookHosts::new(&["http://x/".into()]).is_err());
    }
}
