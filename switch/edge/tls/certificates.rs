//! Certificates of a TLS virtual service: PEM chains and keys read at check time (so that a
//! bad file refuses the rule file, or a reload, with its `FILE:LINE:COL`), the names each
//! certificate is for, and the choice of certificate by the ClientHello's server name.
//!
//! Why a resolver of our own: rustls' `ResolvesServerCertUsingSni` takes exact names only;
//! HAProxy and nginx also match wildcard certificates (`*.example.com`) and fall back to the
//! first certificate, which is what `tls = [...]` promises.

use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A certificate chain with its key, and the names it serves.
#[derive(Debug, Clone)]
pub struct Certificate {
    pub key: Arc<CertifiedKey>,
    /// DNS names, lower case, as the certificate lists them (`*.example.com` for a wildcard):
    /// its subject alternative names, or its common name when it has none.
    pub names: Vec<String>,
    pub cert_path: PathBuf,
    /// The end of its validity, seconds since the Unix epoch.
    pub not_after: i64,
}

/// Which of the two files of a `tls` entry a problem is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    Cert,
    Key,
}

/// Why a certificate could not be loaded, for the rule file's message at that file's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadError {
    pub part: Part,
    pub message: String,
}

impl LoadError {
    fn cert(message: String) -> LoadError {
        LoadError {
            part: Part::Cert,
            message,
        }
    }

    fn key(message: String) -> LoadError {
        LoadError {
            part: Part::Key,
            message,
        }
    }
}

