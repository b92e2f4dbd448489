"""Redirect/rewrite/header-action/source probes: prints what the client and the server got."""
import sys, time
sys.path.insert(0, __import__("os").path.dirname(__file__))
from lib26 import *

be = Backend()
admin_be = Backend()
port = free_port()
cfg = f'''
[switch]
workers = 1
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"

[[virtual.web.rule]]
path = "^/r/(.*)$"
redirect = {{ path = "/new/$1", code = 308 }}

[[virtual.web.rule]]
path = "^/https"
redirect = {{ scheme = "https", code = 301 }}

[[virtual.web.rule]]
path = "^/admin"
source = ["10.0.0.0/8"]
pool = "admin"

[[virtual.web.rule]]
path = "^/admin"
respond = {{ status = 403, body = "forbidden\\n", content_type = "text/plain" }}

[[virtual.web.rule]]
path = "^/static(/|$)"
strip_prefix = "/static"
pool = "www"
request_headers = {{ remove = ["Cookie"], set = {{ "X-Pool" = "static" }} }}
response_headers = {{ set = {{ "Strict-Transport-Security" = "max-age=1" }}, remove = ["Server"] }}

[[virtual.web.rule]]
path = "^/img/(.*)$"
path_rewrite = "/i/$1"
pool = "www"
request_headers = {{ set = {{ "X-User" = "anon" }} }}
response_headers = {{ remove = ["Server"], set = {{ "X-Frame-Options" = "DENY" }} }}

{pool_cfg("www", be.port)}
{pool_cfg("admin", admin_be.port)}
'''
t = Tcpvs(cfg, wait_port=port)

def show(label, req):
    before = len(be.heads)
    r = raw(port, req, timeout=2)
    first = r.split(b"\r\n\r\n")[0]
    got = be.heads[before:] if len(be.heads) > before else []
    print(f"--- {label}\n  client<- {first[:300]!r}")
    for h in got:
        print(f"  server<- {h[:400]!r}")

C = b"Connection: close\r\n"
show("redirect capture CRLF-encoded", b"GET /r/a%0d%0aSet-Cookie:x=1 HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("redirect capture //evil", b"GET /r//evil.com HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("redirect path-only to //evil via host none", b"GET /r/x HTTP/1.0\r\n\r\n")
show("redirect Host header evil", b"GET /https/x HTTP/1.1\r\nHost: evil.com\r\n" + C + b"\r\n")
show("redirect Host with userinfo", b"GET /https/x HTTP/1.1\r\nHost: a@evil.com\r\n" + C + b"\r\n")
show("redirect Host with path chars", b"GET /https/x HTTP/1.1\r\nHost: evil.com/x?\r\n" + C + b"\r\n")
show("redirect Host with backslash", b"GET /https/x HTTP/1.1\r\nHost: evil.com\\.good.com\r\n" + C + b"\r\n")
show("redirect absolute-form authority", b"GET http://evil.com/https/x HTTP/1.1\r\nHost: good\r\n" + C + b"\r\n")
show("redirect raw high bytes in path", b"GET /r/\xff\xfe HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("redirect capture with ?", b"GET /r/a?b=1 HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("redirect path with # ", b"GET /r/a#frag HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("redirect Host empty", b"GET /https/x HTTP/1.1\r\nHost:\r\n" + C + b"\r\n")
show("redirect Host ipv6 bracket junk", b"GET /https/x HTTP/1.1\r\nHost: [::1]evil\r\n" + C + b"\r\n")
show("redirect Host with space?", b"GET /https/x HTTP/1.1\r\nHost: a b\r\n" + C + b"\r\n")
show("admin plain", b"GET /admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin XFF spoof", b"GET /admin HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.0.0.1\r\n" + C + b"\r\n")
show("admin PROXY spoof (proxy off)", b"PROXY TCP4 10.0.0.1 127.0.0.1 1 2\r\nGET /admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin %61", b"GET /%61dmin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin //", b"GET //admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin /./", b"GET /./admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin /x/../", b"GET /x/../admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin case", b"GET /ADMIN HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin absolute-form", b"GET http://h/admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("admin absolute-form no slash path", b"GET http://h HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("static ../admin", b"GET /static/../admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("static%2f..", b"GET /static%2f..%2fadmin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("staticX", b"GET /staticX HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("static//admin", b"GET /static//admin HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("static query", b"GET /static?x=/../y HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("static cookie dup/case", b"GET /static/a HTTP/1.1\r\nHost: h\r\ncookie: a=1\r\nCOOKIE: b=2\r\nCookie2: c\r\nX-Pool: evil\r\nx-pool: evil2\r\nX_Pool: evil3\r\n" + C + b"\r\n")
show("static obs-fold X-Pool", b"GET /static/a HTTP/1.1\r\nHost: h\r\nX-Other: a\r\n X-Pool: evil\r\n" + C + b"\r\n")
show("static X-Pool with space before colon", b"GET /static/a HTTP/1.1\r\nHost: h\r\nX-Pool : evil\r\n" + C + b"\r\n")
show("img rewrite CRLF raw?", b"GET /img/a%0d%0aX:1 HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("img rewrite absolute-form", b"GET http://h/img/x?q=1 HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("img rewrite X_User underscore", b"GET /img/a HTTP/1.1\r\nHost: h\r\nX_User: admin\r\nX-User: admin\r\n" + C + b"\r\n")
show("img rewrite path with ' ' via tab?", b"GET /img/a\tb HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("img rewrite high bytes", b"GET /img/\x80\xff HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
show("img rewrite OPTIONS *", b"OPTIONS * HTTP/1.1\r\nHost: h\r\n" + C + b"\r\n")
t.stop()
