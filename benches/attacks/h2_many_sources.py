#!/usr/bin/env python3
"""Beyond h2_stalled_streams.py (issue 42, item 1): stalled streams from several addresses,
HTTP/1.1 stalled uploads beside them, the 503 refusal path churned, and a client that never
reads while its streams are refused.

  stall  : SOURCES addresses (127.0.0.2 ...) each open CONNS HTTP/2 connections of STREAMS
           stalled POST streams, and H1 HTTP/1.1 connections each with a stalled POST; then a
           victim from 127.0.0.50 sends one HTTP/2 GET and one HTTP/1.1 GET.
  churn  : one address keeps opening streams the switch refuses (the budget is filled first by
           an HTTP/2 connection of stalled streams from the same address), for SECONDS, on a new
           connection whenever one is closed; counts refusals, GOAWAY codes, reconnections, and
           samples the switch's RSS.
  noread : like churn, but the client never reads its socket.

Usage: benches/attacks/h2_many_sources.py TCPVS_BINARY MODE [--sources 8] [--conns 1]
       [--streams 100] [--h1 0] [--max-clients 400] [--per-source 0] [--backend PORT]
       [--seconds 10]
Every loop is bounded; only loopback addresses are used.
"""

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import h2.exceptions  # noqa: E402
import h2.events  # noqa: E402
from h2_stalled_streams import (Backend, established_to, free_port,  # noqa: E402
                                write_rules)
from h2_stalled_streams import H2Client as BaseClient  # noqa: E402


class H2Client(BaseClient):
    """Records GOAWAY error codes and counts 503s as they come."""

    goaways = {}

    def pump(self):
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    self.statuses[event.stream_id] = dict(event.headers).get(b":status", b"?").decode()
                elif isinstance(event, h2.events.ConnectionTerminated):
                    code = str(event.error_code)
                    H2Client.goaways[code] = H2Client.goaways.get(code, 0) + 1
                    return False
            self.flush()


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def h1_stalled(source, port):
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    s.sendall(b"POST /upload HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1000\r\n\r\n")
    return s


def h1_get(source, port, patience):
    started = time.monotonic()
    s = socket.socket()
    s.settimeout(patience)
    s.bind((source, 0))
    try:
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
        out = s.recv(200)
        status = out.split(b" ", 2)[1].decode() if out.startswith(b"HTTP/") else "closed"
    except OSError as e:
        status = type(e).__name__
    finally:
        s.close()
    return status, (time.monotonic() - started) * 1000


async def h2_victim(port, patience):
    try:
        victim = H2Client("127.0.0.50", port)
    except OSError as e:
        return type(e).__name__, 0.0
    started = time.monotonic()
    sid = victim.get("a.test")
    status = "no answer"
    while time.monotonic() - started < patience:
        try:
            alive = victim.pump()
        except Exception as e:  # a GOAWAY or reset is an answer too
            status = type(e).__name__
            break
        if sid in victim.statuses:
            status = victim.statuses[sid]
            break
        if not alive:
            status = "closed"
            break
        await asyncio.sleep(0.001)
    took = (time.monotonic() - started) * 1000
    victim.sock.close()
    return status, took


async def stall(args, port, proc):
    attackers, h1s = [], []
    for i in range(args.sources):
        src = f"127.0.0.{2 + i}"
        for _ in range(args.conns):
            try:
                c = H2Client(src, port)
                c.open_stalled("a.test", args.streams)
                attackers.append(c)
            except OSError:
                pass
        for _ in range(args.h1):
            try:
                h1s.append(h1_stalled(src, port))
            except OSError:
                pass
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        for a in attackers:
            try:
                a.pump()
            except Exception:
                pass
        await asyncio.sleep(0.05)
    answered = {}
    for a in attackers:
        for st in a.statuses.values():
            answered[st] = answered.get(st, 0) + 1
    held = established_to(args.backend_port)
    v2 = await h2_victim(port, args.patience)
    v1 = await asyncio.get_running_loop().run_in_executor(None, h1_get, "127.0.0.50", port,
                                                          args.patience)
    print(f"sources={args.sources} h2 conns/source={args.conns} streams={args.streams} "
          f"h1 stalled/source={args.h1}: attacker streams answered at once: {answered or 'none'}; "
          f"server connections held: {held}; victim h2: {v2[0]} in {v2[1]:.1f} ms; "
          f"victim h1: {v1[0]} in {v1[1]:.1f} ms; switch RSS {rss_kib(proc.pid)} KiB", flush=True)
    for a in attackers:
        a.sock.close()
    for s in h1s:
        s.close()


