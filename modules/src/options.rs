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
    /// The message names the option or value probably meant ("did you mean"): the caller
    /// need not look for another.
    pub suggests: bool,
}

/// Reads a module's options by key, checking types and ranges, and refuses keys the module
/// does not know. Every error names the option's index for the rule-file position.
pub struct Options<'a> {
    module: &'static str,
    given: &'a [(String, OptionValue)],
    used: Vec<bool>,
    /// The options the module asked for, and those it reads only with some other setting
    /// (with that setting, for the message): what a misspelt key is compared with.
    known: Vec<&'static str>,
    conditional: Vec<(&'static str, &'static str)>,
}

impl<'a> Options<'a> {
    pub fn new(module: &'static str, given: &'a [(String, OptionValue)]) -> Self {
        Options {
            module,
            given,
            used: vec![false; given.len()],
            known: Vec::new(),
            conditional: Vec::new(),
        }
    }

    fn find(&mut self, key: &'static str) -> Option<(usize, &'a OptionValue)> {
        if !self.known.contains(&key) {
            self.known.push(key);
        }
        let index = self.given.iter().position(|(k, _)| k == key)?;
        self.used[index] = true;
        Some((index, &self.given[index].1))
    }

    fn error(&self, index: usize, message: String) -> OptionError {
        OptionError {
            index,
            message,
            suggests: false,
        }
    }

    /// Options the module reads only with another setting, which it did not ask for this
    /// time: `(key, "with key = \"regex\"")`. Given, they are refused with that reason, and a
    /// misspelt key is compared with them too.
    pub fn read_only(&mut self, options: &[(&'static str, &'static str)]) {
        self.conditional.extend_from_slice(options);
    }

    /// Where `key` is in the list, if given.
    pub fn index_of(&self, key: &str) -> Option<usize> {
        self.given.iter().position(|(k, _)| k == key)
    }

    /// An integer option in `min..=max`.
    pub fn integer(
        &mut self,
        key: &'static str,
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
        key: &'static str,
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
    pub fn string(&mut self, key: &'static str) -> Result<Option<(usize, &'a str)>, OptionError> {
        match self.find(key) {
            None => Ok(None),
            Some((i, OptionValue::String(s))) => Ok(Some((i, s.as_str()))),
            Some((i, other)) => Err(self.error(i, format!("{key} must be a string, not {other}"))),
        }
    }

    /// A string option that must be one of `choices`.
    pub fn choice(
        &mut self,
        key: &'static str,
        default: &'static str,
        choices: &[&'static str],
    ) -> Result<&'static str, OptionError> {
        match self.string(key)? {
            None => Ok(default),
            Some((i, s)) => choices.iter().find(|c| **c == s).copied().ok_or_else(|| {
                let mut e = self.error(
                    i,
                    format!("{key} = {s:?} is not one of {}", choices.join(", ")),
                );
                if let Some(close) = crate::suggest(s, choices) {
                    e.message.push_str(&format!(": did you mean {close:?}?"));
                    e.suggests = true;
                }
                e
            }),
        }
    }

    /// Ends reading: any option not asked for is an error, which names the option probably
    /// meant, as unknown keys of the rule file do.
    pub fn finish(self) -> Result<(), OptionError> {
        let Some(i) = self.used.iter().position(|used| !used) else {
            return Ok(());
        };
        let (key, module) = (self.given[i].0.as_str(), self.module);
        if let Some((_, with)) = self.conditional.iter().find(|(k, _)| *k == key) {
            return Err(self.error(
                i,
                format!("option `{key}` of scheduler `{module}` is read only {with}"),
            ));
        }
        let mut known = self.known.clone();
        known.extend(self.conditional.iter().map(|(k, _)| *k));
        let mut e = self.error(
            i,
            format!("unknown option `{key}` for scheduler `{module}`"),
        );
        if let Some(close) = crate::suggest(key, &known) {
            e.message.push_str(&format!(": did you mean `{close}`?"));
            e.suggests = true;
        } else if known.is_empty() {
            e.message.push_str(" (it takes no options)");
        } else {
            known.sort_unstable();
            e.message
                .push_str(&format!(" (its options: {})", known.join(", ")));
        }
        Err(e)
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
        assert_eq!(
            e.message,
            "unknown option `zzz` for scheduler `x` (its options: t_low)"
        );
    }

    #[test]
    fn a_misspelt_option_or_value_names_the_one_meant() {
        let given = opts(&[
            ("t_hihg", OptionValue::Integer(10)),
            ("key", OptionValue::String("regx".into())),
        ]);
        let mut o = Options::new("lard", &given);
        assert_eq!(o.integer("t_low", 25, 0, 100), Ok(25));
        assert_eq!(o.integer("t_high", 65, 0, 100), Ok(65));
        let e = o
            .choice("key", "path", &["path", "uri", "regex"])
            .unwrap_err();
        assert_eq!(
            (e.index, e.message.as_str(), e.suggests),
            (
                1,
                "key = \"regx\" is not one of path, uri, regex: did you mean \"regex\"?",
                true
            )
        );
        let e = o.finish().unwrap_err();
        assert_eq!(
            (e.index, e.message.as_str(), e.suggests),
            (
                0,
                "unknown option `t_hihg` for scheduler `lard`: did you mean `t_high`?",
                true
            )
        );
        // Options read only with another setting: compared with, and refused with a reason.
        let given = opts(&[("patern", OptionValue::String("x".into()))]);
        let mut o = Options::new("hash", &given);
        o.read_only(&[("pattern", "with key = \"regex\"")]);
        assert_eq!(
            o.finish().unwrap_err().message,
            "unknown option `patern` for scheduler `hash`: did you mean `pattern`?"
        );
        let given = opts(&[("pattern", OptionValue::String("x".into()))]);
        let mut o = Options::new("hash", &given);
        o.read_only(&[("pattern", "with key = \"regex\"")]);
        assert_eq!(
            o.finish().unwrap_err().message,
            "option `pattern` of scheduler `hash` is read only with key = \"regex\""
        );
        // A module without options says so.
        let given = opts(&[("t_low", OptionValue::Integer(3))]);
        assert_eq!(
            Options::new("wlc", &given).finish().unwrap_err().message,
            "unknown option `t_low` for scheduler `wlc` (it takes no options)"
        );
    }
}
