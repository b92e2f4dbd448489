#!/usr/bin/env python3
"""Emulated cache-limited web servers on loopback (the attacker's own, for the LARD flood
attack). Each server: an LRU cache of --cache objects, one emulated CPU (FIFO, --hit-ms per
request) and one disk arm (FIFO, --miss-ms per miss, before the CPU). Virtual costs: sleeps,
not real CPU. Paths under /x are answered at once (cheap: a 404-like or tiny cached answer).
A request with header `X-Hold: MS` is held MS ms without CPU (a slow request).
Costs are scaled by --warm-scale until T0 + --warm-s (warm-up). Stats are kept between
T0 + --from-s and T0 + --to-s and written as JSON to --out at --to-s.
"""
import argparse, asyncio, collections, json, sys, time


class Server:
    def __init__(self, idx, cache):
        self.idx = idx
        self.cache = collections.OrderedDict()
        self.cap = cache
        self.cpu_free = 0.0
        self.disk_free = 0.0
        self.active = 0
        self.max_active = 0
        self.area = 0.0  # integral of active over measured time
        self.last_t = None
        self.req = collections.Counter()  # class -> requests (measured)
        self.hits = 0
        self.misses = 0

    def track(self, now, delta):
        if self.last_t is not None:
            a, b = max(self.last_t, A.t_from), min(now, A.t_to)
            if b > a:
                self.area += self.active * (b - a)
        self.last_t = now
        self.active += delta
        if A.t_from <= now < A.t_to:
            self.max_active = max(self.max_active, self.active)


def main():
    global A
    p = argparse.ArgumentParser()
    p.add_argument("--base-port", type=int, default=19101)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--cache", type=int, default=300)
    p.add_argument("--hit-ms", type=float, default=4.0)
    p.add_argument("--miss-ms", type=float, default=40.0)
    p.add_argument("--t0", type=float, required=True)
    p.add_argument("--warm-s", type=float, default=6.0)
    p.add_argument("--warm-scale", type=float, default=0.1)
    p.add_argument("--from-s", type=float, required=True)
    p.add_argument("--to-s", type=float, required=True)
    p.add_argument("--out", required=True)
    A = p.parse_args()
    A.t_from = A.t0 + A.from_s
    A.t_to = A.t0 + A.to_s
    servers = [Server(i, A.cache) for i in range(A.n)]
    body = b"x" * 64

    async def handle(srv, reader, writer):
        loop = asyncio.get_running_loop()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                line_end = head.index(b"\r\n")
                parts = head[:line_end].split(b" ")
                path = parts[1] if len(parts) > 1 else b"/"
                q = path.find(b"?")
                if q >= 0:
                    path = path[:q]
                hl = head.lower()
                hold = 0.0
                i = hl.find(b"\r\nx-hold:")
                if i >= 0:
                    hold = float(hl[i + 9:hl.index(b"\r\n", i + 2)].strip()) / 1000.0
                cls = b"h"
                i = hl.find(b"\r\nx-class:")
                if i >= 0:
                    cls = hl[i + 10:hl.index(b"\r\n", i + 2)].strip()
                cl = hl.find(b"\r\ncontent-length:")
                if cl >= 0:
                    n = int(hl[cl + 17:hl.index(b"\r\n", cl + 2)].strip())
                    if n:
                        await reader.readexactly(n)
                now = time.time()
                measuring = A.t_from <= now < A.t_to
                srv.track(now, +1)
                scale = A.warm_scale if now < A.t0 + A.warm_s else 1.0
                state = b"none"
                if hold > 0:
                    await asyncio.sleep(hold)
                elif path.startswith(b"/x"):
                    pass
                else:
                    t = now
                    if path in srv.cache:
                        srv.cache.move_to_end(path)
                        state = b"hit"
                    else:
                        state = b"miss"
                        start = max(t, srv.disk_free)
                        srv.disk_free = start + A.miss_ms / 1000.0 * scale
                        t = srv.disk_free
                        srv.cache[path] = True
                        while len(srv.cache) > srv.cap:
                            srv.cache.popitem(last=False)
                    start = max(t, srv.cpu_free)
                    srv.cpu_free = start + A.hit_ms / 1000.0 * scale
                    d = srv.cpu_free - time.time()
                    if d > 0:
                        await asyncio.sleep(d)
                end = time.time()
                srv.track(end, -1)
                if measuring:
                    srv.req[cls.decode()] += 1
                    if state == b"hit":
                        srv.hits += 1
                    elif state == b"miss":
                        srv.misses += 1
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 64\r\nX-Served-By: %d\r\nX-Cache: %s\r\n\r\n"
                             % (srv.idx, state) + body)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()

    async def run():
        for s in servers:
            await asyncio.start_server(lambda r, w, s=s: handle(s, r, w), "127.0.0.1",
                                       A.base_port + s.idx, backlog=1024)
        await asyncio.sleep(max(0.0, A.t_to - time.time()) + 0.2)
        # Copies of each cached catalogue object across the caches.
        holders = collections.Counter()
        for s in servers:
            for k in s.cache:
                holders[k] += 1
        span = A.t_to - A.t_from
        out = {
            "servers": [
                {"idx": s.idx, "req": dict(s.req), "hits": s.hits, "misses": s.misses,
                 "mean_active": round(s.area / span, 2), "max_active": s.max_active,
                 "cached": len(s.cache)} for s in servers],
            "copies_per_object": round(sum(holders.values()) / max(1, len(holders)), 3),
            "distinct_cached": len(holders),
        }
        with open(A.out, "w") as f:
            json.dump(out, f)
        await asyncio.sleep(30)  # the driver kills us

    asyncio.run(run())


if __name__ == "__main__":
    main()
