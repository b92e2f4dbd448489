#!/usr/bin/env python3
"""One scenario of the LARD flood attack: 4 emulated backends, tcpvs (lard) in front, honest
closed-loop Zipf clients, and an attacker. Appends one JSON line to --results.

  run.py --bin TCPVS --label L --scenario none|other:M|same:M|all:M:K|slowsame:C:HOLD|
         slowspread:C:HOLD|modflood:RATE [--clients N] [--spill off] [--hottest RPS]
"""
import argparse, json, os, signal, socket, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
PY = sys.executable
BASE = 19101
LISTEN = 19180
ADMIN = 19190


def wait_port(port, t=10.0):
    end = time.time() + t
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--label", required=True)
    p.add_argument("--scenario", default="none")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--objects", type=int, default=1000)
    p.add_argument("--cache", type=int, default=300)
    p.add_argument("--spill", default=None)
    p.add_argument("--scheduler", default="lard")
    p.add_argument("--hottest", type=float, default=90.0)
    p.add_argument("--warm", type=float, default=4.0)
    p.add_argument("--from-s", type=float, default=6.0)
    p.add_argument("--to-s", type=float, default=16.0)
    p.add_argument("--results", required=True)
    p.add_argument("--workdir", default="/tmp/flood-attack")
    p.add_argument("--shift", type=int, default=0)
    a = p.parse_args()
    ov = os.path.join(HERE, "override.json")
    if os.path.exists(ov):
        m = json.load(open(ov)).get(a.label)
        if m:
            a.label = m["label"]
            a.scenario = m["scenario"]
            a.shift = m.get("shift", 0)
    os.makedirs(a.workdir, exist_ok=True)
    tag = a.label.replace("/", "_")
    d = os.path.join(a.workdir, tag)
    os.makedirs(d, exist_ok=True)
    rules = os.path.join(d, "rules.toml")
    spill = f'spill = "{a.spill}"\n' if a.spill else ""
    servers = ", ".join(f'{{ addr = "127.0.0.1:{BASE + i}" }}' for i in range(4))
    open(rules, "w").write(f"""[switch]
workers = 2
access_log = false

[admin]
listen = "127.0.0.1:{ADMIN}"

[virtual.web]
listen = "127.0.0.1:{LISTEN}"
default_pool = "p"

[pool.p]
scheduler = "{a.scheduler}"
{spill}servers = [{servers}]
""")
    procs = []
    t0 = time.time() + 4.0
    common = ["--t0", str(t0), "--to-s", str(a.to_s)]
    be = subprocess.Popen([PY, os.path.join(HERE, "backends.py"), "--cache", str(a.cache),
                           "--warm-s", str(a.warm), "--from-s", str(a.from_s),
                           "--out", os.path.join(d, "backends.json")] + common)
    procs.append(be)
    for i in range(4):
        wait_port(BASE + i)
    sw = subprocess.Popen([a.bin, "run", "-c", rules], stdout=open(os.path.join(d, "tcpvs.log"), "w"),
                          stderr=subprocess.STDOUT)
    procs.append(sw)
    try:
        if not wait_port(LISTEN):
            raise SystemExit("tcpvs did not listen")
        cands = [f"/o{i}" for i in range(100)] + [f"/x{i}" for i in range(40)] + [f"/xs{i}" for i in range(400)]
        ring = json.loads(subprocess.check_output(
            [PY, os.path.join(HERE, "load.py"), "discover", "--port", str(LISTEN),
             "--paths", ",".join(cands)]))
        hot_srv = ring["/o0"]
        shift_k = 0
        if a.shift:
            # The new hottest pair after the shift: two objects ranked past 20 on one server.
            shift_k = next(k for k in range(20, 99) if ring[f"/o{k}"] == ring[f"/o{k+1}"])
            hot_srv = ring[f"/o{shift_k}"]
        xs = [c for c in cands if c.startswith("/x") and not c.startswith("/xs")]
        same = [c for c in xs if ring[c] == hot_srv]
        other = [c for c in xs if ring[c] != hot_srv]
        per_srv = {}
        for c in xs:
            per_srv.setdefault(ring[c], c)
        if time.time() > t0 - 0.3:
            print("warning: discovery ran late", file=sys.stderr)
        load = [PY, os.path.join(HERE, "load.py")]
        kids = []
        kids.append(subprocess.Popen(load + ["honest", "--port", str(LISTEN), "--clients", str(a.clients),
                                             "--objects", str(a.objects), "--from-s", str(a.from_s),
                                             "--shift", str(shift_k), "--shift-at", str(a.from_s),
                                             "--out", os.path.join(d, "honest.json")] + common))
        sc = a.scenario.split(":")
        spec = None
        attack = {}
        if sc[0] in ("other", "same"):
            m = float(sc[1])
            path = (same if sc[0] == "same" else other)[0]
            spec = f"{path}:{m * a.hottest:.0f}"
        elif sc[0] == "all":
            m, k = float(sc[1]), float(sc[2])
            parts = [f"{same[0]}:{m * a.hottest:.0f}"]
            for s, c in sorted(per_srv.items()):
                if s != hot_srv:
                    parts.append(f"{c}:{k * a.hottest:.0f}")
            spec = ",".join(parts)
        elif sc[0] == "modflood":
            spec = f"{same[0]}:{float(sc[1]):.0f}"
        if spec:
            attack["spec"] = spec
            kids.append(subprocess.Popen(load + ["flood", "--port", str(LISTEN), "--spec", spec,
                                                 "--conns", "8", "--from-s", str(a.from_s),
                                                 "--start-s", "0",
                                                 "--out", os.path.join(d, "attack.json")] + common))
        if sc[0] in ("slowsame", "slowspread"):
            conns, hold = int(sc[1]), int(sc[2])
            crafted = [c for c in cands if c.startswith("/xs")]
            if sc[0] == "slowsame":
                # A server other than the hottest target's: the one of /o2 if it differs.
                victim = ring["/o2"] if ring["/o2"] != hot_srv else (hot_srv + 1) % 4
                attack["victim_server"] = victim
                crafted = [c for c in crafted if ring[c] == victim]
            pf = os.path.join(d, "crafted.txt")
            open(pf, "w").write("\n".join(crafted) + "\n")
            attack["crafted_paths"] = len(crafted)
            kids.append(subprocess.Popen(load + ["slow", "--port", str(LISTEN), "--paths-file", pf,
                                                 "--conns", str(conns), "--hold", str(hold),
                                                 "--start-s", str(a.from_s - 2),
                                                 "--out", os.path.join(d, "attack.json")] + common))
        for k in kids:
            k.wait(timeout=a.to_s + 30)
        deadline = time.time() + 5
        while not os.path.exists(os.path.join(d, "backends.json")) and time.time() < deadline:
            time.sleep(0.1)
        res = {"label": a.label, "scenario": a.scenario, "shift": shift_k, "clients": a.clients, "spill": a.spill,
               "hot_server": hot_srv, "ring_sample": {c: ring[c] for c in ["/o0", "/o1", "/o2"] + xs[:8]},
               "attack_cfg": attack}
        for name in ("honest", "attack", "backends"):
            f = os.path.join(d, name + ".json")
            if os.path.exists(f):
                res[name] = json.load(open(f))
        alive = sw.poll() is None
        res["tcpvs_alive_at_end"] = alive
        with open(a.results, "a") as f:
            f.write(json.dumps(res) + "\n")
        h = res.get("honest", {})
        b = res.get("backends", {})
        print(a.label, a.scenario, "rps", h.get("rps"), "p99", h.get("p99_ms"), "hit", h.get("hit_ratio"),
              "spread", h.get("per_server"), "max/mean", h.get("max_over_mean"),
              "active", [s["mean_active"] for s in b.get("servers", [])],
              "copies", b.get("copies_per_object"), "atk", res.get("attack", {}).get("rps") or res.get("attack", {}).get("sent"),
              "top", h.get("top_rank_rps", [None])[:3], "hot_srv", hot_srv, flush=True)
    finally:
        for pr in reversed(procs):
            if pr.poll() is None:
                pr.send_signal(signal.SIGTERM)
        for pr in reversed(procs):
            try:
                pr.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait()


if __name__ == "__main__":
    main()
