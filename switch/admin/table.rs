//! `tcpvs list`: the `/stats` document as a table in the shape of `ipvsadm -L -n` (a line per
//! virtual service, then each pool with a `->` line per server), plus what a layer-7 switch
//! adds: requests, requests per second and bytes.
//!
//! ```text
//! tcpvs 0.1.0, generation 1, up 12s, 3 clients
//! Service  LocalAddress:Port  Conns  Open  Requests  Req/s  Errors
//! web      127.0.0.1:8080     40     3     1234      12.5   2
//!
//! Pool static (wlc): requests 600, active 0, queued 0
//!   -> RemoteAddress:Port  State  Weight  Active  Idle  Requests  Req/s  BytesIn  BytesOut  Fails
//!   -> 127.0.0.1:9001      up     1       0       2     600       12.5   1.2K     88.0K     0
//!   -> 127.0.0.1:9002      down   2       0       0     0         0.0    0        0         3      for 12s: check failed; check: connection refused
//! ```
//!
//! The JSON has no map from services to pools (a service reaches pools through its rules), so
//! the services come first and then every pool. Columns are aligned across all pools; the last,
//! untitled column says what is unusual about a server: backup, why it is not up, a failing
//! check, an effective weight that differs from the one in force.

use super::stats_json::{ServerJson, ServiceJson, StatsJson};
use crate::state::stats::counters::{server_counters, service_counters};

/// The whole table, each line ending in a newline.
pub fn render(stats: &StatsJson) -> String {
    let mut out = String::new();
    out.push_str(&summary(stats));
    out.push('\n');

    let mut services = vec![cells(
        &[&["Service", "LocalAddress:Port"], &service_titles()[..]].concat(),
    )];
    for s in &stats.services {
        let mut row = vec![s.name.clone(), s.listen.clone()];
        row.extend(service_cells(s));
        services.push(row);
    }
    for line in align(&services) {
        out.push_str(&line);
        out.push('\n');
    }

    // Server rows of every pool are aligned together, so the pools read as one table.
    let header = cells(
        &[
            &[
                "  -> RemoteAddress:Port",
                "State",
                "Weight",
                "Active",
                "Idle",
            ],
            &server_titles()[..],
            &["Fails"],
        ]
        .concat(),
    );
    let mut rows = Vec::new();
    for pool in &stats.pools {
        rows.push(header.clone());
        rows.extend(pool.servers.iter().map(server_row));
    }
    let mut rows = align(&rows).into_iter();
    for pool in &stats.pools {
        out.push('\n');
        out.push_str(&format!(
            "Pool {} ({}): requests {}, active {}, queued {}{}{}\n",
            pool.name,
            pool.scheduler,
            pool.requests,
            pool.active,
            pool.queued,
            match &pool.discover {
                Some(lookup) => format!(", servers found by {lookup}"),
                None => String::new(),
            },
            if pool.panic {
                ", PANIC: too few servers up, health ignored"
            } else {
                ""
            }
        ));
        for _ in 0..=pool.servers.len() {
            if let Some(line) = rows.next() {
                out.push_str(&line);
                out.push('\n');
            }
        }
    }
    out
}

/// One line for a server after a change (`set-weight`, `set-state`): the pool, the server and
/// its state, weight and load as the endpoint answered them.
pub fn server_line(pool: &str, server: &ServerJson) -> String {
    let mut line = format!("{pool} {}: {}", server.addr, server.state);
    let why = note(server);
    if !why.is_empty() {
        line.push_str(&format!(" ({why})"));
    }
    line.push_str(&format!(", weight {}", server.weight));
    if server.weight_configured != server.weight {
        line.push_str(&format!(" (configured {})", server.weight_configured));
    }
    line.push_str(&format!(
        ", active {}, idle {}, requests {}",
        server.active, server.idle, server.requests
    ));
    line
}

/// `tcpvs 0.1.0, generation 1, up 12s, 3 clients`
fn summary(stats: &StatsJson) -> String {
    let mut line = String::from("tcpvs");
    if !stats.version.is_empty() {
        line.push(' ');
        line.push_str(&stats.version);
    }
    line.push_str(&format!(
        ", generation {}, up {}, {} client{}",
        stats.generation,
        duration(stats.uptime_s),
        stats.clients,
        if stats.clients == 1 { "" } else { "s" }
    ));
    line
}

fn server_row(s: &ServerJson) -> Vec<String> {
    let mut row = vec![
        format!("  -> {}", s.addr),
        s.state.clone(),
        s.weight.to_string(),
        s.active.to_string(),
        s.idle.to_string(),
    ];
    row.extend(server_cells(s));
    row.push(s.failures.to_string());
    row.push(note(s));
    row
}

