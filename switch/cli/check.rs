//! `tcpvs check`: rule files checked without running them.

use std::path::PathBuf;
use std::process::ExitCode;
use tcpvs::config::Config;

/// `tcpvs check`: for each file, the summary on stdout (exit 0), or every error on stderr
/// (exit 1); its warnings on stderr in either case, among the errors in file order. With
/// `strict`, warnings are errors: printed without `warning:`, and the file is refused.
pub fn check(files: &[PathBuf], strict: bool) -> ExitCode {
    let mut ok = true;
    for file in files {
        let checked = match Config::check_file(file) {
            Ok(checked) => checked,
            Err(e) => {
                eprintln!("{e}");
                ok = false;
                continue;
            }
        };
        let warnings = &checked.warnings;
        let refused = checked.config.is_err() || (strict && !warnings.is_empty());
        // Errors and warnings of one file, in file order (errors first at one place).
        let mut lines: Vec<(usize, usize, String)> = Vec::new();
        match &checked.config {
            Ok(config) if !refused => {
                println!("{}", config.summary());
                say_found(config);
            }
            Ok(_) => {}
            Err(errors) => lines.extend(errors.0.iter().map(|e| (e.line, e.column, e.to_string()))),
        }
        lines.extend(warnings.iter().map(|w| {
            let e = w.as_error();
            let text = if strict { e.to_string() } else { w.to_string() };
            (e.line, e.column, text)
        }));
        lines.sort_by_key(|(line, column, _)| (*line, *column));
        for (_, _, text) in lines {
            eprintln!("{text}");
        }
        ok &= !refused;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Each discovering pool asked once, and what it found: on stdout, or why not on stderr (a DNS
/// server that does not answer now is no mistake of the file).
fn say_found(config: &Config) {
    let pools: Vec<_> = config
        .pools
        .iter()
        .filter_map(|p| Some((p, p.discover.clone()?)))
        .collect();
    let discovers = pools.iter().map(|(_, d)| d.clone()).collect();
    let answers = tcpvs::discovery::once::ask_all(discovers);
    for ((pool, discover), answer) in pools.into_iter().zip(answers) {
        match answer {
            Ok(answer) if !answer.servers.is_empty() => println!(
                "  pool `{}`: {} found {} server{}: {}",
                pool.name,
                discover.lookup,
                answer.servers.len(),
                if answer.servers.len() == 1 { "" } else { "s" },
                tcpvs::discovery::once::list(&answer.servers)
            ),
            Ok(_) => eprintln!(
                "warning: pool `{}`: {} found no server now",
                pool.name, discover.lookup
            ),
            Err(why) => eprintln!(
                "warning: pool `{}`: {} failed now: {why}",
                pool.name, discover.lookup
            ),
        }
    }
}
