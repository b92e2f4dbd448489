//! Durations ("10s", "250ms") and sizes ("64KiB", 65536) as rule files write them.

use std::time::Duration;

/// Parses `<number><unit>` with unit `ms`, `s`, `m` or `h`; the number may have a fraction.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => return Err(format!("invalid duration {text:?}: expected a number and a unit (ms, s, m, h), like \"10s\" or \"250ms\"")),
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?}: {number:?} is not a number"))?;
    let seconds = value * scale;
    if !(seconds.is_finite() && seconds <= 86_400.0 * 365.0) {
        return Err(format!("invalid duration {text:?}: too long"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// Parses a byte size: digits with an optional unit `B`, `k`/`KiB`, `m`/`MiB`, `g`/`GiB`
/// (all binary multiples, as nginx reads `64k`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "k" | "K" | "KiB" => 1 << 10,
        "m" | "M" | "MiB" => 1 << 20,
        "g" | "G" | "GiB" => 1 << 30,
        _ => return Err(format!("invalid size {text:?}: expected bytes with an optional unit (KiB, MiB, GiB), like \"64KiB\"")),
    };
    let value: u64 = number
        .parse()
        .map_err(|_| format!("invalid size {text:?}: {number:?} is not a whole number"))?;
    value
        .checked_mul(scale)
        .ok_or_else(|| format!("invalid size {text:?}: too large"))
}

/// Parses a rate of bytes a second: `"1KiB/s"`, `"512/s"`, or a size alone (`"1KiB"`: per
/// second).
pub fn parse_rate(text: &str) -> Result<u64, String> {
    let size = text.trim().strip_suffix("/s").unwrap_or(text);
    parse_size(size)
        .map_err(|_| format!("invalid rate {text:?}: expected bytes a second, like \"1KiB/s\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("1KiB/s"), Ok(1024));
        assert_eq!(parse_rate("512/s"), Ok(512));
        assert_eq!(parse_rate("2KiB"), Ok(2048));
        assert_eq!(parse_rate("0"), Ok(0));
        assert!(parse_rate("fast").unwrap_err().contains("like \"1KiB/s\""));
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3m"), Ok(Duration::from_secs(180)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("10 sec").is_err());
        assert!(parse_duration("1.2.3s").is_err());
        assert!(parse_duration("99999999999h").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("64k"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2 GiB"), Ok(2 << 30));
        assert!(parse_size("-1").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("1TB").is_err());
        assert!(parse_size("99999999999999999999").is_err());
    }
}
