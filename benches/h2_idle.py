"""Holds N idle HTTP/2 connections to ADDR, each after one request, for benches/h2_idle_memory.sh.

Usage: h2_idle.py HOST:PORT N tls|h2c. Each connection: TLS with ALPN h2 (certificates not
verified: the bench's own) or plain TCP with prior knowledge, the preface and an empty SETTINGS,
one GET /small.html on stream 1, read until its END_STREAM (SETTINGS acknowledged, PING answered on
the way). Prints "ready N" once every connection has had its answer, then keeps them open, reading
nothing more, until stdin closes. No library beyond Python's own: the frames and the one HPACK
block are written by hand (RFC 9113 section 4, RFC 7541 sections 6.1 and 6.2.2).
"""
import socket
import ssl
import struct
import sys

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0x0, 0x1, 0x3, 0x4, 0x6, 0x7
END_STREAM, ACK, END_HEADERS = 0x1, 0x1, 0x4
# Every read is bounded: a peer that never finishes its answer ends the run, not a hang.
TIMEOUT_SECONDS = 10
MAX_FRAMES = 1000


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


def literal(index: int, value: str) -> bytes:
    """A literal header field without indexing, its name from the static table (RFC 7541 6.2.2)."""
    raw = value.encode()
    assert index < 15 and len(raw) < 127
    return bytes([index, len(raw)]) + raw


def request_block(tls: bool) -> bytes:
    # :method GET (static 2), :scheme https/http (7/6), :path (4), :authority (1).
    return bytes([0x82, 0x87 if tls else 0x86]) + literal(4, "/small.html") + literal(1, "bench.test")


def read_exact(sock, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SystemExit("connection closed mid-frame")
        data += chunk
    return data


def one_connection(host: str, port: int, context) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=TIMEOUT_SECONDS)
    if context is not None:
        sock = context.wrap_socket(sock, server_hostname="bench.test")
        if sock.selected_alpn_protocol() != "h2":
            raise SystemExit(f"ALPN chose {sock.selected_alpn_protocol()!r}, not h2")
    sock.sendall(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM | END_HEADERS, 1, request_block(context is not None)))
    for _ in range(MAX_FRAMES):
        head = read_exact(sock, 9)
        length = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = read_exact(sock, length)
        if kind == SETTINGS and not flags & ACK:
            sock.sendall(frame(SETTINGS, ACK, 0))
        elif kind == PING and not flags & ACK:
            sock.sendall(frame(PING, ACK, 0, payload))
        elif kind in (GOAWAY, RST_STREAM):
            raise SystemExit(f"frame type {kind} from the server: {payload.hex()}")
        elif kind in (DATA, HEADERS) and stream == 1 and flags & END_STREAM:
            sock.settimeout(None)
            return sock
    raise SystemExit(f"no END_STREAM within {MAX_FRAMES} frames")


def main() -> None:
    host, port = sys.argv[1].rsplit(":", 1)
    count = int(sys.argv[2])
    context = None
    if sys.argv[3] == "tls":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
    elif sys.argv[3] != "h2c":
        raise SystemExit("usage: h2_idle.py HOST:PORT N tls|h2c")
    held = [one_connection(host, int(port), context) for _ in range(count)]
    print(f"ready {len(held)}", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
