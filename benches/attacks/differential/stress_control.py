#!/usr/bin/env python3
"""60 s of everything that writes a server's state at once (workers = 2): traffic, a flapping server
(passive failures and http checks every 100 ms), admin PUTs, reloads changing lines and pools.
Then: does the admin endpoint answer, do requests flow, do 'active' counters return to 0? Old vs new.
Usage: stress_control.py [SECONDS]"""
import json, os, re, signal, socket, sys, time, threading, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import admin_req, get

def h(be, c, n):
    if be.flap and int(time.time() * 2) % 2: return  # closes without answering half of the time
    buf = b""
    while True:
        head, rest = read_head(c, buf)
        if head is None: return
        body, buf = read_body(c, head, rest)
        time.sleep(0.005)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

def text(port, admin, bes, w, qt):
    servers = ", ".join(f'{{ addr = "127.0.0.1:{b.port}", weight = {x}, max_conns = 3 }}' for b, x in zip(bes, w))
    return f"""[switch]
workers = 2
access_log = false
idle_timeout = "3s"
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
queue_timeout = "{qt}ms"
slow_start = "2s"
servers = [{servers}]
[pool.app.health]
check = "http"
interval = "100ms"
timeout = "300ms"
max_fails = 2
fail_timeout = "1s"
"""

def run(binary, secs):
    bes = [Backend(h) for _ in range(3)]
    for b in bes: b.flap = False
    bes[2].flap = True
    port, admin = free_port(), free_port()
    p = start_switch(binary, text(port, admin, bes, [1, 1, 1], 500), port)
    stop = time.time() + secs
    st = collections.Counter(); puts = collections.Counter(); rel = collections.Counter()
    def client():
        while time.time() < stop: st[get(port)[0]] += 1
    def putter():
        i = 0
        while time.time() < stop:
            i += 1; b = bes[i % 3]
            s, _ = admin_req(admin, "PUT", f"/pools/app/servers/127.0.0.1:{b.port}", {"weight": i % 4, "state": ["ready", "drain", "maint", "ready"][i % 4]}); puts[s] += 1
            time.sleep(0.02)
    def reloader():
        i = 0
        while time.time() < stop:
            i += 1
            open(p.rules, "w").write(text(port, admin, bes, [1 + i % 2, 1, 1 + i % 3], 300 + 100 * (i % 2)))
            s, _ = admin_req(admin, "POST", "/reload", {}); rel[s] += 1
            time.sleep(0.15)
    th = [threading.Thread(target=f) for f in (client, client, client, client, putter, reloader)]
    for t in th: t.start()
    for t in th: t.join()
    out = [("client statuses", dict(st)), ("puts", dict(puts)), ("reloads", dict(rel))]
    # settle: all ready
    for b in bes: admin_req(admin, "PUT", f"/pools/app/servers/127.0.0.1:{b.port}", {"weight": 1, "state": "ready"})
    time.sleep(4)
    t0 = time.time(); s, body = admin_req(admin, "GET", "/stats"); out.append(("stats answered", s, round(time.time() - t0, 2)))
    if s == 200:
        d = json.loads(body)
        out.append(("active after settle", [x["active"] for x in d["pools"][0]["servers"]], "queued", d["pools"][0]["queued"], "pool active", d["pools"][0]["active"]))
    out.append(("10 GETs after", dict(collections.Counter(get(port)[0] for _ in range(10)))))
    p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    secs = float(sys.argv[1]) if len(sys.argv) > 1 else 45
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k], secs))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for o, n in zip(res["old"], res["new"]):
        print(f"### {o[0]}\n  old: {o[1:]}\n  new: {n[1:]}")
