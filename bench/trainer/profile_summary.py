"""Self time per op in a chrome trace written by `trainer_bench --profile TRACE.json`: the time
an op spent outside the ops it called, summed over the step, as a share of the step's total.

usage: /usr/bin/python3 profile_summary.py TRACE.json [TOP]
"""
import collections
import json
import sys


def main():
    events = [e for e in json.load(open(sys.argv[1])) if e.get("ph") == "X"]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    by_thread = collections.defaultdict(list)
    for e in events:
        by_thread[e["tid"]].append(e)
    self_time = collections.Counter()
    calls = collections.Counter()
    total = 0.0
    for evs in by_thread.values():
        # Parents start no later and end no earlier than their children: sort by start, longest
        # first, and walk with a stack of open events.
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in evs:
            while stack and e["ts"] >= stack[-1]["ts"] + stack[-1]["dur"] - 1e-3:
                stack.pop()
            self_time[e["name"]] += e["dur"]
            calls[e["name"]] += 1
            if stack:
                self_time[stack[-1]["name"]] -= e["dur"]
            else:
                total += e["dur"]
            stack.append(e)
    print(f"{'op':40s} {'calls':>6s} {'self ms':>9s} {'share':>7s}")
    for name, t in self_time.most_common(top):
        print(f"{name:40s} {calls[name]:6d} {t / 1e3:9.1f} {100 * t / total:6.1f} %")
    print(f"{'total (top-level ops)':40s} {'':6s} {total / 1e3:9.1f}")


if __name__ == "__main__":
    main()
