//! Reading a parsed TOML document by hand, so that one run reports every problem.
//!
//! serde stops at the first unknown key or wrong type, and words its complaints in Rust
//! ("invalid type: integer `3`, expected a string"). Here the document is first parsed into
//! `toml::de::DeTable`, a tree that keeps the span of every key and value, and then read table by
//! table: a key nobody knows is reported (with the known key it most likely meant), a value of
//! the wrong kind is reported in the words of the file ("expected a duration like \"30s\",
//! found the number 30"), and the walk goes on with the next key. Only TOML syntax errors stop
//! the reading, since after one the rest of the file cannot be trusted.

use super::error::ErrorSink;
use std::ops::Range;
use toml::de::{DeArray, DeString, DeTable, DeValue};
use toml::Spanned;

pub(crate) type Value<'i> = Spanned<DeValue<'i>>;

/// What durations look like, for type errors.
pub(crate) const DURATION: &str = "a duration like \"30s\"";

/// A scalar as the file wrote it, for keys that accept several kinds (`access_log`,
/// `splice_threshold`, module options).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Scalar {
    Integer(i64),
    Float(f64),
    String(String),
    Boolean(bool),
    /// A date, a list or a table: what it is, in the file's words ("a list").
    Other(String),
}

/// `v` in the words of a rule file: "the number 3", "the string \"yes\"", "true", "a list".
pub(crate) fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => {
            let shown: String = s.chars().take(40).collect();
            if shown.len() < s.len() {
                format!("the string {:?}...", shown)
            } else {
                format!("the string {shown:?}")
            }
        }
        DeValue::Integer(n) => format!("the number {n}"),
        DeValue::Float(n) => format!("the number {n}"),
        DeValue::Boolean(b) => b.to_string(),
        DeValue::Datetime(_) => "a date".into(),
        DeValue::Array(_) => "a list".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// Reports that `value` (of `key`) is not `expected`.
pub(crate) fn wrong_type(key: &str, expected: &str, value: &Value<'_>, sink: &mut ErrorSink<'_>) {
    sink.at(
        value.span(),
        format!(
            "`{key}`: expected {expected}, found {}",
            describe(value.get_ref())
        ),
    );
}

/// The closest of `known` to `key`, if it is close enough to be a likely typo (shared with the
/// scheduler options' messages, which the modules crate writes).
pub(crate) use tcpvs_modules::suggest;

/// One table of the document: its entries in file order, named for messages by `place`
/// ("[switch]", "a server of [pool.static]").
pub(crate) struct Table<'a, 'i> {
    pub place: String,
    pub span: Range<usize>,
    entries: Vec<(&'a Spanned<DeString<'i>>, &'a Value<'i>)>,
}

impl<'a, 'i> Table<'a, 'i> {
    /// `value` as a table, or a type error (`key`: expected `expected`) and `None`.
    pub(crate) fn of(
        value: &'a Value<'i>,
        key: &str,
        expected: &str,
        place: impl Into<String>,
        sink: &mut ErrorSink<'_>,
    ) -> Option<Table<'a, 'i>> {
        match value.get_ref() {
            DeValue::Table(table) => Some(Table::new(table, value.span(), place)),
            _ => {
                wrong_type(key, expected, value, sink);
                None
            }
        }
    }

    pub(crate) fn new(
        table: &'a DeTable<'i>,
        span: Range<usize>,
        place: impl Into<String>,
    ) -> Table<'a, 'i> {
        let mut entries: Vec<_> = table.iter().collect();
        entries.sort_by_key(|(k, _)| k.span().start);
        Table {
            place: place.into(),
            span,
            entries,
        }
    }

