//! `[switch] trace`, `request_id` and `otlp` (trace/): read and checked together, since
//! `otlp` needs `trace = "w3c"`. An `otlp` without it is an error rather than an implied
//! `trace`: exporting spans changes what every server receives (a `traceparent`), which a
//! rule file should say in so many words.

use super::error::ErrorSink;
use super::raw::RawSwitch;
use crate::trace::otlp::collector::Collector;
use crate::trace::TraceSettings;

pub(super) fn read_trace(raw: &RawSwitch, settings: &mut TraceSettings, sink: &mut ErrorSink<'_>) {
    if let Some(v) = &raw.trace {
        match v.get_ref().as_str() {
            "off" => settings.w3c = false,
            "w3c" => settings.w3c = true,
            other => sink.at(
                v.span(),
                format!("trace must be \"off\" or \"w3c\", not {other:?}"),
            ),
        }
    }
    if let Some(on) = raw.request_id {
        settings.request_id = on;
    }
    if let Some(v) = &raw.otlp {
        match Collector::parse(v.get_ref()) {
            Ok(_) if !settings.w3c => sink.at(
                v.span(),
                "otlp exports the spans of traced requests: it needs trace = \"w3c\" in [switch]",
            ),
            Ok(collector) => settings.otlp = Some(collector),
            Err(e) => sink.at(v.span(), e),
        }
    }
}
