#!/usr/bin/env python3
"""Spellings of an allow-listed admin host (issue 42, item 3), over HTTP/1.1 and HTTP/2.

The switch (started here) routes `^admin\\.example\\.org$` to the pool `admin` only from
10.0.0.0/8 and answers `403` to everyone else for that host; every other host goes to the pool
`sites`, a virtual-hosting server that serves the admin site too (nginx with `server_name
admin.example.org` beside a default server). The attacker is 127.0.0.1, outside the allow-list.
A spelling is a finding when its answer carries the admin site's body (`ADMIN-SITE` from `sites`,
`ADMIN-POOL` from `admin`): the rules let through what a server behind reads as the admin host.

A second service carries a `key = "host"` limit (`1/m`, burst 1) on a rule for `^api\\.example\\.org$`;
after one request as `api.example.org`, every other spelling must be `429`.

Usage: benches/attacks/dotted_hosts.py TCPVS_BINARY --sites PORT --admin PORT
  (sites: nginx with the two server blocks above; admin: any server answering `ADMIN-POOL`)
Every loop is bounded; only loopback addresses are used.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import h2.config
import h2.connection
import h2.events

RULES = """
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:{web}"
default_pool = "sites"
[[virtual.web.rule]]
host = '^admin\\.example\\.org$'
source = ["10.0.0.0/8"]
pool = "admin"
[[virtual.web.rule]]
host = '^admin\\.example\\.org$'
respond = {{ status = 403, body = "forbidden\\n", content_type = "text/plain" }}
[virtual.api]
listen = "127.0.0.1:{api}"
default_pool = "sites"
[[virtual.api.rule]]
host = '^api\\.example\\.org$'
limit = "per-host"
pool = "sites"
[limit.per-host]
key = "host"
rate = "1/m"
burst = 1
[pool.sites]
servers = [{{ addr = "127.0.0.1:{sites}" }}]
[pool.admin]
servers = [{{ addr = "127.0.0.1:{admin}" }}]
"""

ADMIN_BODIES = (b"ADMIN-SITE", b"ADMIN-POOL")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def h1(port, raw, patience=3.0):
    """Sends raw bytes, half-closes, reads everything (bounded)."""
    with socket.create_connection(("127.0.0.1", port), timeout=patience) as s:
        s.sendall(raw)
        s.shutdown(socket.SHUT_WR)
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
        return out


def statuses(answer):
    """Status codes and whether an admin body shows, for every response in `answer`."""
    codes = [line.split(b" ")[1].decode() for line in answer.split(b"\r\n")
             if line.startswith(b"HTTP/1.")]
    return codes, any(b in answer for b in ADMIN_BODIES)


def h2_request(port, headers, patience=3.0):
    """One HTTP/2 stream per header list; returns [(status, body)] (bounded)."""
    cfg = h2.config.H2Configuration(client_side=True, validate_outbound_headers=False,
                                    normalize_outbound_headers=False,
                                    validate_inbound_headers=False)
    conn = h2.connection.H2Connection(cfg)
    with socket.create_connection(("127.0.0.1", port), timeout=patience) as s:
        conn.initiate_connection()
        sids = []
        for hl in headers:
            sid = conn.get_next_available_stream_id()
            conn.send_headers(sid, hl, end_stream=True)
            sids.append(sid)
        s.sendall(conn.data_to_send())
        got = {sid: [None, b""] for sid in sids}
        done = set()
        deadline = time.monotonic() + patience
        while len(done) < len(sids) and time.monotonic() < deadline:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            for ev in conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    got[ev.stream_id][0] = dict(ev.headers).get(b":status", b"?").decode()
                elif isinstance(ev, h2.events.DataReceived):
                    got[ev.stream_id][1] += ev.data
                    conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, (h2.events.StreamEnded, h2.events.StreamReset)):
                    done.add(ev.stream_id)
                elif isinstance(ev, h2.events.ConnectionTerminated):
                    done.update(sids)
            out = conn.data_to_send()
            if out:
                s.sendall(out)
        return [(got[sid][0] or "reset/none", got[sid][1]) for sid in sids]


def host_req(host_line, target=b"/", extra=b""):
    return b"GET " + target + b" HTTP/1.1\r\n" + host_line + extra + b"Connection: close\r\n\r\n"


def h1_cases():
    hosts = [b"admin.example.org", b"admin.example.org.", b"Admin.Example.Org.",
             b"admin.example.org.:80", b"admin.example.org:80", b"ADMIN.example.org",
             b"ADMIN.EXAMPLE.ORG.:8080", b"admin.example.org:", b"admin.example.org.:",
             b"admin.example.org:0080", b"admin.example.org..", b"admin..example.org",
             b".admin.example.org", b"admin.example.org:80:80", b"admin%2eexample.org",
             b"%61dmin.example.org", b"admin.example.org%2e", b"[::1]", b"[::ffff:127.0.0.1]",
             b"admin.example.org\x00", b"adm\xc4\xb1n.example.org", b"admin.example.org\\",
             b"admin.example.org/", b"admin.example.org#", b"admin.example.org?",
             b"user@admin.example.org", b"admin.example.org;x", b"admin.example.org ."]
    cases = [(b"Host: " + h, host_req(b"Host: " + h + b"\r\n")) for h in hosts]
    padded = [b"Host:\tadmin.example.org\t", b"Host:  admin.example.org  ",
              b"HOST: admin.example.org.", b"host:Admin.Example.Org.",
              b"Host : admin.example.org", b"Host\t: admin.example.org",
              b"Host: public.example\r\n admin.example.org",
              b"Host: admin.example.org\r\nHost: public.example",
              b"Host: public.example\r\nHost: admin.example.org",
              b"Host: public.example, admin.example.org",
              b"Host: admin.example.org\rX: y"]
    cases += [(p, host_req(p + b"\r\n")) for p in padded]
    absolute = [b"http://admin.example.org./", b"http://Admin.Example.Org.:80/",
                b"HTTP://ADMIN.EXAMPLE.ORG/", b"https://admin.example.org./",
                b"http://admin.example.org", b"http://x@admin.example.org./",
                b"http://admin.example.org.:80", b"//admin.example.org./",
                b"http://public.example/"]
    for t in absolute:
        cases.append((b"target " + t + b" / Host: public.example",
                      host_req(b"Host: public.example\r\n", target=t)))
    cases.append((b"target http://public.example/ / Host: admin.example.org.",
                  host_req(b"Host: admin.example.org.\r\n", target=b"http://public.example/")))
    cases.append((b"HTTP/1.0 without Host, absolute http://admin.example.org./",
                  b"GET http://admin.example.org./ HTTP/1.0\r\n\r\n"))
    cases.append((b"HTTP/1.0 Host: admin.example.org.",
                  b"GET / HTTP/1.0\r\nHost: admin.example.org.\r\n\r\n"))
    cases.append((b"CONNECT admin.example.org.:80",
                  b"CONNECT admin.example.org.:80 HTTP/1.1\r\nHost: admin.example.org.:80\r\n\r\n"
                  b"GET / HTTP/1.1\r\nHost: admin.example.org\r\nConnection: close\r\n\r\n"))
    cases.append((b"OPTIONS * Host: admin.example.org.",
                  b"OPTIONS * HTTP/1.1\r\nHost: admin.example.org.\r\nConnection: close\r\n\r\n"))
    # Keep-alive: a public request first, then the admin host on the same connection.
    cases.append((b"keep-alive: public then admin.example.org.",
                  b"GET / HTTP/1.1\r\nHost: public.example\r\n\r\n"
                  b"GET / HTTP/1.1\r\nHost: admin.example.org.\r\nConnection: close\r\n\r\n"))
    cases.append((b"keep-alive: public then absolute http://admin.example.org/",
                  b"GET / HTTP/1.1\r\nHost: public.example\r\n\r\n"
                  b"GET http://admin.example.org/ HTTP/1.1\r\nHost: public.example\r\n"
                  b"Connection: close\r\n\r\n"))
    # A body that the switch might not frame as the server does: a second request inside.
    smuggled = (b"GET / HTTP/1.1\r\nHost: admin.example.org\r\nConnection: close\r\n\r\n")
    cases.append((b"POST public with CL and TE (inner admin request)",
                  b"POST / HTTP/1.1\r\nHost: public.example\r\nContent-Length: "
                  + str(len(smuggled) + 5).encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
                  + smuggled))
    cases.append((b"Upgrade: websocket to public, then admin bytes",
                  b"GET / HTTP/1.1\r\nHost: public.example\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\n\r\n" + smuggled))
    return cases


def h2_cases():
    def req(authority=None, host=None, scheme="http", path="/"):
        hl = [(":method", "GET"), (":scheme", scheme)]
        if authority is not None:
            hl.append((":authority", authority))
        hl.append((":path", path))
        if host is not None:
            hl.append(("host", host))
        return hl
    cases = []
    for a in ["admin.example.org", "admin.example.org.", "Admin.Example.Org.",
              "admin.example.org.:80", "ADMIN.EXAMPLE.ORG", "admin.example.org:",
              "admin.example.org:0080", "x@admin.example.org", "admin.example.org..",
              "admin.example.org\t", " admin.example.org"]:
        cases.append((f":authority {a!r}", [req(authority=a)]))
    for h in ["admin.example.org.", "Admin.Example.Org.:80", "ADMIN.example.org"]:
        cases.append((f"no :authority, host {h!r}", [req(host=h)]))
    cases.append((":authority public, host admin.example.org.",
                  [req(authority="public.example", host="admin.example.org.")]))
    cases.append((":authority admin.example.org., host public",
                  [req(authority="admin.example.org.", host="public.example")]))
    cases.append((":authority admin.example.org., host Admin.Example.Org.",
                  [req(authority="admin.example.org.", host="Admin.Example.Org.")]))
    cases.append((":path absolute http://admin.example.org./",
                  [req(authority="public.example", path="http://admin.example.org./")]))
    cases.append(("two streams: public then admin.example.org.",
                  [req(authority="public.example"), req(authority="admin.example.org.")]))
    cases.append(("host twice", [req(authority="public.example") +
                                 [("host", "public.example"), ("host", "admin.example.org")]]))
    return cases


def main():
    p = argparse.ArgumentParser()
    p.add_argument("binary")
    p.add_argument("--sites", type=int, required=True)
    p.add_argument("--admin", type=int, required=True)
    args = p.parse_args()
    web, api = free_port(), free_port()
    findings = 0
    with tempfile.TemporaryDirectory() as d:
        rules = os.path.join(d, "rules.toml")
        with open(rules, "w") as f:
            f.write(RULES.format(web=web, api=api, sites=args.sites, admin=args.admin))
        proc = subprocess.Popen([args.binary, "run", "-c", rules], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(d, "log"), "wb"))
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", web), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            print("== HTTP/1.1 from 127.0.0.1 (outside 10.0.0.0/8)")
            for name, raw in h1_cases():
                codes, admin = statuses(h1(web, raw))
                findings += admin
                mark = "FINDING: admin body" if admin else "ok"
                print(f"  {name!r:75} -> {','.join(codes) or 'closed/none'} {mark}")
            print("== HTTP/2 (prior knowledge) from 127.0.0.1")
            for name, hl in h2_cases():
                try:
                    res = h2_request(web, hl)
                except Exception as e:  # a refused connection is an answer too
                    res = [(f"error {type(e).__name__}", b"")]
                admin = any(any(b in body for b in ADMIN_BODIES) for _, body in res)
                findings += admin
                mark = "FINDING: admin body" if admin else "ok"
                print(f"  {name:75} -> {','.join(s for s, _ in res)} {mark}")
            print("== key = \"host\" limit (1/m, burst 1) on ^api\\.example\\.org$")
            first = statuses(h1(api, host_req(b"Host: api.example.org\r\n")))[0]
            print(f"  first 'api.example.org' -> {first}")
            for h in [b"api.example.org", b"api.example.org.", b"API.Example.Org.",
                      b"api.example.org.:80", b"api.example.org:8080", b"Api.Example.Org"]:
                codes = statuses(h1(api, host_req(b"Host: " + h + b"\r\n")))[0]
                escaped = codes != ["429"] and codes != ["400"]
                findings += escaped
                print(f"  {h!r:40} -> {codes} {'FINDING: escaped' if escaped else 'ok'}")
            for a in ["api.example.org.", "API.EXAMPLE.ORG.:80"]:
                res = h2_request(api, [[(":method", "GET"), (":scheme", "http"),
                                        (":authority", a), (":path", "/")]])
                escaped = res[0][0] not in ("429", "400")
                findings += escaped
                print(f"  h2 {a!r:37} -> {res[0][0]} {'FINDING: escaped' if escaped else 'ok'}")
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    print(f"findings: {findings}")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
