//! Rule-file errors, each pinned to `FILE:LINE:COL`.

use std::fmt;
use std::ops::Range;

/// One problem in a rule file. `line` and `column` are 1-based; the column counts characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub file: String,
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// Every problem found in a rule file, in file order. A file with any error is refused whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Something in a rule file that is valid but almost surely not what was meant: a rule that can
/// never match, a pool nothing uses. The file is accepted; `tcpvs check` prints these as
/// `FILE:LINE:COL: warning: message` (and refuses the file with `--strict`), `tcpvs run` logs them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigWarning(pub ConfigError);

impl ConfigWarning {
    /// The same problem as an error: `FILE:LINE:COL: message`, for `--strict`.
    pub fn as_error(&self) -> &ConfigError {
        &self.0
    }
}

impl fmt::Display for ConfigWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.0;
        write!(
            f,
            "{}:{}:{}: warning: {}",
            e.file, e.line, e.column, e.message
        )
    }
}

/// Collects errors (and warnings) against one source text, turning byte spans into line and
/// column.
pub(crate) struct ErrorSink<'a> {
    file: &'a str,
    source: &'a str,
    errors: Vec<ConfigError>,
    warnings: Vec<ConfigError>,
}

impl<'a> ErrorSink<'a> {
    pub(crate) fn new(file: &'a str, source: &'a str) -> Self {
        ErrorSink {
            file,
            source,
            errors: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(crate) fn at(&mut self, span: Range<usize>, message: impl Into<String>) {
        let error = self.locate(span, message.into());
        self.errors.push(error);
    }

    /// How many errors were reported so far.
    pub(crate) fn error_count(&self) -> usize {
        self.errors.len()
    }

    /// A warning: the file stays valid.
    pub(crate) fn warn(&mut self, span: Range<usize>, message: impl Into<String>) {
        let warning = self.locate(span, message.into());
        self.warnings.push(warning);
    }

    fn locate(&self, span: Range<usize>, message: String) -> ConfigError {
        let (line, column) = line_and_column(self.source, span.start);
        ConfigError {
            file: self.file.to_string(),
            line,
            column,
            message,
        }
    }

    pub(crate) fn source(&self) -> &'a str {
        self.source
    }

    /// `FILE:LINE:COL` of `span`, for problems found after the file was read (a listen
    /// address the system refuses).
    pub(crate) fn position(&self, span: Range<usize>) -> String {
        let (line, column) = line_and_column(self.source, span.start);
        format!("{}:{line}:{column}", self.file)
    }

    /// The errors and the warnings, each in file order (a stable sort: problems at one place
    /// keep the order they were found in).
    pub(crate) fn finish(self) -> (ConfigErrors, Vec<ConfigWarning>) {
        let in_order = |mut list: Vec<ConfigError>| {
            list.sort_by_key(|e| (e.line, e.column));
            list.dedup();
            list
        };
        let warnings = in_order(self.warnings)
            .into_iter()
            .map(ConfigWarning)
            .collect();
        (ConfigErrors(in_order(self.errors)), warnings)
    }
}

/// 1-based line and character column of byte `offset` in `source`.
pub(crate) fn line_and_column(source: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(source.len());
    while !source.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &source[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::line_and_column;

    #[test]
    fn positions_are_one_based_and_count_characters() {
        let src = "a = 1\nbé = \"x\"\n";
        assert_eq!(line_and_column(src, 0), (1, 1));
        assert_eq!(line_and_column(src, 6), (2, 1));
        // 'é' is two bytes but one column.
        let eq = src.find('=').unwrap();
        assert_eq!(line_and_column(src, eq), (1, 3));
        let second_eq = src.rfind('=').unwrap();
        assert_eq!(line_and_column(src, second_eq), (2, 4));
        assert_eq!(line_and_column(src, 999), (3, 1));
    }
}