/// The columns the counter tables ask for (`list:`), in their order: `$titles()` names them,
/// `$cells(json)` fills them for one service or server.
macro_rules! counter_columns {
    ($json:ident, $titles:ident, $cells:ident;
        $( $group:ident { $( $(#[doc = $doc:literal])* $field:ident {
            json: $key:literal,
            metric: $kind:ident $metric:literal $help:literal,
            $( list: $shape:ident $($title:literal)+, )?
        } )* } )*
    ) => {
        fn $titles() -> Vec<&'static str> {
            vec![ $( $( $( $($title,)+ )? )* )* ]
        }

        fn $cells(s: &$json) -> Vec<String> {
            let mut cells = Vec::new();
            $( $( $( counter_columns!(@cells cells, s, $field, $shape); )? )* )*
            cells
        }
    };
    (@cells $cells:ident, $s:ident, $field:ident, Count) => {
        $cells.push($s.$field.to_string())
    };
    (@cells $cells:ident, $s:ident, $field:ident, Bytes) => {
        $cells.push(bytes($s.$field))
    };
    // The number, then its rate over the last 10 s (the JSON's `rate` of the same name).
    (@cells $cells:ident, $s:ident, $field:ident, CountAndRate) => {{
        $cells.push($s.$field.to_string());
        $cells.push(rate($s.rate.$field));
    }};
}

service_counters!(counter_columns, ServiceJson, service_titles, service_cells);
server_counters!(counter_columns, ServerJson, server_titles, server_cells);

/// What is unusual about a server, empty when nothing is.
fn note(s: &ServerJson) -> String {
    let mut parts = Vec::new();
    if s.backup {
        parts.push("backup".to_string());
    }
    if s.discovered {
        parts.push("discovered".to_string());
    }
    if s.state != "up" && !s.state.is_empty() {
        let mut why = format!("for {}", duration(s.since_s));
        if !s.reason.is_empty() && s.reason != s.state {
            why.push_str(": ");
            why.push_str(&s.reason);
        }
        parts.push(why);
    }
    if s.check.last.as_deref() == Some("failed") && !s.check.detail.is_empty() {
        parts.push(format!("check: {}", s.check.detail));
    }
    if s.weight_effective != s.weight && s.state == "up" {
        parts.push(format!("effective weight {}", s.weight_effective));
    }
    parts.join("; ")
}

fn cells(titles: &[&str]) -> Vec<String> {
    titles.iter().map(|t| t.to_string()).collect()
}

/// Pads each column to its widest cell, two spaces between columns; no trailing blanks.
fn align(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|row| {
            let mut line = String::new();
            for (c, cell) in row.iter().enumerate() {
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(cell);
                let pad = widths[c].saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
            line.truncate(line.trim_end().len());
            line
        })
        .collect()
}

/// Requests per second, one decimal.
fn rate(per_second: f64) -> String {
    format!("{per_second:.1}")
}

/// Bytes in binary units: `812`, `1.2K`, `88.0K`, `3.0G`.
pub fn bytes(n: u64) -> String {
    if n < 1024 {
        return n.to_string();
    }
    let mut value = n as f64;
    let mut unit = 0;
    const UNITS: [&str; 6] = ["", "K", "M", "G", "T", "P"];
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1}{}", UNITS[unit])
}

/// A duration in seconds as `12s`, `5m03s`, `2h05m`, `3d04h`.
pub fn duration(seconds: f64) -> String {
    let s = if seconds.is_finite() && seconds > 0.0 {
        seconds as u64
    } else {
        0
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// JSON text pretty-printed by `serde_json` (two spaces, `"key": value`), its keys in the order
/// received (serde_json's `preserve_order`): `tcpvs list --json`. `text` is JSON already (checked
/// by the client); were it not, it is returned as it is. Integers are kept exactly; other numbers
/// go through `f64` and are written back in their shortest form (`1.50` as `1.5`), the same
/// value.
pub fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .and_then(|value| serde_json::to_string_pretty(&value))
        .unwrap_or_else(|_| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(0), "0");
        assert_eq!(bytes(1023), "1023");
        assert_eq!(bytes(1234), "1.2K");
        assert_eq!(bytes(90112), "88.0K");
        assert_eq!(bytes(3 << 30), "3.0G");
        assert_eq!(duration(12.5), "12s");
        assert_eq!(duration(303.0), "5m03s");
        assert_eq!(duration(7500.0), "2h05m");
        assert_eq!(duration(273600.0), "3d04h");
        assert_eq!(duration(f64::NAN), "0s");
    }

    #[test]
    fn json_is_pretty_printed_with_its_keys_in_the_order_received() {
        let text = r#" {"z": 1, "a" : [ ], "s": "x, {\"y\": [1]}\\", "o": {}, "l": [1.50, {"k": null}],
               "n": [18446744073709551615, -9223372036854775808, 0.1, 1e300, 12.0]} "#;
        let pretty = pretty_json(text);
        assert_eq!(
            pretty,
            "{\n  \"z\": 1,\n  \"a\": [],\n  \"s\": \"x, {\\\"y\\\": [1]}\\\\\",\n  \"o\": {},\n  \
             \"l\": [\n    1.5,\n    {\n      \"k\": null\n    }\n  ],\n  \"n\": [\n    \
             18446744073709551615,\n    -9223372036854775808,\n    0.1,\n    1e+300,\n    12.0\n  \
             ]\n}"
        );
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&pretty).unwrap(),
            value
        );
        assert_eq!(pretty_json("not json"), "not json");
    }

    #[test]
    fn columns_are_aligned_without_trailing_blanks() {
        let rows = vec![cells(&["a", "bbb", ""]), cells(&["cccc", "d", "note"])];
        assert_eq!(align(&rows), vec!["a     bbb", "cccc  d    note"]);
    }
}
