#!/usr/bin/env python3
"""Reuse/retry and failure-accounting probes, old vs new. Usage: retry_probes.py"""
import json, re, socket, sys, time, threading, urllib.request
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *

MODE = {}
def handler(be, c, n):
    buf = b""; served = 0
    while True:
        head, rest = read_head(c, buf)
        if head is None: return
        body, buf = read_body(c, head, rest)
        path = head.split(b" ")[1]
        be.log.append((n, served, head.split(b"\r\n")[0]))
        if served >= 1 and path.startswith(b"/closeonreuse"):
            return  # read the request on a reused connection, close without answering (like a server closing an idle conn just as it arrives)
        if served >= 1 and path.startswith(b"/rstonreuse"):
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"); return
        if path.startswith(b"/partial"):
            c.sendall(b"HTTP/1.1 200"); return
        if path.startswith(b"/slowhead"):
            time.sleep(5)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        served += 1
        if path.startswith(b"/idleclose"):
            time.sleep(0.3); return   # closes the idle kept connection

def stats(admin):
    req = urllib.request.Request(f"http://127.0.0.1:{admin}/stats", headers={"Host": "127.0.0.1"})
    d = json.load(urllib.request.urlopen(req, timeout=5))
    s = d["pools"][0]["servers"]
    return [{k: x.get(k) for k in ("state", "failures", "retries", "timeouts", "requests", "idle", "active", "connections")} for x in s]

def G(p, m=b"GET", body=b""):
    cl = b"Content-Length: %d\r\n" % len(body) if body or m == b"POST" else b""
    return m + b" " + p + b" HTTP/1.1\r\nHost: t\r\n" + cl + b"\r\n" + body

SCEN = [
  ("idle-closed then GET", [G(b"/idleclose")], 0.8, [G(b"/x")]),
  ("idle-closed then POST", [G(b"/idleclose")], 0.8, [G(b"/x", b"POST", b"abc")]),
  ("idle-closed then DELETE", [G(b"/idleclose")], 0.8, [G(b"/x", b"DELETE")]),
  ("close-on-reuse GET", [G(b"/closeonreuse")], 0.2, [G(b"/closeonreuse")]),
  ("close-on-reuse POST", [G(b"/closeonreuse")], 0.2, [G(b"/closeonreuse", b"POST", b"abc")]),
  ("rst-on-reuse GET", [G(b"/rstonreuse")], 0.2, [G(b"/rstonreuse")]),
  ("partial head", [], 0, [G(b"/partial")]),
  ("partial head x3", [], 0, [G(b"/partial"), G(b"/partial"), G(b"/partial"), G(b"/x")]),
  ("slow head 504", [], 0, [G(b"/slowhead")]),
]

def run(binary, out, key):
    res = []
    for name, first, gap, then in SCEN:
        be = Backend(handler); port = free_port(); admin = free_port()
        p = start_switch(binary, rules(port, [be.port], admin=admin), port)
        try:
            c = socket.create_connection(("127.0.0.1", port)); c.settimeout(3)
            got = b""
            for r in first:
                c.sendall(r); time.sleep(0.2)
            time.sleep(gap)
            # new client connection so the idle server connection is reused from the pool
            c2 = socket.create_connection(("127.0.0.1", port)); c2.settimeout(3)
            for r in then:
                c2.sendall(r); time.sleep(0.3)
            end = time.time() + 4
            while time.time() < end:
                try:
                    d = c2.recv(65536)
                    if not d: got += b"<CLOSED>"; break
                    got += d
                except socket.timeout: break
                except ConnectionResetError: got += b"<RST>"; break
            c.close(); c2.close(); time.sleep(0.3)
            st = stats(admin)
            res.append((name, re.findall(rb"HTTP/1.1 \d+[^\r]*|<CLOSED>|<RST>", got), st, [l[1:] for l in be.log]))
        finally:
            p.terminate(); p.wait()
    out[key] = res

if __name__ == "__main__":
    out = {}
    th = [threading.Thread(target=run, args=(BINS[k], out, k)) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for i, (name, *_r) in enumerate(SCEN):
        o, n = out["old"][i], out["new"][i]
        print(f"### {name}: {'SAME' if o[1:] == n[1:] else 'DIFF'}")
        for k, v in (("old", o), ("new", n)):
            print(f"  {k}: client {v[1]} stats {v[2]} backend {v[3]}")
