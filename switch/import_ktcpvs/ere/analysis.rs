//! What the KTCPVS converter asks of a parsed pattern: can it match a character (`?`), does it
//! end at the end of the target, is it anchored, its `.*`-trimmed form, where a group opens.

use super::{ClassItem, Node};

impl Node {
    /// Some character the expression consumes can be `c`.
    pub(in crate::import_ktcpvs) fn can_match(&self, c: char) -> bool {
        match self {
            Node::Lit(l) => *l == c,
            Node::Any => c != '\n',
            Node::Class { negated, items } => {
                items.iter().any(|item| match item {
                    ClassItem::Char(x) => *x == c,
                    ClassItem::Range(a, b) => (*a..=*b).contains(&c),
                    ClassItem::Named(n) => in_class(n, c),
                }) != *negated
            }
            Node::Group(inner) => inner.can_match(c),
            Node::Concat(items) | Node::Alt(items) => items.iter().any(|n| n.can_match(c)),
            Node::Repeat { node, max, .. } => *max != Some(0) && node.can_match(c),
            Node::Empty | Node::Bol | Node::Eol | Node::WordStart | Node::WordEnd => false,
        }
    }

    /// The expression uses `$`.
    pub(in crate::import_ktcpvs) fn has_eol(&self) -> bool {
        match self {
            Node::Eol => true,
            Node::Group(inner) => inner.has_eol(),
            Node::Concat(items) | Node::Alt(items) => items.iter().any(Node::has_eol),
            Node::Repeat { node, .. } => node.has_eol(),
            _ => false,
        }
    }

    /// Every match starts at the first character (a `^` it cannot avoid).
    pub(in crate::import_ktcpvs) fn anchored(&self) -> bool {
        match self {
            Node::Bol => true,
            Node::Group(inner) => inner.anchored(),
            // A `^` anywhere in a concatenation pins the whole match to the start.
            Node::Concat(items) => items.iter().any(Node::anchored),
            Node::Alt(branches) => branches.iter().all(Node::anchored),
            Node::Repeat { node, min, .. } => *min > 0 && node.anchored(),
            _ => false,
        }
    }

    /// Whether this is `.*`.
    fn is_dot_star(&self) -> bool {
        matches!(self, Node::Repeat { node, min: 0, max: None } if **node == Node::Any)
    }

    /// The expression without a leading and a trailing `.*`, which change no decision of
    /// whether a string matches somewhere (without `$`); `None` if nothing is left.
    pub(in crate::import_ktcpvs) fn trimmed(&self) -> Option<Node> {
        let items: Vec<Node> = match self {
            Node::Concat(items) => items.clone(),
            other => vec![other.clone()],
        };
        let mut items = &items[..];
        while items.first().is_some_and(Node::is_dot_star) {
            items = &items[1..];
        }
        while items.last().is_some_and(Node::is_dot_star) {
            items = &items[..items.len() - 1];
        }
        match items {
            [] => None,
            [one] => Some(one.clone()),
            many => Some(Node::Concat(many.to_vec())),
        }
    }

    /// Whether capture `group` (0 = the whole match) can begin where the match begins,
    /// approximated: group 0 always, group 1 when it opens the expression.
    pub(in crate::import_ktcpvs) fn group_opens(&self, group: usize) -> bool {
        if group == 0 {
            return true;
        }
        let first = match self {
            Node::Concat(items) => items.iter().find(|n| **n != Node::Bol),
            other => Some(other),
        };
        group == 1 && matches!(first, Some(Node::Group(_)))
    }
}

fn in_class(name: &str, c: char) -> bool {
    let b = c;
    match name {
        "alnum" => b.is_ascii_alphanumeric(),
        "alpha" => b.is_ascii_alphabetic(),
        "blank" => b == ' ' || b == '\t',
        "cntrl" => b.is_ascii_control(),
        "digit" => b.is_ascii_digit(),
        "graph" => b.is_ascii_graphic(),
        "lower" => b.is_ascii_lowercase(),
        "print" => b.is_ascii_graphic() || b == ' ',
        "punct" => b.is_ascii_punctuation(),
        "space" => b.is_ascii_whitespace() || b == '\x0b',
        "upper" => b.is_ascii_uppercase(),
        "xdigit" => b.is_ascii_hexdigit(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use crate::import_ktcpvs::ere;

    #[test]
    fn patterns_know_where_the_query_matters() {
        let node = |p: &str| ere::parse(p).unwrap().node;
        assert!(node(r"\.gif$").has_eol());
        assert!(!node("^/img/").has_eol());
        assert!(node("^/img/").anchored());
        assert!(!node("/img/").anchored());
        assert!(node("^a|^b").anchored());
        assert!(!node("^a|b").anchored());
        assert!(node("[^/]").can_match('?'));
        assert!(!node("[a-z]").can_match('?'));
        assert!(node("[[:punct:]]").can_match('?'));
        assert!(node(".*").trimmed().is_none());
        assert_eq!(node("/images/.*").trimmed(), Some(node("/images/")));
        assert!(node("(/x)").group_opens(1));
        assert!(!node("/(x)").group_opens(1));
    }
}
