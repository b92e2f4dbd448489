#!/usr/bin/env python3
"""Admin changes across reloads, admin endpoint refusals; old vs new. Usage: admin_semantics.py"""
import json, os, re, signal, socket, sys, time, threading, urllib.request, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *
from reload_probes import h_slow, admin_req, get

def text(port, admin, bes, weights, pool_extra=""):
    servers = ", ".join(f'{{ addr = "127.0.0.1:{b.port}", weight = {w} }}' for b, w in zip(bes, weights))
    return f"""[switch]
workers = 1
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
scheduler = "rr"
servers = [{servers}]
{pool_extra}"""

def srv(admin):
    d = json.loads(admin_req(admin, "GET", "/stats")[1])
    return [(x["state"], x["reason"], x["weight"], x["weight_configured"]) for x in d["pools"][0]["servers"]], d["generation"]

def raw(admin, data):
    c = socket.create_connection(("127.0.0.1", admin)); c.settimeout(3); c.sendall(data)
    got = b""
    try:
        while True:
            d = c.recv(65536)
            if not d: break
            got += d
    except socket.timeout: pass
    c.close(); return got.split(b"\r\n")[0]

def run(binary):
    bes = [Backend(h_slow) for _ in range(3)]
    port, admin = free_port(), free_port()
    p = start_switch(binary, text(port, admin, bes, [1, 1, 1]), port)
    out = []
    A = lambda i: f"/pools/app/servers/127.0.0.1:{bes[i].port}"
    try:
        time.sleep(0.3)
        admin_req(admin, "PUT", A(0), {"weight": 4}); admin_req(admin, "PUT", A(1), {"state": "maint"}); admin_req(admin, "PUT", A(2), {"state": "drain"})
        out.append(("after PUTs", srv(admin)))
        open(p.rules, "w").write(text(port, admin, bes, [1, 2, 1]))   # only server 1's line changes
        os.kill(p.pid, signal.SIGHUP); time.sleep(0.5)
        out.append(("reload changing server1 line", srv(admin)))
        open(p.rules, "w").write(text(port, admin, bes, [1, 2, 1], pool_extra='queue_timeout = "1s"\n[pool.app.health]\ncheck = "tcp"\ninterval = "500ms"\n'))
        os.kill(p.pid, signal.SIGHUP); time.sleep(1.5)
        out.append(("reload changing pool health only", srv(admin)))
        out.append(("GETs", dict(collections.Counter(get(port)[1] for _ in range(6)))))
        # refusals
        out.append(("PUT unknown server", admin_req(admin, "PUT", "/pools/app/servers/127.0.0.1:1", {"weight": 1})[0]))
        out.append(("PUT bad body", admin_req(admin, "PUT", A(0), {"weight": 70000})[0]))
        out.append(("PUT bad state", admin_req(admin, "PUT", A(0), {"state": "down"})[0]))
        out.append(("POST /reload text/plain", raw(admin, b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")))
        out.append(("POST /reload foreign Origin", raw(admin, b"POST /reload HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")))
        out.append(("GET /stats rebinding Host", raw(admin, b"GET /stats HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")))
        open(p.rules, "w").write("garbage = [")
        out.append(("POST /reload broken file", admin_req(admin, "POST", "/reload", {})[0]))
        out.append(("state after refused reload", srv(admin)))
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, run(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for (k, o), (_, n) in zip(res["old"], res["new"]):
        so = re.sub(r"\d{5}", "P", repr(o)); sn = re.sub(r"\d{5}", "P", repr(n))
        print(f"### {k}: {'SAME' if so == sn else 'DIFF'}\n  old: {so}" + ("" if so == sn else f"\n  new: {sn}"))
