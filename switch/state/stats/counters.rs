//! The plain counters of a virtual service and of a server, each declared once, in a table per
//! scope ([`service_counters!`], [`server_counters!`]). Everything that shows a counter is
//! generated from these tables: the atomics the data path bumps (`ServiceStats`, `ServerStats`
//! in stats.rs), the snapshot fields and the code that reads them (state/snapshot.rs), the
//! `/stats` JSON fields and the code that fills them (admin/stats_json.rs), the Prometheus
//! families (admin/metrics.rs) and the `tcpvs list` columns (admin/table.rs). Adding a counter
//! is adding a row; what is not a plain counter (status classes, latency histograms, states,
//! checks, derived sums such as a server's `failures`) stays hand-written beside the tables.
//!
//! A table is an "X-macro": `server_counters!(then, ARGS)` expands to `then! { ARGS; GROUPS }`,
//! and each consumer is a `macro_rules!` that picks what it needs of the rows. GROUPS is
//! `name { ROW* }` per group; a row is
//!
//! ```text
//! /// What the counter counts (the doc comment of the atomic and of the snapshot field).
//! field {
//!     json: "key",                               // its key in `/stats`
//!     metric: Counter "tcpvs_..." "help text",   // or Gauge: a value that goes down too
//!     list: Count "Title",                       // optional: a `tcpvs list` column
//! }
//! ```
//!
//! `field` is the name of the atomic, of the snapshot field and of the JSON struct's field (the
//! data path writes `stats::bump(&backend.stats.requests)`). `list` shapes are `Count "Title"`
//! (the number), `Bytes "Title"` (in binary units) and `CountAndRate "Title" "Rate title"` (the
//! number, then its rate over the last 10 s, read from the JSON's `rate` of the same name).
//!
//! Groups exist only because `/stats` and `/metrics` interleave the counters with the
//! hand-written fields differently (a server's status classes come after its error counters
//! in the JSON, after its request counter in the metrics): a consumer places each group where
//! its output wants it. Within a group, rows keep their order everywhere; a service's
//! families put its counters before its gauges.

