#!/usr/bin/env python3
"""A query byte reflected into Content-Disposition must take no server down (issue 42, item 4).

Starts two reflecting servers on 127.0.0.1 (each answers `200` with
`Content-Disposition: attachment; filename="<the query's f, percent-decoded, as bytes>"` and
its own name as the body, keep-alive), a backup server (`--backup PORT`, answering `BACKUP`,
e.g. nginx) and the switch (2 servers + the backup, `max_fails = 3`, `[admin] listen`). Then,
per byte, ROUNDS requests over HTTP/1.1 (and over HTTP/2, prior knowledge) with that byte in
`f`, interleaved with honest requests; prints the statuses, whether a reflected byte reached
the client, every honest answer that came from the backup, and each server's `state` and
`failures` / `response_errors` from `/stats` at the end.

Usage: benches/attacks/reflected_bytes.py TCPVS_BINARY --backup PORT [--rounds 50]
Every loop is bounded; only loopback addresses are used.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

import h2.config
import h2.connection
import h2.events

RULES = """
[switch]
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{web}"
default_pool = "app"
[pool.app]
servers = [{{ addr = "127.0.0.1:{a}" }}, {{ addr = "127.0.0.1:{b}" }},
           {{ addr = "127.0.0.1:{backup}", backup = true }}]
[pool.app.health]
max_fails = 3
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reflector(name):
    async def serve(reader, writer):
        try:
            for _ in range(100000):
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                query = urllib.parse.urlsplit(target).query
                f = b""
                for part in query.split(b"&"):
                    if part.startswith(b"f="):
                        f = urllib.parse.unquote_to_bytes(part[2:])
                body = name.encode() + b"\n"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Disposition: attachment; filename=\""
                             + f + b"\"\r\nContent-Length: " + str(len(body)).encode()
                             + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
    return serve


def h1_get(port, target, patience=3.0):
    with socket.create_connection(("127.0.0.1", port), timeout=patience) as s:
        s.sendall(b"GET " + target + b" HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n")
        out = b""
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
    status = out.split(b" ", 2)[1].decode() if out.startswith(b"HTTP/1.") else "none"
    head, _, body = out.partition(b"\r\n\r\n")
    return status, head, body


def h2_get(port, target, patience=3.0):
    cfg = h2.config.H2Configuration(client_side=True, validate_inbound_headers=False)
    conn = h2.connection.H2Connection(cfg)
    with socket.create_connection(("127.0.0.1", port), timeout=patience) as s:
        conn.initiate_connection()
        conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":authority", "app.test"),
                              (":path", target.decode("latin-1"))], end_stream=True)
        s.sendall(conn.data_to_send())
        status, fields, body = "none", [], b""
        deadline = time.monotonic() + patience
        ended = False
        while not ended and time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            try:
                events = conn.receive_data(data)
            except Exception as e:  # the h2 library refusing what the switch sent is a finding
                return f"client-error {type(e).__name__}: {e}", [], b""
            for ev in events:
                if isinstance(ev, h2.events.ResponseReceived):
                    fields = ev.headers
                    status = dict(ev.headers).get(b":status", b"?").decode()
                elif isinstance(ev, h2.events.DataReceived):
                    body += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, 1)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset,
                                     h2.events.ConnectionTerminated)):
                    ended = True
            out = conn.data_to_send()
            if out:
                s.sendall(out)
    return status, fields, body


def stats(admin):
    with socket.create_connection(("127.0.0.1", admin), timeout=3) as s:
        s.sendall(b"GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        out = b""
        for _ in range(1000):
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    body = out.partition(b"\r\n\r\n")[2]
    doc = json.loads(body)
    rows = []
    for pool in doc["pools"]:
        for srv in pool["servers"]:
            rows.append(f"{srv['addr']} state={srv['state']} failures={srv['failures']} "
                        f"response_errors={srv.get('response_errors', '-')} "
                        f"requests={srv['requests']} backup={srv['backup']}")
    return rows


async def attack(args, ports):
    loop = asyncio.get_running_loop()
    honest_backup = 0
    honest_total = 0
    table = []
    for byte in args.bytes:
        for proto in ("h1", "h2"):
            statuses, reflected = {}, 0
            for i in range(args.rounds):
                f = b"a%" + b"%02X" % byte + b"b.txt"
                target = b"/download?f=" + f
                if proto == "h1":
                    st, head, _ = await loop.run_in_executor(None, h1_get, ports["web"], target)
                    reflected += bytes([byte]) in head.partition(b"Content-Disposition")[2][:40]
                else:
                    st, fields, _ = await loop.run_in_executor(None, h2_get, ports["web"], target)
                    for k, v in fields:
                        if k.lower() == b"content-disposition":
                            reflected += 1
                statuses[st] = statuses.get(st, 0) + 1
                # an honest client between attacks
                hst, _, hbody = await loop.run_in_executor(None, h1_get, ports["web"], b"/")
                honest_total += 1
                if b"BACKUP" in hbody or hst != "200":
                    honest_backup += 1
            table.append(f"  byte 0x{byte:02x} over {proto}: statuses {statuses}, "
                         f"Content-Disposition reached the client {reflected}x")
    return table, honest_backup, honest_total


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--backup", type=int, required=True)
    p.add_argument("--rounds", type=int, default=50)
    p.add_argument("--bytes", default="01,7f,1b,08,0b,0c,1f,09,80,ff,00,0d,0a",
                   help="comma-separated hex bytes to reflect")
    args = p.parse_args()
    args.bytes = [int(b, 16) for b in args.bytes.split(",")]
    sa = await asyncio.start_server(reflector("SERVER-A"), "127.0.0.1", 0)
    sb = await asyncio.start_server(reflector("SERVER-B"), "127.0.0.1", 0)
    ports = {"a": sa.sockets[0].getsockname()[1], "b": sb.sockets[0].getsockname()[1],
             "web": free_port(), "admin": free_port(), "backup": args.backup}
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.toml")
        with open(rules, "w") as f:
            f.write(RULES.format(**ports))
        proc = subprocess.Popen([args.binary, "run", "-c", rules], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(d, "log"), "wb"))
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", ports["web"]), timeout=1).close()
                    break
                except OSError:
                    await asyncio.sleep(0.05)
            table, backup, total = await attack(args, ports)
            print("\n".join(table))
            print(f"honest requests answered by the backup or not 200: {backup} of {total}")
            print("servers at the end (/stats):")
            for row in stats(ports["admin"]):
                print("  " + row)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    sa.close()
    sb.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