    /// The entries, in file order.
    pub(crate) fn entries(
        &self,
    ) -> impl Iterator<Item = (&'a Spanned<DeString<'i>>, &'a Value<'i>)> + '_ {
        self.entries.iter().copied()
    }

    /// Reports every key that is not in `known`, with the known key it most likely meant.
    /// Whether every key was known.
    pub(crate) fn check_keys(&self, known: &[&str], sink: &mut ErrorSink<'_>) -> bool {
        let mut all_known = true;
        for (key, _) in &self.entries {
            if !known.contains(&key.get_ref().as_ref()) {
                let mut message = format!("unknown field `{}` in {}", key.get_ref(), self.place);
                match suggest(key.get_ref(), known) {
                    Some(close) => message.push_str(&format!(": did you mean `{close}`?")),
                    None => message.push_str(&format!(" (known: {})", known.join(", "))),
                }
                sink.at(key.span(), message);
                all_known = false;
            }
        }
        all_known
    }

    pub(crate) fn get(&self, key: &str) -> Option<&'a Value<'i>> {
        self.entries
            .iter()
            .find(|(k, _)| k.get_ref().as_ref() == key)
            .map(|(_, v)| *v)
    }

    /// A string value; `expected` says what it should be ("an address like ...").
    pub(crate) fn string(
        &self,
        key: &str,
        expected: &str,
        sink: &mut ErrorSink<'_>,
    ) -> Option<Spanned<String>> {
        let value = self.get(key)?;
        match value.get_ref() {
            DeValue::String(s) => Some(Spanned::new(value.span(), s.to_string())),
            _ => {
                wrong_type(key, expected, value, sink);
                None
            }
        }
    }

    /// A duration string, checked by the caller (`units::parse_duration`).
    pub(crate) fn duration(&self, key: &str, sink: &mut ErrorSink<'_>) -> Option<Spanned<String>> {
        self.string(key, DURATION, sink)
    }

    /// A whole number; ranges are checked by the caller.
    pub(crate) fn integer(&self, key: &str, sink: &mut ErrorSink<'_>) -> Option<Spanned<i64>> {
        let value = self.get(key)?;
        match value.get_ref() {
            DeValue::Integer(n) => match i64::from_str_radix(n.as_str(), n.radix()) {
                Ok(n) => Some(Spanned::new(value.span(), n)),
                Err(_) => {
                    sink.at(
                        value.span(),
                        format!("`{key}`: the number {n} is too large"),
                    );
                    None
                }
            },
            _ => {
                wrong_type(key, "a whole number", value, sink);
                None
            }
        }
    }

    pub(crate) fn boolean(&self, key: &str, sink: &mut ErrorSink<'_>) -> Option<bool> {
        let value = self.get(key)?;
        match value.get_ref() {
            DeValue::Boolean(b) => Some(*b),
            _ => {
                wrong_type(key, "true or false", value, sink);
                None
            }
        }
    }

    /// A list; each element is left to the caller.
    pub(crate) fn array(
        &self,
        key: &str,
        expected: &str,
        sink: &mut ErrorSink<'_>,
    ) -> Option<(&'a DeArray<'i>, Range<usize>)> {
        let value = self.get(key)?;
        match value.get_ref() {
            DeValue::Array(list) => Some((list, value.span())),
            _ => {
                wrong_type(key, expected, value, sink);
                None
            }
        }
    }

    /// A sub-table.
    pub(crate) fn table(
        &self,
        key: &str,
        expected: &str,
        place: impl Into<String>,
        sink: &mut ErrorSink<'_>,
    ) -> Option<Table<'a, 'i>> {
        Table::of(self.get(key)?, key, expected, place, sink)
    }

    /// Any scalar, for keys that take several kinds.
    pub(crate) fn scalar(&self, key: &str, sink: &mut ErrorSink<'_>) -> Option<Spanned<Scalar>> {
        let value = self.get(key)?;
        scalar(key, value, sink)
    }
}

/// `value` as a [`Scalar`]; a number too large for 64 bits is reported.
pub(crate) fn scalar(
    key: &str,
    value: &Value<'_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<Scalar>> {
    let s = match value.get_ref() {
        DeValue::Integer(n) => match i64::from_str_radix(n.as_str(), n.radix()) {
            Ok(n) => Scalar::Integer(n),
            Err(_) => {
                sink.at(
                    value.span(),
                    format!("`{key}`: the number {n} is too large"),
                );
                return None;
            }
        },
        DeValue::Float(f) => match f.as_str().parse::<f64>() {
            Ok(f) => Scalar::Float(f),
            Err(_) => {
                sink.at(
                    value.span(),
                    format!("`{key}`: the number {f} is not valid"),
                );
                return None;
            }
        },
        DeValue::String(s) => Scalar::String(s.to_string()),
        DeValue::Boolean(b) => Scalar::Boolean(*b),
        other => Scalar::Other(describe(other)),
    };
    Some(Spanned::new(value.span(), s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_are_close_keys_only() {
        let known = ["workers", "max_clients", "header_timeout", "weight"];
        assert_eq!(suggest("wrokers", &known), Some("workers"));
        assert_eq!(suggest("weigth", &known), Some("weight"));
        assert_eq!(suggest("Workers", &known), Some("workers"));
        assert_eq!(suggest("header_timout", &known), Some("header_timeout"));
        assert_eq!(suggest("colour", &known), None);
        assert_eq!(suggest("x", &known), None);
    }

    #[test]
    fn values_are_described_in_the_files_words() {
        let doc = DeTable::parse("a = 3\nb = \"x\"\nc = true\nd = [1]\ne = { f = 1 }\ng = 1.5")
            .unwrap()
            .into_inner();
        let table = Table::new(&doc, 0..0, "the test");
        let described: Vec<String> = table
            .entries()
            .map(|(_, v)| describe(v.get_ref()))
            .collect();
        assert_eq!(
            described,
            [
                "the number 3",
                "the string \"x\"",
                "true",
                "a list",
                "a table",
                "the number 1.5"
            ]
        );
    }
}
