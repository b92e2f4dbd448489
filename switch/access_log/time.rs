//! The times of access log lines, in UTC: RFC 3339 (text and JSON lines) and the Common Log
//! Format's (combined lines).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// `now` as RFC 3339 in UTC with milliseconds: `2025-01-31T12:00:00.123Z`.
pub(super) fn write_time(out: &mut Vec<u8>, now: SystemTime) {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let mut year_text = itoa::Buffer::new();
    let year_text = year_text.format(year);
    for _ in year_text.len()..4 {
        out.push(b'0');
    }
    out.extend_from_slice(year_text.as_bytes());
    let two = |out: &mut Vec<u8>, sep: u8, n: u64| {
        out.push(sep);
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(out, b'-', month);
    two(out, b'-', day);
    two(out, b'T', of_day / 3600);
    two(out, b':', of_day / 60 % 60);
    two(out, b':', of_day % 60);
    let millis = u64::from(since.subsec_millis());
    out.push(b'.');
    out.push(b'0' + (millis / 100) as u8);
    out.push(b'0' + (millis / 10 % 10) as u8);
    out.push(b'0' + (millis % 10) as u8);
    out.push(b'Z');
}

/// `now` as the Common Log Format writes a time, in UTC: `01/Mar/2024:00:00:00 +0000` (the
/// brackets are the caller's).
pub(super) fn write_clf_time(out: &mut Vec<u8>, now: SystemTime) {
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let secs = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    let two = |out: &mut Vec<u8>, n: u64| {
        out.push(b'0' + (n / 10) as u8);
        out.push(b'0' + (n % 10) as u8);
    };
    two(out, day);
    out.push(b'/');
    let index = usize::try_from(month.saturating_sub(1))
        .unwrap_or(0)
        .min(11);
    out.extend_from_slice(MONTHS[index]);
    out.push(b'/');
    let _ = write!(out, "{year:04}");
    for n in [of_day / 3600, of_day / 60 % 60, of_day % 60] {
        out.push(b':');
        two(out, n);
    }
    out.extend_from_slice(b" +0000");
}

/// Year, month (1-12) and day (1-31) of a day counted from 1970-01-01 (proleptic Gregorian;
/// Howard Hinnant's `civil_from_days`).
pub(super) fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u64;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}
