//! The client's `Accept-Encoding` (RFC 9110 section 12.5.3) against the service's
//! `algorithms`: the coding with the highest q-value the client gives it, ties broken by the
//! service's order; `q=0` refuses a coding, `*` stands for every coding not named, and a
//! request without the field gets none (as nginx and HAProxy do: old clients and tools that
//! send nothing may not decode).

use super::Coding;
use crate::http::fields::trim_ows as trim;

/// A q-value in thousandths (`q=0.5` is 500; no `q` is 1000).
type Quality = u16;

/// The coding the client takes best among `algorithms` (the switch's preference first), given
/// the values of its `Accept-Encoding` fields; `None`: none of them, or no field.
pub fn negotiate<'v>(
    fields: impl IntoIterator<Item = &'v [u8]>,
    algorithms: &[Coding],
) -> Option<Coding> {
    // Per coding of `algorithms`, its own q-value if named; and the value of `*`.
    let mut named: [Option<Quality>; 3] = [None; 3];
    let mut any: Option<Quality> = None;
    let mut seen = false;
    for value in fields {
        seen = true;
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let token = trim(parts.next().unwrap_or_default());
            if token.is_empty() {
                continue;
            }
            let Some(quality) = quality_of(parts) else {
                continue;
            };
            if token == b"*" {
                any = Some(any.map_or(quality, |q| q.max(quality)));
            } else if let Some(coding) = coding_of(token) {
                let slot = &mut named[index(coding)];
                *slot = Some(slot.map_or(quality, |q| q.max(quality)));
            }
        }
    }
    if !seen {
        return None;
    }
    let mut best: Option<(Coding, Quality)> = None;
    for &coding in algorithms {
        let quality = named[index(coding)].or(any).unwrap_or(0);
        if quality > 0 && best.is_none_or(|(_, q)| quality > q) {
            best = Some((coding, quality));
        }
    }
    best.map(|(coding, _)| coding)
}

/// A coding by its token; `x-gzip` is gzip (RFC 9110 section 8.4.1.3).
fn coding_of(token: &[u8]) -> Option<Coding> {
    if token.eq_ignore_ascii_case(b"x-gzip") {
        return Some(Coding::Gzip);
    }
    Coding::from_token(token)
}

fn index(coding: Coding) -> usize {
    match coding {
        Coding::Gzip => 0,
        Coding::Brotli => 1,
        Coding::Zstd => 2,
    }
}

/// The element's q-value from its parameters; `None` when it is malformed (the element is then
/// left out, as a coding the client did not clearly accept).
fn quality_of<'p>(params: impl Iterator<Item = &'p [u8]>) -> Option<Quality> {
    let mut quality = 1000;
    for param in params {
        let param = trim(param);
        let Some(rest) = param
            .strip_prefix(b"q=")
            .or_else(|| param.strip_prefix(b"Q="))
        else {
            continue;
        };
        quality = parse_quality(trim(rest))?;
    }
    Some(quality)
}

/// `qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] )`.
fn parse_quality(text: &[u8]) -> Option<Quality> {
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &b""[..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: Quality = 0;
    for i in 0..3 {
        let digit = fraction.get(i).map_or(0, |d| Quality::from(d - b'0'));
        thousandths = thousandths * 10 + digit;
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    const ALL: &[Coding] = &[Zstd, Brotli, Gzip];

    fn pick(value: &str) -> Option<Coding> {
        negotiate([value.as_bytes()], ALL)
    }

    #[test]
    fn the_switch_order_breaks_ties_between_equal_q_values() {
        assert_eq!(pick("gzip, deflate, br, zstd"), Some(Zstd));
        assert_eq!(pick("gzip, br"), Some(Brotli));
        assert_eq!(pick("gzip"), Some(Gzip));
        assert_eq!(
            negotiate([&b"gzip, br, zstd"[..]], &[Gzip, Brotli]),
            Some(Gzip)
        );
    }

    #[test]
    fn a_higher_q_value_wins_over_the_switch_order() {
        assert_eq!(pick("zstd;q=0.5, gzip;q=0.8, br;q=0.7"), Some(Gzip));
        assert_eq!(pick("zstd;q=0.001, gzip;q=0.002"), Some(Gzip));
        assert_eq!(pick("br;q=1.0, zstd;q=0.999"), Some(Brotli));
    }

    #[test]
    fn q_zero_refuses_a_coding_even_beside_a_star() {
        assert_eq!(pick("gzip;q=0"), None);
        assert_eq!(pick("*, zstd;q=0, br;q=0"), Some(Gzip));
        assert_eq!(pick("*;q=0"), None);
        assert_eq!(pick("gzip;q=0.000, identity"), None);
        assert_eq!(pick("gzip; Q=0"), None);
    }

    #[test]
    fn a_star_stands_for_each_coding_not_named() {
        assert_eq!(pick("*"), Some(Zstd));
        assert_eq!(pick("gzip, *;q=0.5"), Some(Gzip));
        assert_eq!(pick("identity, *;q=0.1"), Some(Zstd));
    }

    #[test]
    fn no_field_or_an_empty_one_gets_no_coding() {
        assert_eq!(negotiate(std::iter::empty(), ALL), None);
        assert_eq!(pick(""), None);
        assert_eq!(pick("identity"), None);
        assert_eq!(pick("deflate, compress"), None);
    }

    #[test]
    fn fields_combine_and_the_higher_of_a_repeated_coding_counts() {
        assert_eq!(
            negotiate([&b"gzip;q=0.2"[..], &b"br;q=0.1"[..]], ALL),
            Some(Gzip)
        );
        assert_eq!(pick("br;q=0.1, br;q=0.9, gzip;q=0.5"), Some(Brotli));
    }

    #[test]
    fn tokens_compare_without_case_and_x_gzip_is_gzip() {
        assert_eq!(pick("GZip"), Some(Gzip));
        assert_eq!(pick("x-gzip"), Some(Gzip));
        assert_eq!(pick("  br ;  q=0.9 , gzip;q=0.5"), Some(Brotli));
    }

    #[test]
    fn a_malformed_q_value_leaves_its_element_out() {
        assert_eq!(pick("zstd;q=2, gzip"), Some(Gzip));
        assert_eq!(pick("zstd;q=0.5000, gzip;q=0.1"), Some(Gzip));
        assert_eq!(pick("zstd;q=abc"), None);
        assert_eq!(pick("zstd;q=1.001, br;q=1.000"), Some(Brotli));
        assert_eq!(pick("gzip;q=.5"), None);
    }
}