/// Reads a PEM certificate chain (the server's certificate first) and its private key
/// (PKCS#8, PKCS#1 RSA or SEC1 EC), and checks that they belong together.
pub fn load(cert_path: &Path, key_path: &Path) -> Result<Certificate, LoadError> {
    let shown = cert_path.display();
    let cert_text = std::fs::read(cert_path)
        .map_err(|e| LoadError::cert(format!("cannot read certificate file {shown}: {e}")))?;
    let chain = CertificateDer::pem_slice_iter(&cert_text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| LoadError::cert(format!("certificate file {shown}: {e}")))?;
    let Some(first) = chain.first() else {
        return Err(LoadError::cert(format!(
            "certificate file {shown} holds no certificate (a PEM block \
             -----BEGIN CERTIFICATE-----)"
        )));
    };
    let (names, not_after) =
        names_of(first).map_err(|e| LoadError::cert(format!("certificate file {shown}: {e}")))?;

    let key_shown = key_path.display();
    let key_text = std::fs::read(key_path)
        .map_err(|e| LoadError::key(format!("cannot read key file {key_shown}: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(&key_text).map_err(|e| {
        LoadError::key(match e {
            rustls::pki_types::pem::Error::NoItemsFound => format!(
                "key file {key_shown} holds no private key (a PEM block of PKCS#8, PKCS#1 RSA \
                 or SEC1 EC)"
            ),
            other => format!("key file {key_shown}: {other}"),
        })
    })?;
    let signing = any_supported_type(&key)
        .map_err(|e| LoadError::key(format!("key file {key_shown}: unusable key: {e}")))?;
    let key = CertifiedKey::new(chain, signing);
    key.keys_match().map_err(|_| {
        LoadError::key(format!(
            "the key in {key_shown} does not belong to the certificate in {shown}"
        ))
    })?;
    Ok(Certificate {
        key: Arc::new(key),
        names,
        cert_path: cert_path.to_path_buf(),
        not_after,
    })
}

/// The DNS names of a certificate and the end of its validity.
fn names_of(der: &CertificateDer<'_>) -> Result<(Vec<String>, i64), String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the first certificate is not valid X.509: {e}"))?;
    let mut names = Vec::new();
    let alternative = cert
        .subject_alternative_name()
        .map_err(|e| format!("unreadable subject alternative names: {e}"))?;
    if let Some(alternative) = alternative {
        for name in &alternative.value.general_names {
            if let x509_parser::extensions::GeneralName::DNSName(dns) = name {
                names.push(dns.to_ascii_lowercase());
            }
        }
    }
    if names.is_empty() {
        // No DNS alternative names: the common name, as HAProxy falls back to it.
        names.extend(
            cert.subject()
                .iter_common_name()
                .filter_map(|cn| cn.as_str().ok())
                .map(str::to_ascii_lowercase),
        );
    }
    Ok((names, cert.validity().not_after.timestamp()))
}

impl Certificate {
    /// Past its validity now.
    pub fn expired(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        self.not_after < now
    }
}

/// Picks the certificate for a ClientHello: the first certificate whose names hold the server
/// name exactly, else the first with a wildcard for it (`*.example.com` stands for one label:
/// `www.example.com`, not `example.com` nor `a.b.example.com`), else the first certificate.
#[derive(Debug)]
pub struct SniResolver {
    certificates: Vec<Arc<CertifiedKey>>,
    exact: HashMap<String, usize>,
    /// By the part after `*.`.
    wildcard: HashMap<String, usize>,
}

impl SniResolver {
    /// `certificates` must not be empty (a `tls` list is checked to hold one at least).
    pub fn new(certificates: &[Certificate]) -> SniResolver {
        let mut resolver = SniResolver::by_names(certificates.iter().map(|c| &c.names[..]));
        resolver.certificates = certificates.iter().map(|c| Arc::clone(&c.key)).collect();
        resolver
    }

    /// The name tables of certificates with these names, in order (no keys yet).
    fn by_names<'a>(names: impl Iterator<Item = &'a [String]>) -> SniResolver {
        let mut exact = HashMap::new();
        let mut wildcard = HashMap::new();
        for (i, names) in names.enumerate() {
            for name in names {
                // The first certificate that names it keeps it.
                match name.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()).or_insert(i),
                    None => exact.entry(name.clone()).or_insert(i),
                };
            }
        }
        SniResolver {
            certificates: Vec::new(),
            exact,
            wildcard,
        }
    }

    /// The index of the certificate for `server_name` (lower case, as rustls gives it).
    pub fn choose(&self, server_name: Option<&str>) -> usize {
        let Some(name) = server_name else { return 0 };
        let name = name.strip_suffix('.').unwrap_or(name);
        if let Some(&i) = self.exact.get(name) {
            return i;
        }
        name.split_once('.')
            .and_then(|(_, parent)| self.wildcard.get(parent))
            .copied()
            .unwrap_or(0)
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, client_hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let chosen = self.choose(client_hello.server_name());
        self.certificates.get(chosen).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolver(names: &[&[&str]]) -> SniResolver {
        let owned: Vec<Vec<String>> = names
            .iter()
            .map(|list| list.iter().map(|n| n.to_string()).collect())
            .collect();
        SniResolver::by_names(owned.iter().map(|n| &n[..]))
    }

    #[test]
    fn exact_then_wildcard_then_default() {
        let r = resolver(&[
            &["default.test"],
            &["*.example.com"],
            &["www.example.com", "api.test"],
        ]);
        assert_eq!(r.choose(Some("www.example.com")), 2);
        assert_eq!(r.choose(Some("img.example.com")), 1);
        assert_eq!(r.choose(Some("img.example.com.")), 1);
        assert_eq!(r.choose(Some("example.com")), 0);
        assert_eq!(r.choose(Some("a.b.example.com")), 0);
        assert_eq!(r.choose(Some("api.test")), 2);
        assert_eq!(r.choose(Some("unknown.test")), 0);
        assert_eq!(r.choose(None), 0);
    }

    #[test]
    fn the_first_certificate_naming_a_host_keeps_it() {
        let r = resolver(&[&["a.test"], &["a.test", "*.b.test"], &["*.b.test"]]);
        assert_eq!(r.choose(Some("a.test")), 0);
        assert_eq!(r.choose(Some("x.b.test")), 1);
    }
}
