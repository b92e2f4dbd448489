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
