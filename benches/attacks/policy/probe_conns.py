"""max_conns_per_source probes: cap, leak after 10k open/close, reload with open connections,
refused connections that linger vs max_clients. Sources 127.0.0.2.. are distinct clients."""
import sys, os, socket, time, threading
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()

def cfg(cap=3, max_clients=10000, workers=2, extra=""):
    return f'''
[switch]
workers = {workers}
max_clients = {max_clients}
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
max_conns_per_source = {cap}
{extra}
{pool_cfg("www", be.port)}
'''

def conn(src="127.0.0.2"):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    return s

def req(s):
    s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    return Reader(s).response(3)[0]

def svc(t):
    return t.stats()["services"][0]

t = Tcpvs(cfg(), wait_port=port)
held = [conn() for _ in range(3)]
print("3 held, each answers:", [req(s) for s in held])
extra = conn()
print("4th from same source:", req(extra))
print("other source meanwhile:", req(conn("127.0.0.3")))
print("stats open/source_refused:", svc(t)["open"], svc(t)["source_refused"])

# leak: 10k quick open/close from another source, some sending a request, some not,
# some reset (SO_LINGER 0), alongside the held ones
import struct
t0 = time.time()
errors = 0
for i in range(10000):
    try:
        s = conn("127.0.0.4")
        if i % 3 == 0:
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
        if i % 5 == 0:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    except OSError:
        errors += 1
print(f"10k open/close in {time.time()-t0:.1f}s, errors {errors}")
time.sleep(3)
ok = []
for k in range(3):
    s = conn("127.0.0.4"); ok.append(s)
print("127.0.0.4 after churn, 3 keep-alive conns:", [req(s) for s in ok], "4th:", req(conn("127.0.0.4")))
for s in ok: s.close()
print("stats:", {k: svc(t)[k] for k in ("open", "source_refused", "connections")})

# reload while held (127.0.0.2 holds 3): lower cap to 2, then raise to 5
for s in held: print("held still alive:", req(s), end="; ")
print()
t.rewrite(cfg(cap=2)); t.reload()
print("after reload cap 2, 127.0.0.2 new conn:", req(conn()))
for s in held: s.close()
time.sleep(0.5)
new = [conn() for _ in range(3)]
print("after closing old 3, three new under cap 2:", [req(s) for s in new])
for s in new: s.close()
# remove cap then restore with connections open: is the count kept?
keep = [conn() for _ in range(2)]
print("2 held:", [req(s) for s in keep])
t.rewrite(cfg(cap=0)); t.reload()
more = [conn() for _ in range(4)]
print("cap 0 (off), 4 more:", [req(s) for s in more])
t.rewrite(cfg(cap=2)); t.reload()
print("cap back to 2 with 6 open: new one:", req(conn()))
for s in keep + more: s.close()
time.sleep(1)
print("all closed, new one:", req(conn()), "open_from? stats:", {k: svc(t)[k] for k in ("open", "source_refused")})
t.stop()

# refused connections that linger count against max_clients?
t = Tcpvs(cfg(cap=2, max_clients=100), wait_port=port)
att = []
for i in range(300):
    try:
        s = conn("127.0.0.5")
        s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n" + b"X" * 100)  # unread bytes: linger
        att.append(s)
    except OSError:
        pass
time.sleep(0.2)
st = []
for k in range(5):
    try:
        st.append(req(conn("127.0.0.6")))
    except OSError as e:
        st.append(repr(e))
print("attacker over cap holds 300 refused conns; legit client (max_clients 100):", st, "clients:", t.stats()["clients"])
for s in att: s.close()
t.stop()
