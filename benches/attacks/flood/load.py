#!/usr/bin/env python3
"""Clients for the LARD flood attack, all closed-loop HTTP/1.1 keep-alive on loopback.

  load.py honest   --port P --clients N --objects K --zipf S --t0 T --from-s A --to-s B --out F
  load.py flood    --port P --spec PATH:RATE[,PATH:RATE...] --conns C --t0 T --start-s A --to-s B --out F
  load.py slow     --port P --paths-file F --conns C --hold MS --t0 T --start-s A --to-s B --out F
  load.py discover --port P --paths a,b,c        (one request each, in an idle pool: ring server)

Every loop ends at T0 + --to-s.
"""
import argparse, asyncio, bisect, json, random, sys, time


async def connect(port):
    for _ in range(50):
        try:
            return await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
    raise SystemExit("cannot connect")


async def get(reader, writer, path, extra=b""):
    writer.write(b"GET %s HTTP/1.1\r\nHost: t\r\n%s\r\n" % (path, extra))
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    hl = head.lower()
    n = 0
    i = hl.find(b"\r\ncontent-length:")
    if i >= 0:
        n = int(hl[i + 17:hl.index(b"\r\n", i + 2)])
    if n:
        await reader.readexactly(n)
    server = -1
    i = hl.find(b"\r\nx-served-by:")
    if i >= 0:
        server = int(hl[i + 14:hl.index(b"\r\n", i + 2)])
    cache = b""
    i = hl.find(b"\r\nx-cache:")
    if i >= 0:
        cache = hl[i + 10:hl.index(b"\r\n", i + 2)].strip()
    return status, server, cache


class Conn:
    """A keep-alive client connection that is opened again after a failed exchange."""

    def __init__(self, port):
        self.port = port
        self.reader = self.writer = None

    async def open(self):
        self.reader, self.writer = await connect(self.port)
        return self

    async def get(self, path, extra):
        """`get`'s (status, server, cache), or None when the exchange failed (reconnected)."""
        try:
            return await get(self.reader, self.writer, path, extra)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.writer.close()
            await self.open()
            return None

    def close(self):
        self.writer.close()


def pct(sorted_list, q):
    if not sorted_list:
        return None
    return sorted_list[min(len(sorted_list) - 1, int(q * len(sorted_list)))]


async def honest(a):
    weights = [1.0 / (k + 1) ** a.zipf for k in range(a.objects)]
    cum, s = [], 0.0
    for w in weights:
        s += w
        cum.append(s)
    t_from, t_to = a.t0 + a.from_s, a.t0 + a.to_s
    lat, servers, hits, misses, errors = [], {}, 0, 0, 0
    ranks = [0] * 10
    status_bad = 0

    async def client(i):
        nonlocal hits, misses, errors, status_bad
        rng = random.Random(a.seed * 1000 + i)
        conn = await Conn(a.port).open()
        while True:
            now = time.time()
            if now >= t_to:
                break
            rank = bisect.bisect_left(cum, rng.random() * s)
            obj = (rank + a.shift) % a.objects if a.shift and now >= a.t0 + a.shift_at else rank
            path = b"/o%d" % obj
            t1 = time.time()
            answer = await conn.get(path, b"X-Class: h\r\n")
            if answer is None:
                errors += 1
                continue
            st, srv, cache = answer
            t2 = time.time()
            if t_from <= t1 and t2 < t_to:
                lat.append((t2 - t1) * 1000)
                servers[srv] = servers.get(srv, 0) + 1
                if st >= 500:
                    status_bad += 1
                if cache == b"hit":
                    hits += 1
                elif cache == b"miss":
                    misses += 1
                if rank < 10:
                    ranks[rank] += 1
        conn.close()

    await asyncio.gather(*(client(i) for i in range(a.clients)))
    span = a.to_s - a.from_s
    lat.sort()
    counts = [servers.get(i, 0) for i in range(a.n)]
    mean = sum(counts) / a.n
    out = {
        "requests": len(lat), "rps": round(len(lat) / span, 1),
        "p50_ms": round(pct(lat, 0.5), 2) if lat else None,
        "p99_ms": round(pct(lat, 0.99), 2) if lat else None,
        "mean_ms": round(sum(lat) / len(lat), 2) if lat else None,
        "hit_ratio": round(hits / max(1, hits + misses), 4),
        "per_server": counts, "max_over_mean": round(max(counts) / mean, 3) if mean else None,
        "top_rank_rps": [round(r / span, 1) for r in ranks],
        "errors": errors, "status_5xx": status_bad, "unknown_server": servers.get(-1, 0),
    }
    json.dump(out, open(a.out, "w"))


