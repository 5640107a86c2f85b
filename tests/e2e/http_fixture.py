"""A local HTTP server for `ablate data fetch` tests: serves the files of a directory with Range
support and fault modes chosen by the first path segment, and logs every request.

  /ok/<file>       the file (206 with a Range header, 416 past its end)
  /cut/<file>      the first request for <file> announces the whole length, sends `--cut` bytes
                   and closes the connection; later requests are served as /ok/
  /stall/<file>    sends the headers and `--cut` bytes, then nothing for `--stall` seconds
  /norange/<file>  ignores Range: always 200 with the whole file
  anything else    404

Run: http_fixture.py DIR LOG [--cut N] [--stall S]; prints the port on stdout, then serves until
killed. LOG gets one JSON line per request: {"path", "range", "status"}.
"""
import argparse
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("log")
    ap.add_argument("--cut", type=int, default=1 << 20)
    ap.add_argument("--stall", type=float, default=120)
    args = ap.parse_args()
    lock = threading.Lock()
    cut_done = set()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def record(self, status):
            with lock, open(args.log, "a") as f:
                f.write(json.dumps({"path": self.path, "range": self.headers.get("Range"),
                                    "status": status}) + "\n")

        def do_GET(self):
            m = re.match(r"^/(ok|cut|stall|norange)/([A-Za-z0-9._-]+)$", self.path)
            path = os.path.join(args.dir, m.group(2)) if m else None
            if not m or not os.path.isfile(path):
                self.record(404)
                body = b"not found\n"
                self.send_response(404)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            mode, name = m.group(1), m.group(2)
            with open(path, "rb") as f:
                data = f.read()
            start = 0
            rng = self.headers.get("Range")
            if rng and mode != "norange":
                rm = re.match(r"^bytes=(\d+)-$", rng)
                start = int(rm.group(1)) if rm else 0
                if start >= len(data):
                    self.record(416)
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
            body = data[start:]
            status = 206 if start > 0 else 200
            self.record(status)
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            with lock:
                first_cut = mode == "cut" and name not in cut_done
                if first_cut:
                    cut_done.add(name)
            if first_cut:
                self.wfile.write(body[:args.cut])
                self.wfile.flush()
                self.close_connection = True
                return
            if mode == "stall":
                self.wfile.write(body[:args.cut])
                self.wfile.flush()
                time.sleep(args.stall)
                self.close_connection = True
                return
            self.wfile.write(body)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # a client that hangs up on a stall or a cut is the point, not a fault

    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
