#!/usr/bin/env python3
"""The 503 refusal path churned (issue 42, item 1): one address, `max_conns_per_source = 2`, keeps
opening stalled POST streams on one HTTP/2 connection (raw frames, stream ids 1, 3, 5, ...): two
run, the rest are refused with 503. `read` mode reads the answers (with --reset it also resets each stream at once, RST_STREAM
CANCEL, which the Rapid Reset budget meets first), reconnecting whenever the switch closes the connection; `noread` never reads
its socket. For SECONDS: streams sent, responses and GOAWAYs (with their codes) seen,
reconnections, the switch's RSS each second; then a victim (127.0.0.50) HTTP/2 GET.

Usage: benches/attacks/h2_refusal_churn.py TCPVS_BINARY read|noread [--seconds 10] [--reset]
Every loop is bounded; only loopback addresses are used.
"""

import argparse
import asyncio
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from h2_many_sources import h2_victim, rss_kib  # noqa: E402
from h2_stalled_streams import Backend, free_port, write_rules  # noqa: E402

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
# POST, http, /, :authority a.test (literal, not indexed), content-length 1000 (same).
BLOCK = b"\x83\x86\x84\x01\x06a.test\x0f\x0d\x041000"


def frame(kind, flags, sid, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", sid) + payload


def connect(port):
    s = socket.socket()
    s.bind(("127.0.0.2", 0))
    s.connect(("127.0.0.1", port))
    s.sendall(PREFACE + frame(4, 0, 0) + frame(4, 1, 0))  # SETTINGS, ACK of the switch's
    s.setblocking(False)
    return s


def parse(buf, seen):
    """Counts HEADERS (responses) and GOAWAY codes in complete frames; returns the rest."""
    while len(buf) >= 9:
        length = int.from_bytes(buf[:3], "big")
        if len(buf) < 9 + length:
            break
        kind, payload = buf[3], buf[9:9 + length]
        if kind == 1:
            seen["responses"] += 1
        elif kind == 7:
            code = int.from_bytes(payload[4:8], "big")
            seen["goaway"][code] = seen["goaway"].get(code, 0) + 1
        elif kind == 3:
            seen["rst"] += 1
        buf = buf[9 + length:]
    return buf


async def run(args, port, proc):
    seen = {"responses": 0, "goaway": {}, "rst": 0}
    sent, reconnects, blocked = 0, 0, 0
    s = connect(port)
    sid, buf = 1, b""
    rss = [rss_kib(proc.pid)]
    started = time.monotonic()
    last = started
    while time.monotonic() - started < args.seconds:
        batch = b"".join(frame(1, 4, sid + 2 * i, BLOCK) for i in range(10))
        if args.reset:
            batch += b"".join(frame(3, 0, sid + 2 * i, struct.pack(">I", 8)) for i in range(10)
                              if sid + 2 * i > 3)
        closed = False
        try:
            s.send(batch)  # whole or partly: a partial frame at worst, then the loop ends
            sent += 10
            sid += 20
        except BlockingIOError:
            blocked += 1
            await asyncio.sleep(0.01)
        except OSError:
            closed = True
        if args.mode == "read":
            try:
                for _ in range(100):
                    data = s.recv(65536)
                    if not data:
                        closed = True
                        break
                    buf = parse(buf + data, seen)
            except BlockingIOError:
                pass
            except OSError:
                closed = True
        if closed or sid > 2**31 - 100:
            if args.mode == "noread":
                break
            s.close()
            reconnects += 1
            s, sid, buf = connect(port), 1, b""
        if time.monotonic() - last >= 1.0:
            rss.append(rss_kib(proc.pid))
            last = time.monotonic()
        await asyncio.sleep(0)
    still_open = subprocess.run(["ss", "-Htn", "state", "established", "src", "127.0.0.2"],
                                capture_output=True, text=True, check=False).stdout
    victim = await h2_victim(port, 5.0)
    rss.append(rss_kib(proc.pid))
    print(f"{args.mode} {args.seconds:.0f}s: streams sent {sent}, send blocked {blocked}x, "
          f"responses seen {seen['responses']}, RST_STREAM seen {seen['rst']}, "
          f"GOAWAY codes {seen['goaway']}, reconnections {reconnects}, attacker connections "
          f"open at the end {len(still_open.splitlines())}; switch RSS KiB per second {rss}; "
          f"victim h2: {victim[0]} in {victim[1]:.1f} ms", flush=True)
    s.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("mode", choices=["read", "noread"])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--reset", action="store_true",
                   help="also reset each refused stream at once (RST_STREAM CANCEL after HEADERS)")
    args = p.parse_args()
    backend = Backend()
    server = await asyncio.start_server(backend.serve, "127.0.0.1", 0, backlog=4096)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.toml")
        write_rules(rules, port, server.sockets[0].getsockname()[1], 400, 2)
        log = open(os.path.join(d, "log"), "wb")
        proc = subprocess.Popen([args.binary, "run", "-c", rules], stdout=subprocess.DEVNULL,
                                stderr=log)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            await run(args, port, proc)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
            with open(os.path.join(d, "log"), "rb") as f:
                text = f.read()
            lines = text.count(b"\n")
            kinds = {}
            for line in text.decode(errors="replace").splitlines():
                key = " ".join(line.split()[1:])[:90]
                kinds[key] = kinds.get(key, 0) + 1
            top = sorted(kinds.items(), key=lambda kv: -kv[1])[:3]
            print(f"switch log lines: {lines}; most frequent: {top}")
    server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