async def flood(a):
    start, t_to = a.t0 + a.start_s, a.t0 + a.to_s
    t_from = a.t0 + a.from_s
    specs = []
    for part in a.spec.split(","):
        path, rate = part.rsplit(":", 1)
        specs.append((path.encode(), float(rate)))
    done = {p.decode(): 0 for p, _ in specs}
    servers = {}
    errors = 0

    async def conn(path, rate):
        nonlocal errors
        conn = await Conn(a.port).open()
        interval = a.conns / rate
        await asyncio.sleep(max(0.0, start - time.time()) + random.random() * interval)
        nxt = time.time()
        while True:
            now = time.time()
            if now >= t_to:
                break
            if nxt > now:
                await asyncio.sleep(nxt - now)
            nxt += interval
            if nxt < time.time() - 1.0:  # behind by more than a second: do not burst
                nxt = time.time()
            answer = await conn.get(path, b"X-Class: a\r\n")
            if answer is None:
                errors += 1
                continue
            srv = answer[1]
            t = time.time()
            if t_from <= t < t_to:
                done[path.decode()] += 1
                servers[srv] = servers.get(srv, 0) + 1
        conn.close()

    await asyncio.gather(*(conn(p, r) for p, r in specs for _ in range(a.conns)))
    span = a.to_s - a.from_s
    json.dump({"rps": {k: round(v / span, 1) for k, v in done.items()},
               "servers": servers, "errors": errors}, open(a.out, "w"))


async def slow(a):
    start, t_to = a.t0 + a.start_s, a.t0 + a.to_s
    paths = [l.strip().encode() for l in open(a.paths_file) if l.strip()]
    it = iter(range(10**9))
    servers = {}
    sent = 0
    hold = b"X-Class: s\r\nX-Hold: %d\r\n" % a.hold

    async def conn(i):
        nonlocal sent
        conn = await Conn(a.port).open()
        await asyncio.sleep(max(0.0, start - time.time()) + i * 0.01)
        while time.time() < t_to - a.hold / 1000.0:
            k = next(it)
            path = paths[k % len(paths)]
            answer = await conn.get(path, hold)
            if answer is None:
                continue
            sent += 1
            srv = answer[1]
            servers[srv] = servers.get(srv, 0) + 1
        conn.close()

    await asyncio.gather(*(conn(i) for i in range(a.conns)))
    json.dump({"sent": sent, "servers": servers}, open(a.out, "w"))


async def discover(a):
    reader, writer = await connect(a.port)
    out = {}
    for p in a.paths.split(","):
        _, srv, _ = await get(reader, writer, p.encode(), b"X-Class: d\r\n")
        out[p] = srv
    writer.close()
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["honest", "flood", "slow", "discover"])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--zipf", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--t0", type=float)
    p.add_argument("--from-s", type=float, default=0)
    p.add_argument("--start-s", type=float, default=0)
    p.add_argument("--to-s", type=float)
    p.add_argument("--out")
    p.add_argument("--spec")
    p.add_argument("--conns", type=int, default=8)
    p.add_argument("--paths-file")
    p.add_argument("--hold", type=int, default=2000)
    p.add_argument("--paths")
    p.add_argument("--shift", type=int, default=0)
    p.add_argument("--shift-at", type=float, default=0)
    a = p.parse_args()
    asyncio.run({"honest": honest, "flood": flood, "slow": slow, "discover": discover}[a.mode](a))


if __name__ == "__main__":
    main()
