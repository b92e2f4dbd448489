#!/usr/bin/env python3
"""An OTLP/HTTP collector that takes every POST /v1/traces and throws it away: the far end of
`[switch] otlp` in benchmarks (benches/ab.sh with NEW_SWITCH, BENCHMARKS.md "Tracing"), so that
the switch's cost of exporting is measured without a real collector's. Counts the batches and
bytes it took and prints them when stopped (SIGTERM or Ctrl-C).
Usage: python3 benches/otlp_sink.py [PORT]     (4318, OTLP/HTTP's port, by default)
"""
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

taken = {"batches": 0, "bytes": 0}


class Sink(BaseHTTPRequestHandler):
    # HTTP/1.1: the connection stays open between batches, as an OpenTelemetry collector's.
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        taken["batches"] += 1
        taken["bytes"] += len(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def stop(*_):
    print(f"otlp_sink: {taken['batches']} batches, {taken['bytes']} bytes", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, stop)
port = int(sys.argv[1]) if len(sys.argv) > 1 else 4318
try:
    ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
except KeyboardInterrupt:
    stop()
