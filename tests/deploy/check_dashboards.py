#!/usr/bin/env python3
"""Checks ablate's Grafana dashboards, statically and against a live Prometheus.

  check_dashboards.py --static
      Every dashboard JSON parses; dashboard uids are unique and numeric ids absent; panel ids
      are unique within a dashboard; every data source is referenced by a provisioned uid; every
      $variable a query uses is defined; every panel has a grid position and a query.

  check_dashboards.py PROM_URL [--sweep S] [--run R] [--var NAME=VALUE] [--wait SECONDS]
                      [--lookback SECONDS] [--optional REGEX]
      The static checks, then every PromQL expression of every panel is evaluated through
      PROM_URL/api/v1/query after its template variables are substituted. A variable takes the
      value given on the command line, else the first value its label_values() query finds in
      Prometheus (multi-value variables take all of them, one evaluation per value for the
      variable a panel repeats over). An expression fails when Prometheus reports an error or
      returns no series. Panels whose expression matches --optional may be empty (e.g.
      'ablate_worker_' when no worker is scraped). --wait retries until everything passes or the
      time is up: Prometheus delays its first scrape and recording rules lag one evaluation.
      --lookback N accepts data from any time in the last N seconds (range queries), for
      checking after a sweep has ended, when the server has dropped its per-run series.

Exit status 0 when everything passes, 1 when something failed (each failing panel is listed),
2 on bad usage. Standard library only, so it runs wherever python3 does.
"""

import argparse
import glob
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_DASHBOARDS = os.path.join(REPO, "deploy", "grafana", "dashboards")
DEFAULT_DATASOURCES = os.path.join(REPO, "deploy", "grafana", "provisioning", "datasources")

# Grafana's own variables, replaced by what Grafana would pick for a short time range. The check
# asks only "does this return data", so the exact interval does not matter as long as it spans
# several 5 s scrapes.
BUILTINS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__interval_ms": "15000",
    "__range": "5m",
    "__range_s": "300",
    "__range_ms": "300000",
}

VAR_RE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)")
LABEL_VALUES_RE = re.compile(r"^\s*label_values\(\s*(?:(.*),\s*)?(\w+)\s*\)\s*$", re.S)


def provisioned_uids(datasource_dir):
    """Reads datasource uids from the provisioning YAML without a YAML parser (stdlib only):
    the files are ours and keep `uid:` on its own line."""
    uids = set()
    for path in sorted(glob.glob(os.path.join(datasource_dir, "*.y*ml"))):
        with open(path, encoding="utf-8") as f:
            for line in f:
                m = re.match(r"^\s*-?\s*uid:\s*['\"]?([\w.-]+)['\"]?\s*$", line)
                if m:
                    uids.add(m.group(1))
    return uids


def load_dashboards(directory):
    """Returns ([(path, dashboard)], [error])."""
    out, errors = [], []
    paths = sorted(glob.glob(os.path.join(directory, "*.json")))
    if not paths:
        errors.append(f"{directory}: no dashboard JSON files")
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                out.append((path, json.load(f)))
        except json.JSONDecodeError as e:
            errors.append(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}")
        except OSError as e:
            errors.append(f"{path}: {e}")
    return out, errors


def all_panels(dashboard):
    """Top-level panels and the panels inside collapsed rows."""
    for panel in dashboard.get("panels", []):
        yield panel
        for inner in panel.get("panels", []) or []:
            yield inner


def query_text(query):
    return query.get("query", "") if isinstance(query, dict) else (query or "")


def variables_of(dashboard):
    return dashboard.get("templating", {}).get("list", [])


def check_datasource(where, ds, uids, errors):
    if ds is None:
        return
    if not isinstance(ds, dict):
        errors.append(f"{where}: data source {ds!r} is referenced by name; use {{type, uid}}")
        return
    uid = ds.get("uid")
    if uid in ("-- Grafana --", "grafana", "-- Dashboard --"):
        return
    if uid not in uids:
        errors.append(f"{where}: data source uid {uid!r} is not provisioned (have {sorted(uids)})")


