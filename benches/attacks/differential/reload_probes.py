#!/usr/bin/env python3
"""Reload probes, old vs new. Usage: reload_probes.py [taken|weight|hup|admin]"""
import json, os, re, signal, socket, sys, time, threading, urllib.request, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import *

def h_slow(be, c, n):
    buf = b""
    while True:
        head, rest = read_head(c, buf)
        if head is None: return
        body, buf = read_body(c, head, rest)
        path = head.split(b" ")[1]
        if path.startswith(b"/slow"): time.sleep(1.5)
        msg = b"%d" % be.port
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(msg), msg))

def admin_req(admin, method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{admin}{path}", data=data, method=method,
                                 headers={"Host": "127.0.0.1", "Content-Type": "application/json"})
    try:
        r = urllib.request.urlopen(req, timeout=10); return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except Exception as e:
        return None, repr(e)

def summary(admin):
    st, body = admin_req(admin, "GET", "/stats")
    d = json.loads(body)
    return {"gen": d["generation"], "services": [(s["name"], s["listen"]) for s in d["services"]],
            "pools": {p["name"]: [(x["addr"].split(":")[1], x["state"], x["weight"], x["weight_configured"], x["active"]) for x in p["servers"]] for p in d["pools"]}}

def rtext(port, admin, bes, weights, extra=""):
    servers = ", ".join(f'{{ addr = "127.0.0.1:{b.port}", weight = {w} }}' for b, w in zip(bes, weights))
    return f"""[switch]
idle_timeout = "5s"
workers = 1
access_log = false
[admin]
listen = "127.0.0.1:{admin}"
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "app"
[pool.app]
scheduler = "wrr"
servers = [{servers}]
{extra}"""

def get(port, path=b"/"):
    try:
        c = socket.create_connection(("127.0.0.1", port), 3); c.settimeout(6)
        c.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        got = b""
        while True:
            d = c.recv(65536)
            if not d: break
            got += d
        c.close()
        return got.split(b" ")[1].decode() if got else "EMPTY", got.rsplit(b"\n", 1)[-1].decode()
    except Exception as e:
        return type(e).__name__, ""

def taken(binary):
    bes = [Backend(h_slow) for _ in range(3)]
    port, admin = free_port(), free_port()
    p = start_switch(binary, rtext(port, admin, bes[:2], [1, 1]), port)
    out = []
    try:
        time.sleep(0.3)
        out.append(("put b1 weight 5", admin_req(admin, "PUT", f"/pools/app/servers/127.0.0.1:{bes[0].port}", {"weight": 5})[0]))
        before = summary(admin)
        hold = socket.socket(); hold.bind(("127.0.0.1", 0)); hold.listen(1); taken_port = hold.getsockname()[1]
        # new file: b1's line unchanged, b2's weight changes, b3 added, a new pool/service on a taken address
        newtext = rtext(port, admin, bes, [1, 3, 2], extra=f"""[virtual.other]
listen = "127.0.0.1:{taken_port}"
default_pool = "app"
""")
        open(p.rules, "w").write(newtext)
        os.kill(p.pid, signal.SIGHUP); time.sleep(1.0)
        after_hup = summary(admin)
        r = admin_req(admin, "POST", "/reload", {})
        after_post = summary(admin)
        dist = collections.Counter(get(port)[1] for _ in range(12))
        out += [("before", before), ("after HUP", after_hup), ("POST /reload", r), ("after POST", after_post),
                ("distribution of 12 GETs by backend port", dict(dist)), ("ports", [b.port for b in bes])]
        # also: the log lines
        hold.close()
    finally:
        p.terminate(); p.wait()
    out.append(("log", [l for l in open(os.path.join(p.folder, "stderr")).read().splitlines() if "reload" in l.lower()][:6]))
    return out

def weight(binary):
    bes = [Backend(h_slow) for _ in range(2)]
    port, admin = free_port(), free_port()
    p = start_switch(binary, rtext(port, admin, bes, [1, 1]), port)
    out = []
    try:
        time.sleep(0.3)
        res = []
        th = [threading.Thread(target=lambda: res.append(get(port, b"/slow")[0])) for _ in range(6)]
        for t in th: t.start()
        time.sleep(0.4)
        during = summary(admin)
        open(p.rules, "w").write(rtext(port, admin, bes, [3, 1]))
        os.kill(p.pid, signal.SIGHUP); time.sleep(0.3)
        mid = summary(admin)
        for t in th: t.join()
        time.sleep(0.3)
        after = summary(admin)
        dist = collections.Counter(get(port)[1] for _ in range(8))
        out += [("in-flight statuses", sorted(res)), ("during", during), ("right after reload", mid), ("after", after),
                ("8 GETs by backend", dict(dist)), ("ports", [b.port for b in bes])]
        # reload back to 1,1 and then remove server 0 while slow requests run
        res2 = []
        th = [threading.Thread(target=lambda: res2.append(get(port, b"/slow")[0])) for _ in range(4)]
        for t in th: t.start()
        time.sleep(0.4)
        open(p.rules, "w").write(rtext(port, admin, bes[1:], [1]))
        os.kill(p.pid, signal.SIGHUP); time.sleep(0.3)
        open(p.rules, "w").write(rtext(port, admin, bes, [1, 1]))
        os.kill(p.pid, signal.SIGHUP)
        for t in th: t.join()
        time.sleep(0.5)
        out += [("remove+readd during slow: statuses", sorted(res2)), ("after remove+readd", summary(admin))]
    finally:
        p.terminate(); p.wait()
    return out