/// The counters of a virtual service: one group, `counters`.
macro_rules! service_counters {
    ($then:ident $(, $($args:tt)*)?) => {
        $then! {
            $($($args)*)?;
            counters {
                /// Client connections accepted.
                accepted {
                    json: "connections",
                    metric: Counter "tcpvs_service_connections" "Client connections accepted",
                    list: Count "Conns",
                }
                /// Client connections open now.
                open {
                    json: "open",
                    metric: Gauge "tcpvs_service_open_connections" "Client connections open now",
                    list: Count "Open",
                }
                /// Connections refused with 503 because `max_clients` were connected (client
                /// connections and HTTP/2 streams).
                refused {
                    json: "refused",
                    metric: Counter "tcpvs_service_refused"
                        "Client connections turned away at max_clients",
                }
                /// Connections closed because they did not start with a valid PROXY protocol
                /// header (`proxy_protocol = true`).
                proxy_refused {
                    json: "proxy_refused",
                    metric: Counter "tcpvs_service_proxy_refused"
                        "Client connections closed for a missing or invalid PROXY protocol header",
                }
                /// TLS handshakes completed (`tls`).
                tls_handshakes {
                    json: "tls_handshakes",
                    metric: Counter "tcpvs_service_tls_handshakes" "TLS handshakes completed",
                }
                /// TLS handshakes that resumed a session.
                tls_resumed {
                    json: "tls_resumed",
                    metric: Counter "tcpvs_service_tls_resumed"
                        "TLS handshakes that resumed a session (ticket or session ID)",
                }
                /// Connections closed because their TLS handshake failed (`tls`), or their
                /// ClientHello could not be read (`mode = "tls-passthrough"`).
                tls_handshake_failures {
                    json: "tls_handshake_failures",
                    metric: Counter "tcpvs_service_tls_handshake_failures"
                        "Client connections closed for a failed TLS handshake or an unreadable ClientHello",
                }
                /// Requests read.
                requests {
                    json: "requests",
                    metric: Counter "tcpvs_service_requests" "Requests read",
                    list: CountAndRate "Requests" "Req/s",
                }
                /// Client connections that spoke HTTP/2 (ALPN `h2`, or the preface on a
                /// plain connection).
                h2_connections {
                    json: "h2_connections",
                    metric: Counter "tcpvs_service_h2_connections"
                        "Client connections that spoke HTTP/2",
                }
                /// HTTP/2 streams that carried a request (each is also one of `requests`).
                h2_streams {
                    json: "h2_streams",
                    metric: Counter "tcpvs_service_h2_streams"
                        "HTTP/2 streams that carried a request",
                }
                /// HTTP/2 protocol errors: streams reset and connections ended for a
                /// malformed request or a broken rule of the protocol.
                h2_protocol_errors {
                    json: "h2_protocol_errors",
                    metric: Counter "tcpvs_service_h2_protocol_errors"
                        "HTTP/2 streams reset and connections closed for a protocol error",
                }
                /// HTTP/2 streams answered `503` as they arrived, never run: the switch's
                /// budget (`max_clients`) full, their client over its share of the budget's
                /// last quarter, or over `max_conns_per_source` (connection/h2/admission.rs).
                h2_streams_refused {
                    json: "h2_streams_refused",
                    metric: Counter "tcpvs_service_h2_streams_refused"
                        "HTTP/2 streams answered 503 at once (budget full, share or max_conns_per_source)",
                }
                /// GOAWAY frames sent to HTTP/2 clients (stopping, reloads, budgets spent,
                /// errors).
                h2_goaways_sent {
                    json: "h2_goaways_sent",
                    metric: Counter "tcpvs_service_h2_goaways_sent" "GOAWAY frames sent to HTTP/2 clients",
                }
                /// Requests a rule answered with a redirect (`redirect`).
                redirects {
                    json: "redirects",
                    metric: Counter "tcpvs_service_redirects" "Requests answered with a rule's redirect",
                }
                /// Requests a rule answered itself (`respond`).
                responds {
                    json: "responds",
                    metric: Counter "tcpvs_service_responds" "Requests answered by a rule's respond",
                }
                /// Connections closed at once because their client had `max_conns_per_source`
                /// open already.
                source_refused {
                    json: "source_refused",
                    metric: Counter "tcpvs_service_source_refused"
                        "Client connections turned away at max_conns_per_source",
                }
                /// Connections closed at once in the last quarter of `max_clients` because their
                /// client (an IPv6 client's /64) held a quarter of the free room or more
                /// (capacity/share.rs).
                share_refused {
                    json: "share_refused",
                    metric: Counter "tcpvs_service_share_refused"
                        "Client connections turned away in the last quarter of max_clients: their source held its share",
                }
                /// Responses the switch produced itself (4xx refusals, 502, 503, 504).
                local_errors {
                    json: "local_errors",
                    metric: Counter "tcpvs_service_local_errors"
                        "Answers the switch made itself (refusals, 502, 503, 504)",
                    list: Count "Errors",
                }
                /// Responses compressed on their way (`[virtual.NAME.compress]`).
                compressed {
                    json: "compressed",
                    metric: Counter "tcpvs_service_compressed" "Responses compressed on their way to the client",
                }
                /// Responses that would have been compressed but went as they were: the
                /// encoders at work held all of `compress_memory`.
                compress_skipped {
                    json: "compress_skipped",
                    metric: Counter "tcpvs_service_compress_skipped"
                        "Responses sent uncompressed because compress_memory was spent",
                }
                /// Bytes of response bodies given to the encoder (before compression).
                compress_bytes_in {
                    json: "compress_bytes_in",
                    metric: Counter "tcpvs_service_compress_bytes_in"
                        "Response body bytes compressed (before compression)",
                }
                /// Bytes the encoder gave back (after compression).
                compress_bytes_out {
                    json: "compress_bytes_out",
                    metric: Counter "tcpvs_service_compress_bytes_out"
                        "Compressed response body bytes sent (after compression)",
                }
            }
        }
    };
}

