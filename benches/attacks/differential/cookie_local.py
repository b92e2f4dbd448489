#!/usr/bin/env python3
"""cookie persistence across a refused server and retries; local errors with pipelined leftovers. Old vs new.
Usage: cookie_local.py"""
import re, socket, sys, time, threading
import os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import h_slow
import http_probes as hp

def run(binary):
    be = Backend(h_slow); dead = free_port(); port = free_port()
    txt = f"""[switch]
workers = 1
access_log = false
idle_timeout = "2s"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[[virtual.web.rule]]
path = "^/none"
pool = "empty"
[pool.app]
scheduler = "cookie"
secret = "s"
inner = "rr"
servers = [{{ addr = "127.0.0.1:{dead}" }}, {{ addr = "127.0.0.1:{be.port}" }}]
[pool.app.health]
max_fails = 0
[pool.empty]
servers = [{{ addr = "127.0.0.1:{dead}" }}]
[pool.empty.health]
max_fails = 0
"""
    p = start_switch(binary, txt, port)
    G = hp.G
    out = []
    try:
        for i in range(3):
            out.append((f"GET {i} (cookie pool, one dead)", talk(port, [G(b"/a")], 1.0)))
        m = re.search(rb"Set-Cookie: TCPVS=([^;]+)", out[0][1]) or re.search(rb"Set-Cookie: TCPVS=([^;]+)", out[1][1])
        if m:
            out.append(("with its cookie", talk(port, [G(b"/a", b"Cookie: TCPVS=" + m.group(1) + b"\r\n")], 1.0)))
        out.append(("forged cookie", talk(port, [G(b"/a", b"Cookie: TCPVS=deadbeef\r\n")], 1.0)))
        out.append(("502 pool + pipelined", talk(port, [G(b"/none") + G(b"/a")], 1.5)))
        out.append(("502 POST pool + pipelined", talk(port, [b"POST /none HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc" + G(b"/a")], 1.5)))
        out.append(("HEAD 502", talk(port, [b"HEAD /none HTTP/1.1\r\nHost: t\r\n\r\n" + G(b"/a")], 1.5)))
        out.append(("POST no Host http/1.0 to dead", talk(port, [b"GET /none HTTP/1.0\r\n\r\n"], 1.5)))
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        so = re.sub(rb"\d{5}", b"P", o[1]); sn = re.sub(rb"\d{5}", b"P", n[1])
        print(f"### {o[0]}: {'SAME' if so == sn else 'DIFF'}\n  old: {so[:400]}" + ("" if so == sn else f"\n  new: {sn[:400]}"))