def hup(binary):
    bes = [Backend(h_slow) for _ in range(3)]
    port, admin = free_port(), free_port()
    p = start_switch(binary, rtext(port, admin, bes[:2], [1, 1]), port)
    stop = time.time() + 20
    statuses = collections.Counter()
    def client():
        c = None
        while time.time() < stop:
            try:
                if c is None:
                    c = socket.create_connection(("127.0.0.1", port), 3); c.settimeout(5); buf = b""
                c.sendall(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d: raise ConnectionError("closed")
                    buf += d
                head, _, rest = buf.partition(b"\r\n\r\n")
                n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
                while len(rest) < n: rest += c.recv(65536)
                buf = rest[n:]
                statuses[head.split(b" ")[1].decode()] += 1
                if b"onnection: close" in head: c.close(); c = None
            except Exception as e:
                statuses["exc:" + type(e).__name__] += 1
                try: c.close()
                except Exception: pass
                c = None
    th = [threading.Thread(target=client) for _ in range(4)]
    for t in th: t.start()
    variants = [([0, 1], [1, 1]), ([0, 1, 2], [1, 2, 1]), ([1, 2], [1, 1]), ([0, 2], [5, 1])]
    k = 0
    try:
        while time.time() < stop - 1:
            sel, w = variants[k % len(variants)]; k += 1
            open(p.rules, "w").write(rtext(port, admin, [bes[i] for i in sel], w))
            os.kill(p.pid, signal.SIGHUP); time.sleep(0.4)
        for t in th: t.join()
        time.sleep(0.5)
        fin = summary(admin)
    finally:
        p.terminate(); p.wait()
    return [("reloads", k), ("statuses", dict(statuses)), ("final", fin)]

def admin_race(binary):
    bes = [Backend(h_slow) for _ in range(2)]
    port, admin = free_port(), free_port()
    # a big rule file so a reload takes a while
    extra = "".join(f"""[pool.p{i}]
servers = [{{ addr = "127.0.0.1:{bes[0].port}" }}, {{ addr = "127.0.0.1:{bes[1].port}" }}]
[[virtual.web.rule]]
path = "^/p{i}/"
pool = "p{i}"
""" for i in range(300))
    text = rtext(port, admin, bes, [1, 1])
    text = text.replace("[pool.app]", extra + "[pool.app]")
    p = start_switch(binary, text, port)
    out = []
    try:
        time.sleep(0.5)
        res = collections.Counter(); puts = collections.Counter()
        stop = time.time() + 8
        def reloader():
            while time.time() < stop:
                s, b = admin_req(admin, "POST", "/reload", {}); res[s] += 1
        def putter():
            i = 0
            while time.time() < stop:
                i += 1
                s, b = admin_req(admin, "PUT", f"/pools/app/servers/127.0.0.1:{bes[0].port}", {"weight": 7, "state": "drain" if i % 2 else "ready"})
                puts[s] += 1
        th = [threading.Thread(target=reloader), threading.Thread(target=reloader), threading.Thread(target=putter)]
        for t in th: t.start()
        for t in th: t.join()
        s, b = admin_req(admin, "PUT", f"/pools/app/servers/127.0.0.1:{bes[0].port}", {"weight": 9, "state": "ready"})
        admin_req(admin, "POST", "/reload", {})
        fin = summary(admin)
        out += [("reload statuses", dict(res)), ("put statuses", dict(puts)), ("final app pool (weight 9 set then unchanged reload)", fin["pools"]["app"]), ("gen>1", fin["gen"] > 1)]
        dist = collections.Counter(get(port)[1] for _ in range(10))
        out.append(("10 GETs", dict(dist)))
    finally:
        p.terminate(); p.wait()
    return out

if __name__ == "__main__":
    which = sys.argv[1]
    f = {"taken": taken, "weight": weight, "hup": hup, "admin": admin_race}[which]
    res = {}
    th = [threading.Thread(target=lambda k=k: res.__setitem__(k, f(BINS[k]))) for k in BINS]
    for t in th: t.start()
    for t in th: t.join()
    for (k1, o), (k2, n) in zip(res["old"], res["new"]):
        print(f"### {k1}: {'SAME' if o == n else 'DIFF'}")
        print("  old:", o); print("  new:", n)
