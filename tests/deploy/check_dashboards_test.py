#!/usr/bin/env python3
"""Shows that check_dashboards.py catches what it claims to: each case breaks one thing in a copy
of a minimal dashboard and expects that exact failure; the live cases answer its Prometheus
queries from an in-process stand-in for the HTTP API."""

import contextlib
import http.server
import io
import json
import os
import sys
import tempfile
import threading
import unittest
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_dashboards  # noqa: E402

DS = {"type": "prometheus", "uid": "ablate-prometheus"}


def minimal_dashboard():
    return {
        "uid": "t-sweep", "title": "t", "panels": [
            {"id": 1, "type": "stat", "title": "progress", "datasource": DS,
             "gridPos": {"x": 0, "y": 0, "w": 4, "h": 4},
             "targets": [{"refId": "A", "datasource": DS,
                          "expr": 'ablate_sweep_progress_ratio{sweep="$sweep"}'}]},
            {"id": 2, "type": "table", "title": "matrix", "datasource": DS, "repeat": "qk_norm",
             "gridPos": {"x": 4, "y": 0, "w": 4, "h": 4},
             "targets": [{"refId": "A", "datasource": DS,
                          "expr": 'ablate_run_val_loss{sweep="$sweep",qk_norm=~"$qk_norm"}'}]},
        ],
        "templating": {"list": [
            {"name": "sweep", "type": "query", "datasource": DS,
             "query": "label_values(ablate_sweep_progress_ratio, sweep)"},
            {"name": "qk_norm", "type": "query", "datasource": DS, "multi": True, "includeAll": True,
             "query": 'label_values(ablate_run_val_loss{sweep="$sweep"}, qk_norm)'},
        ]},
    }


class FakePrometheus(http.server.BaseHTTPRequestHandler):
    """Knows one sweep 's1' with variants none/layernorm; val loss exists only for `have`."""
    have = {"none", "layernorm"}
    queries = []
    paths = []

    def do_GET(self):  # noqa: N802
        url = urllib.parse.urlparse(self.path)
        params = urllib.parse.parse_qs(url.query)
        if url.path == "/api/v1/series":
            match = params["match[]"][0]
            if match.startswith("ablate_sweep_progress_ratio"):
                data = [{"__name__": "ablate_sweep_progress_ratio", "sweep": "s1"}]
            else:
                data = [{"__name__": "ablate_run_val_loss", "sweep": "s1", "qk_norm": q}
                        for q in ("none", "layernorm")]
            self.reply(200, {"status": "success", "data": data})
        elif url.path in ("/api/v1/query", "/api/v1/query_range"):
            q = params["query"][0]
            FakePrometheus.queries.append(q)
            FakePrometheus.paths.append(url.path)
            if "syntax error" in q:
                self.reply(400, {"status": "error", "error": "parse error"})
                return
            present = 'sweep="s1"' in q and ("progress" in q or any(f'"{v}"' in q for v in self.have))
            if url.path.endswith("query_range"):
                # A series that existed earlier in the window but has no points now: still data.
                result = [{"metric": {}, "values": [[0, "1"]] if present else []}]
                data = {"resultType": "matrix", "result": result}
            else:
                data = {"resultType": "vector",
                        "result": [{"metric": {}, "value": [0, "1"]}] if present else []}
            self.reply(200, {"status": "success", "data": data})
        else:
            self.reply(404, {"status": "error", "error": "not found"})

    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


class CheckDashboardsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.dash_dir = os.path.join(self.dir.name, "dashboards")
        self.ds_dir = os.path.join(self.dir.name, "datasources")
        os.makedirs(self.dash_dir)
        os.makedirs(self.ds_dir)
        with open(os.path.join(self.ds_dir, "prom.yml"), "w") as f:
            f.write("datasources:\n  - name: p\n    uid: ablate-prometheus\n")
        FakePrometheus.have = {"none", "layernorm"}
        FakePrometheus.queries = []
        FakePrometheus.paths = []

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, dashboard, raw=None):
        with open(os.path.join(self.dash_dir, name), "w") as f:
            f.write(raw if raw is not None else json.dumps(dashboard))

    def run_check(self, *args):
        err, out = io.StringIO(), io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            rc = check_dashboards.main(
                ["--dashboards", self.dash_dir, "--datasources", self.ds_dir, *args])
        return rc, out.getvalue() + err.getvalue()

    def test_repo_dashboards_pass_static_checks(self):
        with contextlib.redirect_stdout(io.StringIO()):
            rc = check_dashboards.main(["--static"])
        self.assertEqual(rc, 0)

    def test_minimal_dashboard_passes(self):
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 0, text)

    def test_invalid_json_names_file_and_line(self):
        self.write("bad.json", None, raw='{\n  "uid": "x",\n  oops\n}')
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("bad.json:3:", text)

    def test_duplicate_panel_id(self):
        d = minimal_dashboard()
        d["panels"][1]["id"] = 1
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("panel id 1 duplicates", text)

    def test_duplicate_panel_id_inside_collapsed_row(self):
        d = minimal_dashboard()
        d["panels"].append({"id": 9, "type": "row", "title": "r", "collapsed": True,
                            "gridPos": {"x": 0, "y": 5, "w": 24, "h": 1},
                            "panels": [dict(d["panels"][0])]})
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("duplicates", text)

    def test_unprovisioned_datasource_uid(self):
        d = minimal_dashboard()
        d["panels"][0]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "P1809F7CD0C75ACF3"}
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("'P1809F7CD0C75ACF3' is not provisioned", text)

    def test_datasource_by_name(self):
        d = minimal_dashboard()
        d["panels"][0]["datasource"] = "Prometheus"
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("referenced by name", text)

    def test_hard_coded_dashboard_id(self):
        d = minimal_dashboard()
        d["id"] = 42
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("hard-coded numeric id 42", text)

    def test_duplicate_dashboard_uid(self):
        self.write("a.json", minimal_dashboard())
        self.write("b.json", minimal_dashboard())
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("also used by a.json", text)

    def test_undefined_variable(self):
        d = minimal_dashboard()
        d["panels"][0]["targets"][0]["expr"] = 'ablate_run_step{run="$run"}'
        self.write("a.json", d)
        rc, text = self.run_check("--static")
        self.assertEqual(rc, 1)
        self.assertIn("uses undefined $run", text)

    def test_substitute_forms_and_builtins(self):
        values = check_dashboards.single_values({"sweep": ["s1"], "q": ["a", "b.c"]})
        self.assertEqual(check_dashboards.substitute('x{s="$sweep",t="${sweep}",u="[[sweep]]"}', values),
                         'x{s="s1",t="s1",u="s1"}')
        self.assertEqual(check_dashboards.substitute('x{q=~"$q"}[$__rate_interval]', values),
                         'x{q=~"(a|b\\.c)"}[1m]')

    def serve(self):
        server = http.server.HTTPServer(("127.0.0.1", 0), FakePrometheus)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.addCleanup(server.server_close)  # cleanups run last-in first-out: shutdown, then close
        self.addCleanup(server.shutdown)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def test_live_all_data_passes_and_repeat_is_evaluated_per_value(self):
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve())
        self.assertEqual(rc, 0, text)
        self.assertIn('ablate_run_val_loss{sweep="s1",qk_norm=~"none"}', FakePrometheus.queries)
        self.assertIn('ablate_run_val_loss{sweep="s1",qk_norm=~"layernorm"}', FakePrometheus.queries)

    def test_live_empty_result_lists_panel(self):
        FakePrometheus.have = {"none"}
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve())
        self.assertEqual(rc, 1)
        self.assertIn("panel 2 'matrix' ref A (qk_norm=layernorm): no data", text)
        self.assertNotIn("qk_norm=none): no data", text)

    def test_live_optional_regex_allows_empty(self):
        FakePrometheus.have = set()
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve(), "--optional", "ablate_run_val_loss")
        self.assertEqual(rc, 0, text)

    def test_live_query_error_reported(self):
        d = minimal_dashboard()
        d["panels"][0]["targets"][0]["expr"] = 'syntax error{sweep="$sweep"}'
        self.write("a.json", d)
        rc, text = self.run_check(self.serve())
        self.assertEqual(rc, 1)
        self.assertIn("error: parse error", text)

    def test_live_sweep_override_is_used(self):
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve(), "--sweep", "other")
        self.assertEqual(rc, 1)
        self.assertIn('ablate_sweep_progress_ratio{sweep="other"}', text)

    def test_lookback_uses_range_queries(self):
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve(), "--lookback", "600")
        self.assertEqual(rc, 0, text)
        self.assertEqual(set(FakePrometheus.paths), {"/api/v1/query_range"})

    def test_lookback_series_without_points_is_no_data(self):
        FakePrometheus.have = {"none"}
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check(self.serve(), "--lookback", "600")
        self.assertEqual(rc, 1)
        self.assertIn("(qk_norm=layernorm): no data", text)

    def test_live_unreachable_prometheus(self):
        self.write("a.json", minimal_dashboard())
        rc, text = self.run_check("http://127.0.0.1:9")
        self.assertEqual(rc, 1)
        self.assertIn("cannot reach", text)


if __name__ == "__main__":
    unittest.main()