def static_check(dashboards, uids):
    errors = []
    seen_uids = {}
    for path, d in dashboards:
        name = os.path.basename(path)
        if not isinstance(d, dict):
            errors.append(f"{name}: top level is not an object")
            continue
        uid = d.get("uid")
        if not uid:
            errors.append(f"{name}: dashboard has no uid (links and provisioning need a stable one)")
        elif uid in seen_uids:
            errors.append(f"{name}: uid {uid!r} also used by {seen_uids[uid]}")
        else:
            seen_uids[uid] = name
        if d.get("id") is not None:
            errors.append(f"{name}: dashboard has a hard-coded numeric id {d['id']!r}")
        if not d.get("title"):
            errors.append(f"{name}: dashboard has no title")
        defined = {v.get("name") for v in variables_of(d)} | set(BUILTINS)
        for v in variables_of(d):
            where = f"{name}: variable {v.get('name')!r}"
            check_datasource(where, v.get("datasource"), uids, errors)
            if v.get("type") == "query" and not LABEL_VALUES_RE.match(query_text(v.get("query"))):
                errors.append(f"{where}: query is not label_values(...): {query_text(v.get('query'))!r}")
        panel_ids = {}
        for p in all_panels(d):
            title = p.get("title", "")
            where = f"{name}: panel {p.get('id')!r} {title!r}"
            pid = p.get("id")
            if not isinstance(pid, int):
                errors.append(f"{where}: panel id must be an integer")
            elif pid in panel_ids:
                errors.append(f"{where}: panel id {pid} duplicates panel {panel_ids[pid]!r}")
            else:
                panel_ids[pid] = title
            grid = p.get("gridPos", {})
            if not all(isinstance(grid.get(k), int) for k in ("x", "y", "w", "h")):
                errors.append(f"{where}: gridPos needs integer x, y, w, h")
            if p.get("type") == "row":
                continue
            if not title:
                errors.append(f"{where}: panel has no title")
            check_datasource(where, p.get("datasource"), uids, errors)
            targets = p.get("targets", [])
            if not targets:
                errors.append(f"{where}: panel has no query")
            if p.get("repeat") and p["repeat"] not in defined:
                errors.append(f"{where}: repeats over undefined variable ${p['repeat']}")
            for t in targets:
                check_datasource(f"{where} ref {t.get('refId')}", t.get("datasource"), uids, errors)
                expr = t.get("expr", "")
                if not expr.strip():
                    errors.append(f"{where} ref {t.get('refId')}: empty expr")
                for var in used_variables(expr):
                    if var not in defined:
                        errors.append(f"{where} ref {t.get('refId')}: uses undefined ${var}")
    return errors


def used_variables(text):
    return {next(g for g in m.groups() if g) for m in VAR_RE.finditer(text)}


def substitute(text, values):
    """values: name -> string. Unknown names are left as they are (the static check reports them)."""

    def repl(m):
        name = next(g for g in m.groups() if g)
        return values.get(name, m.group(0))

    return VAR_RE.sub(repl, text)


class Prometheus:
    """lookback 0: instant queries at now. lookback N: range queries over the last N seconds,
    passing when any step had data, so a sweep that has ended (the server drops its series)
    can still be checked afterwards."""

    def __init__(self, url, lookback=0):
        self.url = url.rstrip("/")
        self.lookback = lookback

    def _window(self):
        end = time.time()
        return {"start": f"{end - self.lookback:.3f}", "end": f"{end:.3f}"}

    def _get(self, path, params):
        query = urllib.parse.urlencode(params, doseq=True)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:
            # Prometheus answers bad queries with 400 and a JSON body naming the error.
            try:
                return json.load(e)
            except (json.JSONDecodeError, ValueError):
                return {"status": "error", "error": f"HTTP {e.code}"}
        except (urllib.error.URLError, OSError) as e:
            return {"status": "error", "error": f"cannot reach {self.url}: {e}"}

    def query(self, expr):
        """Returns (number of series with data, error or None)."""
        if self.lookback:
            # Fine enough steps to see a series that lived a few seconds; Prometheus caps a range
            # query at 11000 points per series.
            step = max(1, int(self.lookback / 5000) + 1)
            body = self._get("/api/v1/query_range", {"query": expr, "step": str(step), **self._window()})
        else:
            body = self._get("/api/v1/query", {"query": expr})
        if body.get("status") != "success":
            return 0, body.get("error", "unknown error")
        data = body.get("data", {})
        result = data.get("result", [])
        if data.get("resultType") == "scalar":
            return 1, None
        if data.get("resultType") == "matrix":
            return sum(1 for r in result if r.get("values")), None
        return len(result), None

    def label_values(self, selector, label):
        window = self._window() if self.lookback else {}
        if selector:
            body = self._get("/api/v1/series", {"match[]": selector, **window})
            if body.get("status") != "success":
                return None, body.get("error", "unknown error")
            values = {s[label] for s in body.get("data", []) if label in s}
        else:
            body = self._get(f"/api/v1/label/{label}/values", window)
            if body.get("status") != "success":
                return None, body.get("error", "unknown error")
            values = set(body.get("data", []))
        return sorted(values), None


