//! Where spans go (`otlp = "http://HOST:PORT[/PREFIX]"`), read from the rule file.

/// Where spans go: `http://HOST:PORT[/PREFIX]`, as `OTEL_EXPORTER_OTLP_ENDPOINT` names a
/// collector: the traces go to `PREFIX/v1/traces` there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collector {
    /// `HOST:PORT`, resolved at each new connection (a collector that moves is followed).
    pub authority: String,
    /// The path POSTed to.
    pub path: String,
}

impl Collector {
    /// Reads a collector URL; `Err` says what is wrong with it.
    pub fn parse(url: &str) -> Result<Collector, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!(
                "otlp must be an http:// URL like \"http://127.0.0.1:4318\" (OTLP/HTTP without TLS), not {url:?}"
            ));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let port = authority.rsplit_once(':').map(|(_, port)| port);
        if authority.is_empty() || port.is_none_or(|p| p.parse::<u16>().is_err()) {
            return Err(format!(
                "otlp needs a host and a port, like \"http://127.0.0.1:4318\", not {url:?}"
            ));
        }
        if authority.bytes().any(|b| !b.is_ascii_graphic())
            || prefix.bytes().any(|b| !b.is_ascii_graphic())
        {
            return Err(format!("otlp URL has spaces or non-ASCII bytes: {url:?}"));
        }
        Ok(Collector {
            authority: authority.to_string(),
            path: format!("{}/v1/traces", prefix.trim_end_matches('/')),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collector_urls() {
        let c = Collector::parse("http://127.0.0.1:4318").expect("valid");
        assert_eq!(
            (c.authority.as_str(), c.path.as_str()),
            ("127.0.0.1:4318", "/v1/traces")
        );
        let c = Collector::parse("http://otel.local:4318/base/").expect("valid");
        assert_eq!(
            (c.authority.as_str(), c.path.as_str()),
            ("otel.local:4318", "/base/v1/traces")
        );
        for bad in [
            "https://x:4318",
            "127.0.0.1:4318",
            "http://x",
            "http://:",
            "http://x:y",
            "http://a b:1",
        ] {
            assert!(Collector::parse(bad).is_err(), "{bad}");
        }
    }
}
