#!/usr/bin/env python3
"""Prints the runs of benches/attacks/flood (one JSON line each, from run.py) as a markdown table.

Usage: summarize.py RESULTS.jsonl
"""
import json, sys
print("| run | scenario | clients | honest req/s | p50 ms | p99 ms | hit | honest per server | max/mean | mean in flight per server | copies | attack |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | ---: | --- |")
for line in open(sys.argv[1]):
    r = json.loads(line)
    h, b = r.get("honest", {}), r.get("backends", {})
    act = [s["mean_active"] for s in b.get("servers", [])]
    mx = [s["max_active"] for s in b.get("servers", [])]
    atk = r.get("attack", {})
    a = atk.get("rps") or (f"sent {atk.get('sent')} on {atk.get('servers')}" if atk else "")
    print(f"| {r['label']} | {r['scenario']}{' spill='+r['spill'] if r.get('spill') else ''} | {r['clients']} | {h.get('rps')} | {h.get('p50_ms')} | {h.get('p99_ms')} | {h.get('hit_ratio')} | {h.get('per_server')} | {h.get('max_over_mean')} | {act} (max {mx}) | {b.get('copies_per_object')} | {a} |")
