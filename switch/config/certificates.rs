//! The `tls` list of a virtual service: each `{ cert, key }` read and checked now, at check
//! time, so that a missing file, a file without a certificate, an unusable key or a key of
//! another certificate refuses the rule file (or the reload) at that entry's `FILE:LINE:COL`.
//! Paths are relative to the rule file's folder.

use super::error::ErrorSink;
use super::raw::RawCertificate;
use crate::edge::tls::certificates::{self, Certificate, Part};
use std::path::Path;
use toml::Spanned;

/// The certificates of a `tls` list, in file order; errors and warnings go to `sink`.
pub(super) fn load_certificates(
    list: &Spanned<Vec<RawCertificate>>,
    file: &str,
    sink: &mut ErrorSink<'_>,
) -> Vec<Certificate> {
    if list.get_ref().is_empty() {
        sink.at(
            list.span(),
            "`tls` lists no certificate: add one like { cert = \"site.pem\", key = \"site.key\" }",
        );
        return Vec::new();
    }
    let folder = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut loaded = Vec::new();
    for (i, entry) in list.get_ref().iter().enumerate() {
        let (Some(cert), Some(key)) = (&entry.cert, &entry.key) else {
            continue; // reported when read
        };
        match certificates::load(&folder.join(cert.get_ref()), &folder.join(key.get_ref())) {
            Ok(certificate) => {
                if certificate.expired() {
                    sink.warn(
                        cert.span(),
                        format!(
                            "the certificate in {} has expired: clients will refuse it",
                            cert.get_ref()
                        ),
                    );
                }
                if i > 0 && certificate.names.is_empty() {
                    sink.warn(
                        entry.span.clone(),
                        "this certificate names no host, so it is never chosen (only the \
                         first certificate serves clients whose name matches none)",
                    );
                }
                loaded.push(certificate);
            }
            Err(e) => {
                let span = match e.part {
                    Part::Cert => cert.span(),
                    Part::Key => key.span(),
                };
                sink.at(span, e.message);
            }
        }
    }
    loaded
}
