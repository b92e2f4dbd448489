"""response_headers (remove Server/Set-Cookie, set HSTS) on 1xx, 204, 304, HEAD, chunked with
trailers, HTTP/1.0 server; prints what the client got."""
import sys, os, socket, time
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

def respond(head):
    p = head.split(b" ")[1]
    S = b"Server: be\r\nSet-Cookie: s=1\r\nset-cookie: t=2\r\nSERVER: be2\r\n"
    if p == b"/1xx":
        return (b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n" + S + b"\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + S + b"\r\nok")
    if p == b"/204":
        return b"HTTP/1.1 204 No Content\r\n" + S + b"\r\n"
    if p == b"/304":
        return b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n" + S + b"\r\n"
    if p == b"/chunked":
        return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Set-Cookie\r\n" + S +
                b"\r\n2\r\nok\r\n0\r\nSet-Cookie: trailer=1\r\nServer: trailer\r\n\r\n")
    return b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + S + b"\r\nok"

be = Backend(respond)
port = free_port()
t = Tcpvs(f'''
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
pool = "www"
response_headers = {{ remove = ["Server", "Set-Cookie"], set = {{ "Strict-Transport-Security" = "max-age=1" }} }}
{pool_cfg("www", be.port)}
''', wait_port=port)
for method, path, ver in [(b"GET", b"/1xx", b"1.1"), (b"GET", b"/204", b"1.1"), (b"GET", b"/304", b"1.1"),
                          (b"HEAD", b"/x", b"1.1"), (b"GET", b"/chunked", b"1.1"), (b"GET", b"/chunked", b"1.0")]:
    out = raw(port, method + b" " + path + b" HTTP/" + ver + b"\r\nHost: h\r\nConnection: close\r\nTE: trailers\r\n\r\n", timeout=2)
    bad = [l for l in out.split(b"\r\n") if l.lower().startswith((b"server", b"set-cookie"))]
    print(f"{method.decode()} {path.decode()} HTTP/{ver.decode()}: leaked {bad}  | {out[:400]!r}")
t.stop()
