//! `tcpvs import-ktcpvs`: a KTCPVS configuration turned into a rule file.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

/// `tcpvs import-ktcpvs`: the rule file on stdout (exit 0), warnings on stderr; or every
/// error on stderr (exit 1).
pub fn import_ktcpvs(file: &Path) -> ExitCode {
    let report = match tcpvs::import_ktcpvs::import_file(file) {
        Ok(report) => report,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    for diagnostic in report.diagnostics() {
        eprintln!("{diagnostic}");
    }
    if !report.is_ok() {
        return ExitCode::FAILURE;
    }
    let mut out = std::io::stdout().lock();
    // A closed pipe (`... | head`) is not worth a message.
    let _ = out
        .write_all(report.rules.as_bytes())
        .and_then(|()| out.flush());
    ExitCode::SUCCESS
}
