#!/usr/bin/env python3
"""The container files agree with each other and with the docs (issue #15, Containers):

- every build context ignore file (the root .dockerignore the classic builder reads, and each
  deploy/docker/<Dockerfile>.dockerignore BuildKit reads) excludes data/ (the training text) and
  deploy/tls/out/ (the private CA key), and the build and cache directories;
- Prometheus finds each replica of the compose worker service through DNS (dns_sd_configs on
  the compose service name and the port the compose worker listens on), and no static target
  names the service (that would scrape one replica at a time);
- every image creates user and group `ablate` with the uid and gid the docs promise, and the
  docs promise one id.
Standard library only (PyYAML is not assumed); the YAML is read with simple, strict patterns.
"""
import os
import re
import sys
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCKER = os.path.join(REPO, "deploy", "docker")
DOCKERFILES = sorted(f for f in os.listdir(DOCKER) if f.endswith(".Dockerfile"))
REQUIRED_IGNORES = {"data", "deploy/tls/out", ".git", "build"}


def read(*parts):
    with open(os.path.join(REPO, *parts)) as f:
        return f.read()


def ignore_entries(text):
    return {l.strip().rstrip("/") for l in text.splitlines()
            if l.strip() and not l.strip().startswith("#")}


def job_block(prom, job):
    """The text of one scrape job in prometheus.yml, up to the next job."""
    m = re.search(r"^  - job_name: %s\n(.*?)(?=^  - job_name:|\Z)" % re.escape(job), prom,
                  re.M | re.S)
    return m.group(1) if m else None


class ContainerFiles(unittest.TestCase):
    def test_there_are_three_images(self):
        self.assertEqual(DOCKERFILES,
                         ["server.Dockerfile", "worker-cpu.Dockerfile", "worker-cuda.Dockerfile"])

    def test_every_context_ignore_file_excludes_data_and_the_ca_key(self):
        files = [".dockerignore"] + [os.path.join("deploy", "docker", d + ".dockerignore")
                                     for d in DOCKERFILES]
        for f in files:
            with self.subTest(file=f):
                self.assertTrue(os.path.exists(os.path.join(REPO, f)), f"{f} is missing")
                missing = REQUIRED_IGNORES - ignore_entries(read(f))
                self.assertEqual(missing, set(), f"{f} does not exclude {sorted(missing)}")

    def test_the_ca_key_and_data_are_where_the_ignores_say(self):
        # The ignore entries must name the directories the tools write and read.
        self.assertRegex(read("deploy", "tls", "make-certs.sh"), r'out="\$\(cd "\$\(dirname "\$0"\)" && pwd\)/out"')
        self.assertIn("ABLATE_DATA_DIR:-./data", read("docker-compose.yml"))

    def test_prometheus_discovers_each_compose_worker_replica_by_dns(self):
        prom = read("deploy", "prometheus", "prometheus.yml")
        block = job_block(prom, "ablate-worker")
        self.assertIsNotNone(block, "prometheus.yml has no ablate-worker job")
        compose = read("docker-compose.yml")
        self.assertRegex(compose, r"(?m)^  ablate-worker:$", "compose has no ablate-worker service")
        port = re.search(r"--metrics-listen 0\.0\.0\.0:(\d+)", compose).group(1)
        m = re.search(r"dns_sd_configs:\n\s+- names: \[([^\]]*)\]\n((?:\s+\w+: .*\n)*)", block)
        self.assertIsNotNone(m, "the ablate-worker job has no dns_sd_configs entry")
        self.assertEqual([n.strip() for n in m.group(1).split(",")], ["ablate-worker"])
        opts = dict(re.findall(r"(\w+): (\S+)", m.group(2)))
        self.assertEqual(opts.get("type"), "A", "A records: one per replica")
        self.assertEqual(opts.get("port"), port, "the port the compose worker's /metrics listens on")
        # No static target through the service name (one replica per scrape).
        targets = "".join(read("deploy", "prometheus", "targets", f)
                          for f in os.listdir(os.path.join(REPO, "deploy", "prometheus", "targets")))
        self.assertNotRegex(re.sub(r"(?m)#.*$", "", targets), r"ablate-worker:\d+")
        self.assertNotIn("static_configs", block)

    def test_images_use_the_uid_and_gid_the_docs_promise(self):
        promised = set()
        for doc in ("README.md", os.path.join("docs", "deploy.md")):
            promised |= set(re.findall(r"uid and gid (\d+)", read(doc)))
        self.assertEqual(len(promised), 1, f"the docs promise one uid and gid, not {promised}")
        uid = promised.pop()
        for d in DOCKERFILES:
            with self.subTest(dockerfile=d):
                text = read("deploy", "docker", d)
                self.assertRegex(text, r"groupadd [^\n]*--gid %s ablate" % uid)
                self.assertRegex(text, r"useradd [^\n]*--uid %s --gid %s " % (uid, uid))
                # --user-group would pick the next free system gid (999), not the promised one.
                self.assertNotIn("--user-group", text)
        for doc in ("README.md", os.path.join("docs", "deploy.md")):
            for owner in re.findall(r"chown (\d+)(?::(\d+))? deploy/tls/out", read(doc)):
                self.assertEqual(owner[0], uid, doc)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1] + sys.argv[1:], verbosity=2)
