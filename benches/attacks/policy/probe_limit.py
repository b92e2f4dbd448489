"""Rate-limit probes (single instance): burst, pipelining, key variants, dry_run, eviction,
refused requests with bodies (desync), reload. BIN=/path python3 probe_limit.py"""
import sys, os, time, socket, threading
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()

def cfg(extra_limit="", workers=2, key='key = "source"', rate="10/s", burst=5, dry="false", max_keys=1000):
    return f'''
[switch]
workers = {workers}
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
path = "^/lim"
pool = "www"
limit = "l"
[limit.l]
{key}
rate = "{rate}"
burst = {burst}
dry_run = {dry}
max_keys = {max_keys}
{extra_limit}
{pool_cfg("www", be.port)}
'''

def pipeline(reqs, timeout=5):
    """Sends all requests in one segment on one connection, reads all responses."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"".join(reqs))
    out = []
    rd = Reader(s)
    for _ in reqs:
        r = rd.response(timeout)
        if r[0] is None:
            break
        out.append(r)
    s.close()
    return out

def G(path, extra=b""):
    return b"GET " + path + b" HTTP/1.1\r\nHost: h\r\n" + extra + b"\r\n"

def statuses(rs):
    from collections import Counter
    return dict(Counter(r[0] for r in rs))

def limits(t):
    return t.stats().get("limits")

results = {}
# 1. burst on one pipelined segment, source key
t = Tcpvs(cfg(), wait_port=port)
rs = pipeline([G(b"/lim")] * 20)
print("1 pipelined 20 (burst 5, 10/s):", statuses(rs), limits(t))
refused = [r for r in rs if r[0] == 429]
if refused:
    print("  429 head:", refused[0][1])
# 2. refused request with a body that looks like a request: desync?
before = len(be.heads)
body = b"GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n"
req = b"POST /lim HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n" % len(body) + body + G(b"/after")
out = raw(port, req, timeout=2)
print("2 refused POST with body:", [l for l in out.split(b"\r\n") if l.startswith(b"HTTP/")], "server saw:", [h.split(b"\r\n")[0] for h in be.heads[before:]])
before = len(be.heads)
req = b"POST /lim HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n" + G(b"/after2")
out = raw(port, req, timeout=2)
print("2b refused chunked POST:", [l for l in out.split(b"\r\n") if l.startswith(b"HTTP/")], "server saw:", [h.split(b"\r\n")[0] for h in be.heads[before:]])
t.stop()

# 3. header key: duplicates, case, underscores, absent
t = Tcpvs(cfg(key='key = "header"\nheader = "X-Api-Key"'), wait_port=port)
k = b"X-Api-Key: real\r\n"
rs = pipeline([G(b"/lim", k)] * 8)
print("3a same key x8:", statuses(rs))
rs = pipeline([G(b"/lim", b"X-Api-Key: junk%d\r\n" % i + k) for i in range(8)])
print("3b junk first then real (backend may take last):", statuses(rs))
rs = pipeline([G(b"/lim", b"x-api-key:   real  \r\n")] * 3)
print("3c whitespace variant of exhausted key:", statuses(rs))
rs = pipeline([G(b"/lim", b"X_Api_Key: real\r\n")] * 8)
print("3d underscore name (CGI-same), no real field:", statuses(rs))
rs = pipeline([G(b"/lim")] * 8)
print("3e field absent:", statuses(rs), limits(t))
t.stop()

# 4. cookie key
t = Tcpvs(cfg(key='key = "cookie"\ncookie = "session"'), wait_port=port)
rs = pipeline([G(b"/lim", b"Cookie: session=abc\r\n")] * 8)
print("4a cookie x8:", statuses(rs))
rs = pipeline([G(b"/lim", b"Cookie: session=j%d; session=abc\r\n" % i) for i in range(8)])
print("4b session=junk; session=abc:", statuses(rs))
rs = pipeline([G(b"/lim", b"Cookie: other=1\r\nCookie: session=abc\r\n")] * 8)
print("4c second Cookie field holds session (h2 crumbs style):", statuses(rs))
rs = pipeline([G(b"/lim", b'Cookie: session="abc"\r\n')] * 8)
print("4d quoted value:", statuses(rs))
t.stop()

# 5. dry_run counts
t = Tcpvs(cfg(dry="true"), wait_port=port)
rs = pipeline([G(b"/lim")] * 20)
print("5 dry_run 20:", statuses(rs), limits(t))
logl = [l for l in t.log().split(b"\n") if b"limit=" in l]
print("  access log lines with limit=:", len(logl), logl[:1])
t.stop()

# 6. eviction gives no burst back
t = Tcpvs(cfg(key='key = "header"\nheader = "K"', max_keys=10, rate="1/m"), wait_port=port)
rs = pipeline([G(b"/lim", b"K: victim\r\n")] * 6)
print("6a victim drained:", statuses(rs))
rs = pipeline([G(b"/lim", b"K: filler%d\r\n" % i) for i in range(50)])
rs = pipeline([G(b"/lim", b"K: victim\r\n")] * 6)
print("6b victim after 50 fillers (max_keys 10):", statuses(rs), limits(t))
t.stop()

# 7. reload: same spec keeps, changed burst resets
t = Tcpvs(cfg(rate="1/m"), wait_port=port)
print("7a drain:", statuses(pipeline([G(b"/lim")] * 6)))
t.rewrite(cfg(rate="1/m") + "\n# touched\n"); t.reload()
print("7b after no-op reload:", statuses(pipeline([G(b"/lim")] * 6)))
t.rewrite(cfg(rate="1/m", burst=6)); t.reload()
print("7c after burst 5->6 reload (operator raised burst by 1):", statuses(pipeline([G(b"/lim")] * 8)), limits(t))
t.stop()
