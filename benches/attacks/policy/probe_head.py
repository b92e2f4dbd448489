"""HEAD to the switch's own answers (respond with a body, redirect, 429): no body may follow
the head, or a keep-alive client reads it as the next response."""
import sys, os, socket
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()
t = Tcpvs(f'''
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
path = "^/resp"
respond = {{ status = 200, body = "HTTP/1.1 200 OK\\r\\nX-Injected: 1\\r\\nContent-Length: 0\\r\\n\\r\\n", content_type = "text/plain" }}
[[virtual.web.rule]]
path = "^/redir"
redirect = {{ path = "/x", code = 302 }}
[[virtual.web.rule]]
path = "^/lim"
pool = "www"
limit = "l"
[limit.l]
key = "source"
rate = "1/m"
burst = 1
{pool_cfg("www", be.port)}
''', wait_port=port)
one(port, b"GET /lim HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
for p in (b"/resp", b"/redir", b"/lim"):
    out = raw(port, b"HEAD " + p + b" HTTP/1.1\r\nHost: h\r\n\r\nGET /plain HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n", timeout=2)
    parts = out.split(b"\r\n\r\n")
    print(f"HEAD {p.decode()} then GET: {out[:600]!r}")
t.stop()
