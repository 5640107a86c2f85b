#!/usr/bin/env python3
"""Evaluates every dashboard query through a real Prometheus (Debian's, with our recording rules).

  dashboards_live_test.py                         against fake_exporter.py (the CI test)
  dashboards_live_test.py TARGET... [-- ARGS...]  against real /metrics endpoints (host:port of
                                                  ablate-server and workers), e.g. from the
                                                  end-to-end test while or after a sweep runs;
                                                  ARGS go to check_dashboards.py (--sweep S,
                                                  --lookback 600, --optional 'ablate_worker_')

Against the fake exporter, which serves the metric names and labels of
docs/architecture.md#observability, it checks
that every panel returns data while the sweep runs; then, after the exporter drops the sweep's
series (as the server does when a sweep ends), that an instant check reports the Sweep and Run
panels as empty and a --lookback check still passes. That catches a misspelt metric, a wrong label or a
broken recording rule without the C++ services.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from harness import free_port  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHECK = [sys.executable, os.path.join(HERE, "check_dashboards.py")]


def wait_until(predicate, what, deadline_s):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.2)
    raise SystemExit(f"dashboards_live_test: gave up waiting for {what}")


class Processes:
    """Child processes, all stopped on close (SIGTERM, then SIGKILL after 20 s)."""

    def __init__(self):
        self.procs = []

    def start(self, argv, out=subprocess.DEVNULL):
        self.procs.append(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT))

    def close(self):
        for p in self.procs:
            p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


class Prometheus:
    """A Prometheus scraping TARGETS every second with the repository's rules, and the
    dashboard check pointed at it."""

    def __init__(self, procs, tmp, targets):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            # Same rules as production; 1 s scrapes so that rate() windows fill within seconds.
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    f"rule_files: [{os.path.join(REPO, 'deploy', 'prometheus', 'rules.yml')}]\n"
                    "scrape_configs:\n  - job_name: ablate-server\n"
                    f"    static_configs: [{{targets: [{', '.join(repr(t) for t in targets)}]}}]\n")
        subprocess.run(["promtool", "check", "config", config], check=True, capture_output=True)
        self.log_path = os.path.join(tmp, "prometheus.log")
        with open(self.log_path, "w") as log:
            procs.start(["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], log)

    def check(self, *args):
        result = subprocess.run([*CHECK, self.url, *args], capture_output=True, text=True, timeout=300)
        return result.returncode, result.stdout + result.stderr

    def log_tail(self):
        with open(self.log_path) as f:
            return f.read()[-3000:]


def start_fake_exporter(procs, tmp):
    port_file = os.path.join(tmp, "exporter.port")
    procs.start([sys.executable, os.path.join(HERE, "fake_exporter.py"), port_file])
    wait_until(lambda: os.path.exists(port_file) and os.path.getsize(port_file) > 0,
               "the fake exporter", 20)
    with open(port_file) as f:
        return f"127.0.0.1:{f.read().strip()}"


def instant(prom_url, expr):
    url = f"{prom_url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    if body.get("status") != "success":
        raise SystemExit(f"dashboards_live_test: {expr}: {body}")
    return body["data"]["result"]


def check_sweep_axes(prom_url):
    """The Sweep dashboard follows a sweep's own axes (issue #15): for the fake exporter's
    pos x attn_softcap sweep, the variant variable lists each combination, every per-run legend
    names a distinct run, each LR x depth table holds one cell per (lr, n_layer) of its variant
    only, and the ETA panel maps the exporter's -1 (unknown) to a dash. Returns the problems."""
    with open(os.path.join(REPO, "deploy", "grafana", "dashboards", "sweep.json")) as f:
        dash = json.load(f)
    problems = []
    var = next((v for v in dash["templating"]["list"] if v["name"] == "variant"), None)
    if var is None:
        return ["sweep.json has no variant variable"]
    m = re.match(r"label_values\((.*), (\w+)\)$", var["query"]["query"])
    selector = m.group(1).replace("$sweep", "posgrid")
    variants = sorted({s["metric"].get(m.group(2), "") for s in instant(prom_url, selector)})
    want = sorted(f"attn_softcap={c},pos={p}" for c in ("0", "30") for p in ("learned", "rope"))
    if variants != want:
        problems.append(f"variant variable for posgrid: {variants}, want {want}")
    every = "(" + "|".join(re.escape(v) for v in variants) + ")"
    panels = [p for row in dash["panels"] for p in [row, *row.get("panels", [])]]
    for p in panels:
        for t in p.get("targets", []):
            legend = t.get("legendFormat", "")
            expr = t.get("expr", "").replace("$sweep", "posgrid")
            if "{{" in legend and "run" not in legend and "$variant" in t.get("expr", ""):
                names = [re.sub(r"\{\{(\w+)\}\}", lambda g: s["metric"].get(g.group(1), ""), legend)
                         for s in instant(prom_url, expr.replace("$variant", every))]
                if len(names) != 32 or len(set(names)) != len(names):
                    problems.append(f"panel {p['id']} {p['title']!r}: legends {sorted(names)} do not "
                                    "tell the 32 runs apart")
            if p.get("repeat") == "variant":
                for v in variants:
                    cells = [(s["metric"].get("lr"), s["metric"].get("n_layer"), s["value"][1])
                             for s in instant(prom_url, expr.replace("$variant", re.escape(v)))]
                    keys = [c[:2] for c in cells]
                    if len(keys) != 4 or len(set(keys)) != 4:
                        problems.append(f"panel {p['id']} ({v}): cells {cells}, want one per "
                                        "(lr, n_layer) of this variant")
    eta = next(p for p in panels if p.get("title") == "ETA")
    values = [s["value"][1] for s in instant(prom_url, eta["targets"][0]["expr"].replace("$sweep", "posgrid"))]
    mapped = {k: o.get("text") for mp in eta["fieldConfig"]["defaults"].get("mappings", [])
              if mp.get("type") == "value" for k, o in mp.get("options", {}).items()}
    if values != ["-1"] or mapped.get("-1") != "\u2013":
        problems.append(f"ETA: exporter says {values}, mappings {mapped}: -1 must read as a dash")
    return problems


