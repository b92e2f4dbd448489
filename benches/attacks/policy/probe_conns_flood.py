"""One source over its max_conns_per_source keeps every max_clients slot busy by re-opening
refused connections (each lingers ~2 s): a second client is refused for as long as it goes on."""
import sys, os, socket, time
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

be = Backend()
port = free_port()
t = Tcpvs(f'''
[switch]
workers = 2
max_clients = 100
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
max_conns_per_source = 2
{pool_cfg("www", be.port)}
''', wait_port=port)

def conn(src):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(3); s.connect(("127.0.0.1", port)); return s

att = []
legit = []
end = time.time() + 8
next_probe = time.time() + 1
while time.time() < end:
    for _ in range(50):
        try:
            s = conn("127.0.0.5")
            s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\n\r\nXXXX")  # never reads
            att.append(s)
        except OSError:
            pass
    # the attacker closes what is older than 3 s: it holds at most ~ rate x 3 s sockets itself
    if len(att) > 400:
        for s in att[:50]:
            s.close()
        att = att[50:]
    if time.time() >= next_probe:
        next_probe += 1
        try:
            s = conn("127.0.0.6"); s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
            legit.append(Reader(s).response(3)[0]); s.close()
        except OSError as e:
            legit.append(type(e).__name__)
    time.sleep(0.1)
print("legit client (another address) once a second while 127.0.0.5 floods over its cap of 2:", legit)
print("source_refused:", t.stats()["services"][0]["source_refused"], "refused(max_clients):", t.stats()["services"][0]["refused"])
for s in att: s.close()
t.stop()
