#!/usr/bin/env python3
"""An agent for HAProxy's agent-check protocol, as tcpvs (`agent_port`) and HAProxy read it.

Run it on each web server: it listens on a port, and every connection gets one line saying how
the server is doing, then the connection closes. It reports `drain` when the CPU has been busier
than HIGH (85%) and `ready` again only once it falls below LOW (50%): the gap (hysteresis) keeps
a server near one threshold from flapping between the two states.

    tools/cpu-agent.py --port 9777 [--high 85] [--low 50] [--listen 0.0.0.0]

and in the rule file: `[pool.NAME.health]` `agent_port = 9777`.
"""

import argparse
import socketserver
import threading
import time


def cpu_times():
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    with open("/proc/stat") as stat:
        fields = [int(x) for x in stat.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


class Load:
    """CPU use over the last second, and the drain state with hysteresis."""

    def __init__(self, high, low):
        self.high, self.low = high, low
        self.percent = 0.0
        self.draining = False
        self.lock = threading.Lock()

    def sample_forever(self, period=1.0):
        busy, total = cpu_times()
        while True:
            time.sleep(period)
            busy2, total2 = cpu_times()
            percent = 100.0 * (busy2 - busy) / max(1, total2 - total)
            busy, total = busy2, total2
            with self.lock:
                self.percent = percent
                if percent > self.high:
                    self.draining = True
                elif percent < self.low:
                    self.draining = False

    def reply(self):
        with self.lock:
            return "drain\n" if self.draining else "ready up\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--listen", default="0.0.0.0")
    parser.add_argument("--high", type=float, default=85.0)
    parser.add_argument("--low", type=float, default=50.0)
    args = parser.parse_args()
    if not 0 <= args.low < args.high <= 100:
        parser.error("need 0 <= --low < --high <= 100")
    load = Load(args.high, args.low)
    threading.Thread(target=load.sample_forever, daemon=True).start()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self):
            self.request.sendall(load.reply().encode())

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    with socketserver.ThreadingTCPServer((args.listen, args.port), Handler) as server:
        server.serve_forever()


if __name__ == "__main__":
    main()
