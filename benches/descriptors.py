#!/usr/bin/env python3
"""Client of benches/descriptors.sh: N clients connect at once, each sends one request and keeps
its connection open until every client has been answered or has failed.

Usage: descriptors.py HOST PORT N TIMEOUT_S [PATH]
A client is "answered" when it reads a whole 200 response (head, then Content-Length bytes) within
TIMEOUT_S of the start; anything else is an error, by kind: a status other than 200, refused,
reset, closed before a whole response, timeout. Raises its own RLIMIT_NOFILE. Prints
"answered A of N", then one "error KIND COUNT" line per kind and "wall_s S".
"""
import asyncio, collections, resource, sys, time

host, port, n, timeout = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
path = sys.argv[5] if len(sys.argv) > 5 else "/small.html"
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
want = n + 64
if soft != resource.RLIM_INFINITY and soft < want:
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"RLIMIT_NOFILE hard limit {hard} < {want}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: descriptors.py\r\n\r\n".encode()
outcomes = collections.Counter()


async def one(all_done: asyncio.Event, deadline: float, left: list):
    writer = None
    try:
        async with asyncio.timeout_at(deadline):
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(request)
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split()[1])
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            await reader.readexactly(length)
            outcomes["answered" if status == 200 else f"status_{status}"] += 1
    except TimeoutError:
        outcomes["timeout"] += 1
    except ConnectionRefusedError:
        outcomes["refused"] += 1
    except ConnectionResetError:
        outcomes["reset"] += 1
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        outcomes["closed_early"] += 1
    except (OSError, ValueError, IndexError) as e:
        outcomes[type(e).__name__] += 1
    left[0] -= 1
    if left[0] == 0:
        all_done.set()
    # hold the connection (answered or not) until every client has its outcome
    try:
        await asyncio.wait_for(all_done.wait(), max(0.1, deadline + 1 - asyncio.get_running_loop().time()))
    except TimeoutError:
        pass
    if writer is not None:
        writer.close()


async def main():
    loop = asyncio.get_running_loop()
    all_done, left = asyncio.Event(), [n]
    start = time.monotonic()
    deadline = loop.time() + timeout
    await asyncio.gather(*(one(all_done, deadline, left) for _ in range(n)))
    print(f"answered {outcomes.pop('answered', 0)} of {n}")
    for kind, count in sorted(outcomes.items()):
        print(f"error {kind} {count}")
    print(f"wall_s {time.monotonic() - start:.2f}")


asyncio.run(main())
