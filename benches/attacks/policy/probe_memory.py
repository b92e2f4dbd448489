"""RSS with 100k distinct long keys and max_keys = 100000 (key = path and key = header),
then 100k more (eviction). The pool points at a closed port so requests end quickly (502)."""
import sys, os, socket, time, threading
sys.path.insert(0, os.path.dirname(__file__))
from lib26 import *

port = free_port()
dead = free_port()
KEYLEN = int(os.environ.get("KEYLEN", "8000"))
N = int(os.environ.get("N", "100000"))
t = Tcpvs(f'''
[switch]
workers = 2
[virtual.web]
listen = "127.0.0.1:{port}"
default_pool = "www"
[[virtual.web.rule]]
path = "^/p"
pool = "www"
limit = "bypath"
[[virtual.web.rule]]
path = "^/h"
pool = "www"
limit = "byheader"
[limit.bypath]
key = "path"
rate = "1/h"
burst = 1
max_keys = 100000
[limit.byheader]
key = "header"
header = "X-K"
rate = "1/h"
burst = 1
max_keys = 100000
[pool.www]
servers = [{{ addr = "127.0.0.1:{dead}" }}]
''', wait_port=port)

def blast(make, start, n, conns=4):
    def worker(k):
        s = socket.create_connection(("127.0.0.1", port))
        rd = Reader(s)
        batch = 200
        i = start + k
        sent = 0
        while sent < n // conns:
            reqs = []
            for _ in range(min(batch, n // conns - sent)):
                reqs.append(make(i)); i += conns; sent += 1
            s.sendall(b"".join(reqs))
            for _ in reqs:
                st = rd.response(30)[0]
                if st is None:
                    s.close(); s = socket.create_connection(("127.0.0.1", port)); rd = Reader(s)
                    break
        s.close()
    th = [threading.Thread(target=worker, args=(k,)) for k in range(conns)]
    [x.start() for x in th]; [x.join() for x in th]

pad = b"a" * KEYLEN
rss0 = t.rss_kib()
t0 = time.time()
blast(lambda i: b"GET /p/%d/" % i + pad + b" HTTP/1.1\r\nHost: h\r\n\r\n", 0, N)
print(f"{N} paths of {KEYLEN} B in {time.time()-t0:.0f}s: RSS {rss0} -> {t.rss_kib()} KiB; limits {t.stats()['limits']['bypath']}")
blast(lambda i: b"GET /p/%d/" % i + pad + b" HTTP/1.1\r\nHost: h\r\n\r\n", N, N)
print(f"another {N} (eviction): RSS {t.rss_kib()} KiB; limits {t.stats()['limits']['bypath']}")
k64 = b"k" * 56
blast(lambda i: b"GET /h HTTP/1.1\r\nHost: h\r\nX-K: %08d" % i + k64 + b"\r\n\r\n", 0, N)
print(f"{N} header keys of 64 B (held as they are): RSS {t.rss_kib()} KiB; limits {t.stats()['limits']['byheader']}")
t.stop()
