"""HTTP/2 (prior knowledge) probes with nghttp/h2load: limits over streams, cookie crumbs,
header actions on h2 responses."""
import sys, os, subprocess, re
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend(lambda h: b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: be\r\nX-Powered-By: php\r\nSet-Cookie: s=1\r\n\r\nok")
port = free_port()
cfg = f'''
[switch]
workers = 2
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
path = "^/src"
pool = "www"
limit = "bysource"
[[virtual.web.rule]]
path = "^/ck"
pool = "www"
limit = "bycookie"
response_headers = {{ remove = ["Server", "Set-Cookie"], set = {{ "X-Powered-By" = "tcpvs" }} }}
request_headers = {{ remove = ["Cookie"], set = {{ "X-User" = "anon" }} }}
[limit.bysource]
key = "source"
rate = "10/s"
burst = 5
[limit.bycookie]
key = "cookie"
cookie = "session"
rate = "1/m"
burst = 2
{pool_cfg("www", be.port)}
'''
t = Tcpvs(cfg, wait_port=port)
out = subprocess.run(["h2load", "-n", "40", "-c", "1", "-m", "40", f"http://127.0.0.1:{port}/src"], capture_output=True, text=True, timeout=30).stdout
print("h2load 40 streams one conn, burst 5:", [l for l in out.split("\n") if "status codes" in l])
out = subprocess.run(["h2load", "-n", "40", "-c", "4", "-m", "10", f"http://127.0.0.1:{port}/src"], capture_output=True, text=True, timeout=30).stdout
print("h2load 40 streams 4 conns (bucket should be dry):", [l for l in out.split("\n") if "status codes" in l])

def nghttp(path, headers):
    args = ["nghttp", "-v", "-n"]
    for h in headers:
        args += ["-H", h]
    r = subprocess.run(args + [f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=10)
    return r.stdout

for i in range(4):
    o = nghttp("/ck", ["cookie: session=abc"])
    print(f"h2 single cookie #{i}:", re.findall(r":status: (\d+)", o))
for i in range(4):
    o = nghttp("/ck", ["cookie: a=1", "cookie: session=xyz"])
    print(f"h2 crumbs (session in 2nd field) #{i}:", re.findall(r":status: (\d+)", o))
before = len(be.heads)
o = nghttp("/ck", ["cookie: a=1", "cookie: session=new2", "x-user: admin"])
print("h2 response fields:", [l.strip() for l in o.split("\n") if "recv (stream_id=13)" in l or re.search(r"(server|set-cookie|x-powered-by):", l)])
print("h2 upstream head:", be.heads[before:])
print(t.stats()["limits"])
t.stop()
