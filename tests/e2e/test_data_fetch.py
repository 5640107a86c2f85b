"""`ablate data fetch` against a local HTTP server (http_fixture.py): no internet needed.

Full download with the trust-on-first-use record, a later fetch checked against that record,
resume after a cut connection, a server without Range support, a hash mismatch, a 404, a server
that stalls (ends in an error after --low-speed-time, not a hang), and `tinystories` from a
mirror (--base-url) with the progress bar's rate and ETA.
"""
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from harness import CLI  # noqa: E402

FIXTURE = os.path.join(os.path.dirname(__file__), "http_fixture.py")
CUT = 1 << 20


def make_text(seed, size):
    rng = random.Random(seed)
    words = ["once", "upon", "a", "time", "there", "was", "little", "dog", "who", "liked", "to",
             "play", "in", "the", "park", "with", "his", "friend", "sun", "happy"]
    out, n = [], 0
    while n < size:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + ".\n"
        out.append(line)
        n += len(line)
        if rng.random() < 0.1:
            out.append("<|endoftext|>\n")
    return "".join(out).encode()


class DataFetch(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ablate-fetch-")
        cls.served = os.path.join(cls.tmp, "served")
        os.makedirs(cls.served)
        cls.files = {
            "corpus.txt": make_text(1, 3 << 20),
            "other.txt": make_text(2, 3 << 20),
            "TinyStoriesV2-GPT4-train.txt": make_text(3, 2 << 20),
            "TinyStoriesV2-GPT4-valid.txt": make_text(4, 300 << 10),
        }
        for name, data in cls.files.items():
            with open(os.path.join(cls.served, name), "wb") as f:
                f.write(data)
        cls.log = os.path.join(cls.tmp, "requests.jsonl")
        cls.server = subprocess.Popen([sys.executable, FIXTURE, cls.served, cls.log, "--cut", str(CUT),
                                       "--stall", "600"], stdout=subprocess.PIPE, text=True)
        cls.base = f"http://127.0.0.1:{cls.server.stdout.readline().strip()}"

    @classmethod
    def tearDownClass(cls):
        cls.server.kill()
        cls.server.wait()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.to = tempfile.mkdtemp(dir=self.tmp, prefix="data-")

    def fetch(self, *args, timeout=120):
        # The timeout guards the test run against a hang; it asserts no speed.
        return subprocess.run([CLI, "data", "fetch", "--to", self.to, *args], capture_output=True,
                              text=True, timeout=timeout)

    def requests(self, path):
        with open(self.log) as f:
            return [r for r in map(json.loads, f) if r["path"] == path]

    def read(self, name):
        with open(os.path.join(self.to, name), "rb") as f:
            return f.read()

    def listing(self):
        return sorted(os.listdir(self.to))

    def test_full_download_records_the_hash_on_first_use(self):
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read("corpus.txt"), self.files["corpus.txt"])
        sha = hashlib.sha256(self.files["corpus.txt"]).hexdigest()
        self.assertEqual(self.read("corpus.txt.sha256").decode(), f"{sha}  corpus.txt\n")
        self.assertIn("trust on first use", p.stderr)
        self.assertEqual(self.listing(), ["corpus.txt", "corpus.txt.sha256"])
        # Fetching again verifies the file in place against the record, without a request.
        n = len(self.requests("/ok/corpus.txt"))
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("already present, sha256 verified against the record", p.stderr)
        self.assertEqual(len(self.requests("/ok/corpus.txt")), n)

    def test_later_download_is_checked_against_the_record(self):
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        os.remove(os.path.join(self.to, "corpus.txt"))
        # Other bytes under the same name: the record made by the first download refuses them.
        p = self.fetch("-q", "--url", f"{self.base}/ok/other.txt", "--name", "corpus.txt")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("sha256 mismatch", p.stderr)
        self.assertIn("corpus.txt.sha256 made by its first download", p.stderr)
        self.assertEqual(self.listing(), ["corpus.txt.sha256"])

    def test_resume_after_a_cut(self):
        url = f"{self.base}/cut/corpus.txt"
        p = self.fetch("-q", "--url", url)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("connection was cut", p.stderr)
        self.assertIn("run the same command to resume", p.stderr)
        self.assertEqual(self.listing(), ["corpus.txt.part"])
        self.assertEqual(os.path.getsize(os.path.join(self.to, "corpus.txt.part")), CUT)
        p = self.fetch("-q", "--url", url)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read("corpus.txt"), self.files["corpus.txt"])
        reqs = self.requests("/cut/corpus.txt")
        self.assertEqual(reqs[-1]["range"], f"bytes={CUT}-")
        self.assertEqual(reqs[-1]["status"], 206)
        self.assertEqual(self.listing(), ["corpus.txt", "corpus.txt.sha256"])

    def test_server_without_range_support_restarts_the_part(self):
        with open(os.path.join(self.to, "corpus.txt.part"), "wb") as f:
            f.write(self.files["corpus.txt"][:1000])
        p = self.fetch("--url", f"{self.base}/norange/corpus.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read("corpus.txt"), self.files["corpus.txt"])
        reqs = self.requests("/norange/corpus.txt")
        self.assertEqual([r["range"] for r in reqs[-2:]], ["bytes=1000-", None])
        self.assertIn("the server cannot resume; downloading from the start", p.stderr)

    def test_complete_part_is_verified_and_kept(self):
        # A run cut after the last byte left a whole part: the server answers 416 to the resume
        # and verification decides.
        with open(os.path.join(self.to, "corpus.txt.part"), "wb") as f:
            f.write(self.files["corpus.txt"])
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(self.read("corpus.txt"), self.files["corpus.txt"])
        self.assertEqual(self.requests("/ok/corpus.txt")[-1]["status"], 416)

    def test_hash_mismatch_leaves_no_file(self):
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt", "--sha256", "0" * 64)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("sha256 mismatch", p.stderr)
        self.assertIn("expected " + "0" * 64 + " (from --sha256)", p.stderr)
        self.assertEqual(self.listing(), [])

    def test_pinned_hash_accepts_the_right_bytes(self):
        sha = hashlib.sha256(self.files["corpus.txt"]).hexdigest()
        p = self.fetch("-q", "--url", f"{self.base}/ok/corpus.txt", "--sha256", sha.upper())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("sha256 verified against --sha256", p.stderr)
        self.assertEqual(self.listing(), ["corpus.txt"])

    def test_404(self):
        p = self.fetch("-q", "--url", f"{self.base}/ok/missing.txt")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("HTTP 404", p.stderr)
        self.assertEqual(self.listing(), [])

    def test_stalled_server_ends_in_an_error(self):
        p = self.fetch("-q", "--url", f"{self.base}/stall/corpus.txt", "--low-speed-time", "2",
                       "--low-speed-limit", "1000", timeout=90)
        self.assertEqual(p.returncode, 5, p.stderr)
        self.assertIn("stalled", p.stderr)
        self.assertIn("--low-speed-time", p.stderr)
        # What arrived is kept for a resume; nothing has the final name.
        self.assertEqual(self.listing(), ["corpus.txt.part"])

    def test_bad_arguments_name_what_is_wrong(self):
        p = self.fetch("nosuchset")
        self.assertEqual(p.returncode, 2)
        self.assertIn('unknown data set "nosuchset" (known: tinystories', p.stderr)
        p = self.fetch("--url", f"{self.base}/ok/corpus.txt", "--sha256", "abc")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--sha256 must be 64 hex digits", p.stderr)

    def test_tinystories_from_a_mirror(self):
        p = self.fetch("tinystories", "--base-url", f"{self.base}/ok")
        self.assertEqual(p.returncode, 0, p.stderr)
        for name in ("TinyStoriesV2-GPT4-train.txt", "TinyStoriesV2-GPT4-valid.txt"):
            self.assertEqual(self.read(name), self.files[name])
            self.assertTrue(os.path.exists(os.path.join(self.to, name + ".sha256")))
        # The progress bar's last line: percentage, rate and ETA.
        self.assertRegex(p.stderr, r"TinyStoriesV2-GPT4-train.txt \[=+\] 100% .*/s  ETA ")
        self.assertIn("no sha256 is pinned", p.stderr)


if __name__ == "__main__":
    unittest.main()
