#!/usr/bin/env python3
"""Health-check tasks across reloads: does each reload that rebuilds a pool leave its old checker running?
Old vs new. Usage: check_leak.py"""
import os, re, signal, socket, sys, time, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *

def h(be, c, n):
    buf = b""
    while True:
        head, rest = read_head(c, buf)
        if head is None: return
        body, buf = read_body(c, head, rest)
        if b"/health" in head: be.checks.append(time.time())
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

def text(port, be, qt):
    return f"""[switch]
workers = 1
access_log = false
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
queue_timeout = "{qt}ms"
servers = [{{ addr = "127.0.0.1:{be.port}" }}]
[pool.app.health]
check = "http"
path = "/health"
interval = "250ms"
"""

def rate(be, secs):
    n0 = len(be.checks); time.sleep(secs); return round((len(be.checks) - n0) / secs, 1)

def run(binary):
    be = Backend(h); be.checks = []; port = free_port()
    p = start_switch(binary, text(port, be, 0), port)
    try:
        time.sleep(1)
        r0 = rate(be, 3)
        for i in range(1, 11):
            open(p.rules, "w").write(text(port, be, i * 10)); os.kill(p.pid, signal.SIGHUP); time.sleep(0.3)
        time.sleep(1)
        r1 = rate(be, 3)
        # reload keeping the pool identical
        for i in range(5):
            os.kill(p.pid, signal.SIGHUP); time.sleep(0.3)
        r2 = rate(be, 3)
    finally:
        p.terminate(); p.wait()
    return [("checks/s before", r0), ("after 10 pool-rebuilding reloads", r1), ("after 5 identical reloads", r2)]

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        print(f"### {o[0]}: old {o[1]}  new {n[1]}")
