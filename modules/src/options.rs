use std::fmt;

/// A module option as written in the rule file, beside `scheduler = "..."`.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    Integer(i64),
    Float(f64),
    String(String),
    Boolean(bool),
}

impl fmt::Display for OptionValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionValue::Integer(v) => write!(f, "{v}"),
            OptionValue::Float(v) => write!(f, "{v}"),
            OptionValue::String(v) => write!(f, "{v:?}"),
            OptionValue::Boolean(v) => write!(f, "{v}"),
        }
    }
}

/// A refused option: `index` points into the option list given to [`crate::build`], so the
/// caller can report the rule-file position of that key.
#[derive(Clone, Debug, PartialEq)]
pub struct OptionError {
    pub index: usize,
    pub message: String,
}

/// Reads a module's options by key, checking types and ranges, and refuses keys the module
/// does not know. Every error names the option's index for the rule-file position.
pub struct Options<'a> {
    module: &'static str,
    given: &'a [(String, OptionValue)],
    used: Vec<bool>,
}

impl<'a> Options<'a> {
    pub fn new(module: &'static str, given: &'a [(String, OptionValue)]) -> Self {
        Options {
            module,
            given,
            used: vec![false; given.len()],
        }
    }

    fn find(&mut self, key: &str) -> Option<(usize, &'a OptionValue)> {
        let index = self.given.iter().position(|(k, _)| k == key)?;
        self.used[index] = true;
        Some((index, &self.given[index].1))
    }

    fn error(&self, index: usize, message: String) -> OptionError {
        OptionError { index, message }
    }

    /// Where `key` is in the list, if given.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.given.iter().position(|(k, _)| k == key)
    }

    /// An integer option in `min..=max`.
    pub fn integer(
        &mut self,
        key: &str,
        default: i64,
        min: i64,
        max: i64,
    ) -> Result<i64, OptionError> {
        match self.find(key) {
            None => Ok(default),
            Some((_, OptionValue::Integer(v))) if (min..=max).contains(v) => Ok(*v),
            Some((i, OptionValue::Integer(v))) => {
                Err(self.error(i, format!("{key} = {v} is out of range {min}..={max}")))
            }
            Some((i, other)) => {
                Err(self.error(i, format!("{key} must be a whole number, not {other}")))
            }
        }
    }

    /// A number option (integer or float) in `min..=max`.
    pub fn number(
        &mut self,
        key: &str,
        default: f64,
        min: f64,
        max: f64,
    ) -> Result<f64, OptionError> {
        let (i, v) = match self.find(key) {
            None => return Ok(default),
            Some((i, OptionValue::Integer(v))) => (i, *v as f64),
            Some((i, OptionValue::Float(v))) => (i, *v),
            Some((i, other)) => {
                return Err(self.error(i, format!("{key} must be a number, not {other}")))
            }
        };
        if v.is_finite() && (min..=max).contains(&v) {
            Ok(v)
        } else {
            Err(self.error(i, format!("{key} = {v} is out of range {min}..={max}")))
        }
    }

    /// A string option, with its index for later errors about its content.
    pub fn string(&mut self, key: &str) -> Result<Option<(usize, &'a str)>, OptionError> {
        match self.find(key) {
            None => Ok(None),
            Some((i, OptionValue::String(s))) => Ok(Some((i, s.as_str()))),
            Some((i, other)) => Err(self.error(i, format!("{key} must be a string, not {other}"))),
        }
    }

    /// A string option that must be one of `choices`.
    pub fn choice(
        &mut self,
        key: &str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, OptionError> {
        match self.string(key)? {
            None => Ok(default),
            Some((i, s)) => choices.iter().find(|c| **c == s).copied().ok_or_else(|| {
                self.error(
                    i,
                    format!("{key} = {s:?} is not one of {}", choices.join(", ")),
                )
            }),
        }
    }

    /// Ends reading: any option not asked for is an error.
    pub fn finish(self) -> Result<(), OptionError> {
        match self.used.iter().position(|used| !used) {
            None => Ok(()),
            Some(i) => Err(OptionError {
                index: i,
                message: format!(
                    "unknown option `{}` for scheduler `{}`",
                    self.given[i].0, self.module
                ),
            }),
        }
    }

    /// An error about the option at `index` found after reading it.
    pub fn error_at(&self, index: usize, message: impl Into<String>) -> OptionError {
        self.error(index, message.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(pairs: &[(&str, OptionValue)]) -> Vec<(String, OptionValue)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn reads_checks_and_refuses_unknown() {
        let given = opts(&[
            ("t_low", OptionValue::Integer(10)),
            ("factor", OptionValue::Integer(2)),
            ("key", OptionValue::String("uri".into())),
        ]);
        let mut o = Options::new("x", &given);
        assert_eq!(o.integer("t_low", 25, 0, 100), Ok(10));
        assert_eq!(o.integer("t_high", 65, 0, 100), Ok(65));
        assert_eq!(o.number("factor", 1.25, 1.0, 10.0), Ok(2.0));
        assert_eq!(o.choice("key", "path", &["path", "uri"]), Ok("uri"));
        assert!(o.finish().is_ok());

        let given = opts(&[
            ("t_low", OptionValue::Integer(-1)),
            ("zzz", OptionValue::Boolean(true)),
        ]);
        let mut o = Options::new("x", &given);
        assert_eq!(o.integer("t_low", 25, 0, 100).unwrap_err().index, 0);
        let e = o.finish().unwrap_err();
        assert_eq!(e.index, 1);
        assert!(e.message.contains("unknown option `zzz`"));
    }
}