async def churn(args, port, proc, read):
    # Fill the budget from the same address first, so that every further stream is refused.
    filler = H2Client("127.0.0.2", port)
    filler.open_stalled("a.test", args.streams)
    await asyncio.sleep(1.0)
    filler.pump()
    refused, goaways, reconnects, sent = 0, {}, 0, 0
    rss = [rss_kib(proc.pid)]
    client = H2Client("127.0.0.2", port)
    started = time.monotonic()
    last_sample = started
    while time.monotonic() - started < args.seconds:
        try:
            if client.conn.open_outbound_streams < 90:
                client.open_stalled("a.test", 10)
                sent += 10
            if read:
                for ev_sid, st in list(client.statuses.items()):
                    if st == "503":
                        refused += 1
                    del client.statuses[ev_sid]
                alive = client.pump()
            else:
                alive = True
        except h2.exceptions.ProtocolError:
            alive = False
        except (OSError, BlockingIOError):
            alive = not read and time.monotonic() - started < args.seconds
            if not read:
                # The socket is full: the switch stopped reading us; wait and sample.
                await asyncio.sleep(0.05)
        if read and not alive:
            reconnects += 1
            client.sock.close()
            client = H2Client("127.0.0.2", port)
        if time.monotonic() - last_sample > 1.0:
            rss.append(rss_kib(proc.pid))
            last_sample = time.monotonic()
        await asyncio.sleep(0)
    ss = subprocess.run(["ss", "-Htn", "state", "established", "src", "127.0.0.2"],
                        capture_output=True, text=True, check=False).stdout
    v2 = await h2_victim(port, args.patience)
    rss.append(rss_kib(proc.pid))
    print(f"{'churn' if read else 'noread'} {args.seconds}s: streams sent {sent}, "
          f"503 read {refused}, reconnections {reconnects}, GOAWAYs {H2Client.goaways}, "
          f"attacker connections still open {len(ss.splitlines())}, "
          f"switch RSS KiB samples {rss}; victim h2: {v2[0]} in {v2[1]:.1f} ms", flush=True)
    client.sock.close()
    filler.sock.close()


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("mode", choices=["stall", "churn", "noread"])
    p.add_argument("--sources", type=int, default=8)
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--h1", type=int, default=0)
    p.add_argument("--max-clients", type=int, default=400)
    p.add_argument("--per-source", type=int, default=0)
    p.add_argument("--backend", type=int, default=0)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--patience", type=float, default=5.0)
    args = p.parse_args()
    backend = Backend()
    server = await asyncio.start_server(backend.serve, "127.0.0.1", 0, backlog=4096)
    args.backend_port = args.backend or server.sockets[0].getsockname()[1]
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.toml")
        write_rules(rules, port, args.backend_port, args.max_clients, args.per_source)
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
            if args.mode == "stall":
                await stall(args, port, proc)
            else:
                await churn(args, port, proc, read=args.mode == "churn")
        finally:
            stopping = time.monotonic()
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            print(f"switch stopped {time.monotonic() - stopping:.1f} s after SIGTERM")
            log.close()
            lines = open(os.path.join(d, "log"), "rb").read().count(b"\n")
            print(f"switch log lines: {lines}")
    server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