def check_fake_sweep(procs, tmp):
    target = start_fake_exporter(procs, tmp)
    prom = Prometheus(procs, tmp, [target])
    rc, out = prom.check("--wait", "90")
    print(out, end="")
    if rc != 0:
        print(prom.log_tail(), file=sys.stderr)
        return rc
    # Recording rules need an evaluation after the first scrapes; check_dashboards waited for it.
    problems = check_sweep_axes(prom.url)
    if problems:
        print("FAIL: the Sweep dashboard does not follow the sweep's axes:", *problems,
              sep="\n  ", file=sys.stderr)
        return 1
    print("ok: the Sweep dashboard's variant variable, legends, tables and ETA follow the "
          "pos x attn_softcap sweep")

    # The sweep ends: its series vanish from /metrics and Prometheus marks them stale.
    urllib.request.urlopen(f"http://{target}/end-sweep", timeout=10).read()
    query = f"{prom.url}/api/v1/query?query=ablate_sweep_progress_ratio"
    wait_until(lambda: b'"result":[]' in urllib.request.urlopen(query, timeout=10).read(),
               "the ended sweep's series to go stale", 60)
    rc, out = prom.check()
    if rc == 0 or "sweep.json: panel 1 'Progress'" not in out or "run.json: panel 2 'Step'" not in out:
        print("FAIL: after the sweep ended, an instant check should report the Sweep and Run "
              "panels as empty:\n" + out, file=sys.stderr)
        return 1
    rc, out = prom.check("--lookback", "300", "--sweep", "smoke")
    print("after the sweep ended, with --lookback: " + out, end="")
    return rc


def main(argv):
    targets, check_args = argv, []
    if "--" in argv:
        i = argv.index("--")
        targets, check_args = argv[:i], argv[i + 1:]
    for t in targets:
        host, _, port = t.rpartition(":")
        if not host or not port.isdigit():
            raise SystemExit(f"dashboards_live_test: {t!r} is not host:port")
    for tool in ("prometheus", "promtool"):
        if not shutil.which(tool):
            raise SystemExit(f"dashboards_live_test: {tool} not installed (scripts/install-deps)")

    procs = Processes()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if not targets:
                return check_fake_sweep(procs, tmp)
            rc, out = Prometheus(procs, tmp, targets).check("--wait", "90", *check_args)
            print(out, end="")
            return rc
        finally:
            procs.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
