"""Key normalisation: key = "host" with case, port, trailing dot; key = "path" with // and
/./ and %-encoding; each variant reaches the same site or resource but gets a bucket of its own."""
import sys, os, socket
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()
t = Tcpvs(f'''
[virtual.web]
listen = "127.0.0.1:{port}"
[[virtual.web.rule]]
host = '^shop\\.example$'
path = "^/api/"
pool = "www"
limit = "perpath"
[[virtual.web.rule]]
host = '^shop\\.example$'
pool = "www"
limit = "perhost"
[limit.perhost]
key = "host"
rate = "1/m"
burst = 2
[limit.perpath]
key = "path"
rate = "1/m"
burst = 2
{pool_cfg("www", be.port)}
''', wait_port=port)
def st(req):
    r = one(port, req)
    return r[0]
H = lambda host, path=b"/": b"GET " + path + b" HTTP/1.1\r\nHost: " + host + b"\r\nConnection: close\r\n\r\n"
print("host key, 3 x shop.example:", [st(H(b"shop.example")) for _ in range(3)])
for v in [b"SHOP.example", b"Shop.Example", b"shop.example:80", b"shop.example:0080", b"shop.example."]:
    print(f"  variant {v.decode()!r} x2:", [st(H(v)) for _ in range(2)])
print("absolute-form target, Host header varied:", [st(b"GET http://shop.example/ HTTP/1.1\r\nHost: v%d.other\r\nConnection: close\r\n\r\n" % i) for i in range(3)])
print("path key, 3 x /api/login:", [st(H(b"shop.example", b"/api/login")) for _ in range(3)])
for v in [b"/api//login", b"/api/./login", b"/api/%6cogin", b"/api/login/", b"/api/x/../login", b"/api/LOGIN"]:
    print(f"  variant {v.decode()!r} x2:", [st(H(b"shop.example", v)) for _ in range(2)])
print(t.stats()["limits"])
t.stop()
