"""source condition, limit key and max_conns_per_source under proxy_protocol = true: the
PROXY-named client counts, IPv4-mapped and plain are one client, UNKNOWN/LOCAL fall back."""
import sys, os, socket, time, struct
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
admin_be = Backend()
port = free_port()
t = Tcpvs(f'''
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
proxy_protocol = true
max_conns_per_source = 2
[[virtual.web.rule]]
path = "^/admin"
source = ["10.0.0.0/8"]
pool = "admin"
[[virtual.web.rule]]
path = "^/admin"
respond = {{ status = 403 }}
[[virtual.web.rule]]
path = "^/lim"
pool = "www"
limit = "l"
[limit.l]
key = "source"
rate = "1/m"
burst = 2
{pool_cfg("www", be.port)}
{pool_cfg("admin", admin_be.port)}
''', wait_port=port)

def v2(src, dst="127.0.0.1"):
    import ipaddress
    a = ipaddress.ip_address(src)
    sig = b"\r\n\r\n\x00\r\nQUIT\n"
    if a.version == 4:
        body = a.packed + ipaddress.ip_address(dst).packed + struct.pack("!HH", 1234, 80)
        return sig + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body
    body = a.packed + ipaddress.ip_address("::1").packed + struct.pack("!HH", 1234, 80)
    return sig + bytes([0x21, 0x21]) + struct.pack("!H", len(body)) + body

G = lambda p: b"GET " + p + b" HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"
cases = [
    ("v1 TCP4 10.1.2.3 admin", b"PROXY TCP4 10.1.2.3 127.0.0.1 1 80\r\n" + G(b"/admin")),
    ("v1 TCP6 ::ffff:10.1.2.3 admin", b"PROXY TCP6 ::ffff:10.1.2.3 ::1 1 80\r\n" + G(b"/admin")),
    ("v2 TCP6 mapped 10.1.2.3 admin", v2("::ffff:10.1.2.3") + G(b"/admin")),
    ("v1 TCP4 11.0.0.1 admin", b"PROXY TCP4 11.0.0.1 127.0.0.1 1 80\r\n" + G(b"/admin")),
    ("v1 UNKNOWN admin", b"PROXY UNKNOWN\r\n" + G(b"/admin")),
    ("v1 TCP4 leading zeros 010.0.0.1", b"PROXY TCP4 010.0.0.1 127.0.0.1 1 80\r\n" + G(b"/admin")),
    ("v1 then second PROXY line", b"PROXY TCP4 11.0.0.1 127.0.0.1 1 80\r\nPROXY TCP4 10.0.0.1 127.0.0.1 1 80\r\n" + G(b"/admin")),
    ("no PROXY", G(b"/admin")),
]
for label, data in cases:
    out = raw(port, data, timeout=2)
    first = out.split(b'\r\n')[0]; print(f'{label}: {first!r}')
# limit by PROXY source: mapped and plain share the bucket (burst 2)
seq = [b"PROXY TCP4 192.0.2.7 127.0.0.1 1 80\r\n", b"PROXY TCP6 ::ffff:192.0.2.7 ::1 1 80\r\n", v2("::ffff:192.0.2.7"), v2("192.0.2.7")]
print("limit 192.0.2.7 plain/mapped/v2 x4 (burst 2):", [raw(port, p + G(b"/lim"), 2).split(b" ")[1] for p in seq])
# max_conns_per_source by PROXY address
held = []
for i in range(3):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"PROXY TCP4 198.51.100.1 127.0.0.1 1 80\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
    held.append((s, Reader(s).response(3)[0]))
print("3 conns named 198.51.100.1 (cap 2):", [h[1] for h in held])
s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"PROXY TCP4 198.51.100.2 127.0.0.1 1 80\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n")
print("another named client through the same director:", Reader(s).response(3)[0])
t.stop()