def resolve_variables(dashboard, prom, given):
    """Returns (name -> [values], [error]); variables resolve in order, each seeing the earlier."""
    resolved, errors = {}, []
    for v in variables_of(dashboard):
        name = v.get("name")
        if name in given:
            resolved[name] = [given[name]]
            continue
        if v.get("type") == "custom":
            resolved[name] = [o.strip() for o in str(v.get("query", "")).split(",") if o.strip()]
            continue
        if v.get("type") == "constant":
            resolved[name] = [str(v.get("query", ""))]
            continue
        m = LABEL_VALUES_RE.match(query_text(v.get("query")))
        if not m:
            errors.append(f"variable {name}: cannot evaluate {query_text(v.get('query'))!r}")
            continue
        selector = substitute(m.group(1) or "", single_values(resolved))
        values, err = prom.label_values(selector, m.group(2))
        if err:
            errors.append(f"variable {name}: {err}")
        elif not values:
            errors.append(f"variable {name}: label_values({selector}, {m.group(2)}) found no values")
        else:
            resolved[name] = values if v.get("multi") or v.get("includeAll") else values[:1]
    return resolved, errors


def single_values(resolved):
    """What Grafana substitutes for a variable outside a repeat: one value, or a regex
    alternation of all selected values for a multi-value variable."""
    out = dict(BUILTINS)
    for name, values in resolved.items():
        out[name] = values[0] if len(values) == 1 else "(" + "|".join(re.escape(x) for x in values) + ")"
    return out


def live_check(dashboards, prom, given, optional):
    failures, passed, skipped = [], 0, 0
    for path, d in dashboards:
        name = os.path.basename(path)
        resolved, errors = resolve_variables(d, prom, given)
        failures += [f"{name}: {e}" for e in errors]
        if errors:
            continue
        for p in all_panels(d):
            if p.get("type") == "row":
                continue
            repeat = p.get("repeat")
            scopes = [{repeat: [x]} for x in resolved.get(repeat, [])] if repeat else [{}]
            for scope in scopes:
                values = single_values({**resolved, **scope})
                for t in p.get("targets", []):
                    expr = substitute(t.get("expr", ""), values)
                    where = f"{name}: panel {p.get('id')} {p.get('title')!r} ref {t.get('refId')}"
                    if scope:
                        where += f" ({repeat}={scope[repeat][0]})"
                    n, err = prom.query(expr)
                    if err:
                        failures.append(f"{where}: error: {err}\n    expr: {expr}")
                    elif n == 0 and optional and re.search(optional, t.get("expr", "")):
                        skipped += 1
                    elif n == 0:
                        failures.append(f"{where}: no data\n    expr: {expr}")
                    else:
                        passed += 1
    return failures, passed, skipped


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("prom_url", nargs="?", help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    ap.add_argument("--static", action="store_true", help="structure checks only, no Prometheus")
    ap.add_argument("--dashboards", default=DEFAULT_DASHBOARDS, help="directory of dashboard JSON")
    ap.add_argument("--datasources", default=DEFAULT_DATASOURCES,
                    help="directory of Grafana data source provisioning YAML")
    ap.add_argument("--sweep", help="value for $sweep")
    ap.add_argument("--run", help="value for $run")
    ap.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                    help="value for any other template variable")
    ap.add_argument("--optional", help="regex: panels whose expr matches may return no data")
    ap.add_argument("--wait", type=float, default=0, metavar="SECONDS",
                    help="retry failing queries for up to this long")
    ap.add_argument("--lookback", type=float, default=0, metavar="SECONDS",
                    help="pass a query that had data at any time in the last SECONDS (range "
                         "queries) instead of only now: checks a sweep that has already ended")
    args = ap.parse_args(argv)
    if not args.static and not args.prom_url:
        ap.error("give PROM_URL, or --static for the structure checks alone")
    given = {}
    for item in args.var:
        if "=" not in item:
            ap.error(f"--var {item!r}: expected NAME=VALUE")
        k, v = item.split("=", 1)
        given[k] = v
    if args.sweep:
        given["sweep"] = args.sweep
    if args.run:
        given["run"] = args.run

    dashboards, errors = load_dashboards(args.dashboards)
    uids = provisioned_uids(args.datasources)
    if not uids:
        errors.append(f"{args.datasources}: no provisioned data source uid found")
    errors += static_check(dashboards, uids)
    if errors:
        print("FAIL: dashboard structure", *errors, sep="\n  ", file=sys.stderr)
        return 1
    n_panels = sum(1 for _, d in dashboards for p in all_panels(d) if p.get("type") != "row")
    print(f"ok: {len(dashboards)} dashboards, {n_panels} panels, data sources {sorted(uids)}")
    if args.static:
        return 0

    if args.lookback < 0 or args.wait < 0:
        ap.error("--lookback and --wait take seconds >= 0")
    prom = Prometheus(args.prom_url, args.lookback)
    deadline = time.monotonic() + args.wait
    while True:
        failures, passed, skipped = live_check(dashboards, prom, given, args.optional)
        if not failures or time.monotonic() >= deadline:
            break
        time.sleep(min(3.0, max(0.0, deadline - time.monotonic())))
    if failures:
        print(f"FAIL: {len(failures)} queries failed ({passed} passed, {skipped} optional empty)",
              *failures, sep="\n  ", file=sys.stderr)
        return 1
    print(f"ok: {passed} queries returned data ({skipped} optional queries empty)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
