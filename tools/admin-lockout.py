#!/usr/bin/env python3
"""Tries to lock operators out of a tcpvs admin endpoint, then makes a change with the token.

The attacker is any local user: it holds connections to the endpoint of three kinds and
re-opens each one the endpoint closes, for as long as the run lasts:

  --idle N      connections that never send a byte
  --slow N      slowloris: a partial request head, then one more byte every second
  --readers N   keep-alive connections that read /stats in a loop

Once they are all open, the operator's change is sent (`POST /reload`, or with --put PATH BODY
a `PUT`), with the token, on a connection of its own; it is sent again every 100 ms until it
is answered 2xx or --give-up seconds have passed. With --cli BINARY the change is
`BINARY reload --admin ADDR` (the token in TCPVS_ADMIN_TOKEN), a process of its own as an
operator runs it, and what counts is its exit status. Printed: the answers seen, and the time
from the first try to the success.

  tools/admin-lockout.py --admin 127.0.0.1:9090 --token T --idle 24 --slow 20 --readers 20
  tools/admin-lockout.py --admin unix:/run/tcpvs/admin.sock --readers 80

RELIABILITY.md, "Admin endpoint on a shared host", has the runs before and after the fix.
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time


def connect(admin):
    if admin.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(admin[len("unix:"):])
    else:
        host, port = admin.rsplit(":", 1)
        s = socket.create_connection((host.strip("[]"), int(port)))
    return s


def host_of(admin):
    return "localhost" if admin.startswith("unix:") else admin


def read_answer(s):
    """One answer (Content-Length framed); returns its status, or None when closed."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            return None
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = s.recv(65536)
        if not chunk:
            return None
        body += chunk
    return status


class Attack:
    def __init__(self, admin):
        self.admin = admin
        self.stop = threading.Event()
        self.opened = 0
        self.closed_by_endpoint = 0
        self.busy = 0
        self.lock = threading.Lock()

    def count(self, what):
        with self.lock:
            setattr(self, what, getattr(self, what) + 1)

    def idle(self):
        while not self.stop.is_set():
            try:
                s = connect(self.admin)
                self.count("opened")
                # Wait for the endpoint to close it (or the run to end).
                s.settimeout(0.5)
                while not self.stop.is_set():
                    try:
                        if not s.recv(4096):
                            break
                    except socket.timeout:
                        continue
                self.count("closed_by_endpoint")
                s.close()
            except OSError:
                time.sleep(0.05)

    def slow(self):
        head = ("GET /stats HTTP/1.1\r\nHost: %s\r\nX-Slow: " % host_of(self.admin)).encode()
        while not self.stop.is_set():
            try:
                s = connect(self.admin)
                self.count("opened")
                s.sendall(head[:20])
                s.settimeout(1.0)
                sent = 20
                while not self.stop.is_set():
                    try:
                        if not s.recv(4096):
                            break
                    except socket.timeout:
                        s.sendall(head[sent:sent + 1] if sent < len(head) else b"a")
                        sent += 1
                self.count("closed_by_endpoint")
                s.close()
            except OSError:
                time.sleep(0.05)

    def reader(self):
        request = ("GET /stats HTTP/1.1\r\nHost: %s\r\n\r\n" % host_of(self.admin)).encode()
        while not self.stop.is_set():
            try:
                s = connect(self.admin)
                self.count("opened")
                while not self.stop.is_set():
                    s.sendall(request)
                    status = read_answer(s)
                    if status is None:
                        break
                    if status == 503:
                        self.count("busy")
                        break
                self.count("closed_by_endpoint")
                s.close()
            except OSError:
                time.sleep(0.05)


def change(args):
    if args.cli:
        env = dict(os.environ)
        if args.token:
            env["TCPVS_ADMIN_TOKEN"] = args.token
        done = subprocess.run([args.cli, "reload", "--admin", args.admin], env=env,
                              capture_output=True, text=True)
        if done.returncode == 0:
            return 200
        return "exit %d: %s" % (done.returncode, done.stderr.strip()[:100])
    if args.put:
        path, body = args.put
        method = "PUT"
    else:
        path, body, method = "/reload", "{}", "POST"
    head = "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n" % (
        method, path, host_of(args.admin))
    if args.token:
        head += "Authorization: Bearer %s\r\n" % args.token
    head += "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
    s = connect(args.admin)
    s.settimeout(30)
    s.sendall(head.encode() + body.encode())
    try:
        return read_answer(s)
    finally:
        s.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--admin", required=True, help="HOST:PORT or unix:PATH")
    parser.add_argument("--token")
    parser.add_argument("--idle", type=int, default=0)
    parser.add_argument("--slow", type=int, default=0)
    parser.add_argument("--readers", type=int, default=0)
    parser.add_argument("--put", nargs=2, metavar=("PATH", "BODY"))
    parser.add_argument("--cli", metavar="BINARY", help="make the change with `BINARY reload`")
    parser.add_argument("--give-up", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds between opening the attack and the change")
    args = parser.parse_args()

    attack = Attack(args.admin)
    threads = []
    for kind, n in (("idle", args.idle), ("slow", args.slow), ("reader", args.readers)):
        for _ in range(n):
            t = threading.Thread(target=getattr(attack, kind), daemon=True)
            t.start()
            threads.append(t)
    time.sleep(args.settle)
    print("attack: %d idle, %d slowloris, %d /stats readers; %d connections opened so far"
          % (args.idle, args.slow, args.readers, attack.opened))

    statuses = []
    start = time.monotonic()
    succeeded = None
    while time.monotonic() - start < args.give_up:
        try:
            status = change(args)
        except OSError as e:
            status = "error: %s" % e
        statuses.append(status)
        if isinstance(status, int) and 200 <= status < 300:
            succeeded = time.monotonic() - start
            break
        time.sleep(0.1)
    attack.stop.set()

    shown = {}
    for s in statuses:
        shown[s] = shown.get(s, 0) + 1
    print("change: %d tries, answers %s" % (len(statuses), shown))
    if succeeded is None:
        print("change: no success within %.0f s" % args.give_up)
    else:
        print("change: succeeded %.3f s after the first try" % succeeded)
    print("attack: %d connections opened, %d closed by the endpoint, %d answered 503"
          % (attack.opened, attack.closed_by_endpoint, attack.busy))
    return 0 if succeeded is not None else 1


if __name__ == "__main__":
    sys.exit(main())