/// The counters of a server, in three groups: `traffic` (connections and requests), `errors`
/// (failed attempts, timeouts, retries) and `bytes`.
macro_rules! server_counters {
    ($then:ident $(, $($args:tt)*)?) => {
        $then! {
            $($($args)*)?;
            traffic {
                /// TCP connections opened to the server.
                connections {
                    json: "connections",
                    metric: Counter "tcpvs_server_connections" "Connections opened to the server",
                }
                /// Requests sent (a retry counts again).
                requests {
                    json: "requests",
                    metric: Counter "tcpvs_server_requests" "Requests sent (a retry counts again)",
                    list: CountAndRate "Requests" "Req/s",
                }
            }
            errors {
                /// Connection attempts that failed or timed out.
                connect_errors {
                    json: "connect_errors",
                    metric: Counter "tcpvs_server_connect_errors"
                        "Connection attempts that failed or timed out",
                }
                /// TLS handshakes with the server that failed (a certificate that did not
                /// verify, no common version, an alert): also connection errors.
                tls_failures {
                    json: "tls_failures",
                    metric: Counter "tcpvs_server_tls_failures"
                        "TLS handshakes with the server that failed",
                }
                /// Exchanges that failed after connecting: bad response, reset, timeout.
                response_errors {
                    json: "response_errors",
                    metric: Counter "tcpvs_server_response_errors"
                        "Exchanges that failed after connecting",
                }
                /// Connection attempts that ran out of time (`connect_timeout`), and responses
                /// that did not begin in time (`idle_timeout` before the response head: 504).
                timeouts {
                    json: "timeouts",
                    metric: Counter "tcpvs_server_timeouts"
                        "Connection attempts and exchanges that ran out of time",
                }
                /// Requests sent again after a failed attempt at this server (on a new
                /// connection to it, or to the next server).
                retries {
                    json: "retries",
                    metric: Counter "tcpvs_server_retries"
                        "Failed attempts after which the request was tried again",
                }
            }
            bytes {
                /// Bytes of requests sent to the server, heads included.
                bytes_in {
                    json: "bytes_in",
                    metric: Counter "tcpvs_server_bytes_in" "Bytes of requests sent to the server",
                    list: Bytes "BytesIn",
                }
                /// Bytes of responses relayed to clients, heads as rebuilt.
                bytes_out {
                    json: "bytes_out",
                    metric: Counter "tcpvs_server_bytes_out" "Bytes of responses relayed to clients",
                    list: Bytes "BytesOut",
                }
            }
        }
    };
}

/// A struct with one field of type `$counter` per counter of the table, with the counter's doc
/// comment, then the hand-written fields given:
/// `table!(counter_struct, #[derive(..)] pub struct Name { hand fields } counters: Type)`.
macro_rules! counter_struct {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident { $($hand:tt)* } counters: $counter:ty;
        $( $group:ident { $( $(#[doc = $doc:literal])* $field:ident { $($spec:tt)* } )* } )*
    ) => {
        $(#[$attr])*
        $vis struct $name {
            $( $( $(#[doc = $doc])* pub $field: $counter, )* )*
            $($hand)*
        }
    };
}

/// A struct literal: the hand-written fields given, then every counter of the table as
/// `$read(&$source.field)`: `table!(counter_literal, Name { hand fields } stats::read, source)`.
macro_rules! counter_literal {
    (
        $name:ident { $($hand:tt)* } $read:path, $source:ident;
        $( $group:ident { $( $(#[doc = $doc:literal])* $field:ident { $($spec:tt)* } )* } )*
    ) => {
        $name {
            $($hand)*
            $( $( $field: $read(&$source.$field), )* )*
        }
    };
}

pub(crate) use {counter_literal, counter_struct, server_counters, service_counters};
