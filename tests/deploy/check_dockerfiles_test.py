#!/usr/bin/env python3
"""The repository's Dockerfiles pass check_dockerfiles.py, and the checker rejects each kind of
mistake it claims to catch (one broken copy of a valid Dockerfile per case)."""

import glob
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_dockerfiles  # noqa: E402

REPO = check_dockerfiles.REPO
VALID = """# syntax=docker/dockerfile:1
ARG BASE=debian:bookworm-slim
FROM ${BASE} AS build
COPY scripts/install-deps scripts/install-deps
RUN echo building \\
    && echo more
FROM ${BASE} AS runtime
COPY --from=build /usr/bin/true /usr/local/bin/
RUN useradd --system app
USER app
EXPOSE 7070 9464/tcp
ENV A=1 B="two words"
HEALTHCHECK --interval=10s --timeout=3s CMD curl -fsS http://127.0.0.1:9464/metrics || exit 1
ENTRYPOINT ["app"]
CMD ["serve", "--listen", "127.0.0.1:7070"]
"""


class CheckDockerfilesTest(unittest.TestCase):
    def check(self, text):
        with tempfile.NamedTemporaryFile("w", suffix=".Dockerfile", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        return check_dockerfiles.check_file(f.name, REPO)

    def assert_rejects(self, text, fragment):
        errors = self.check(text)
        self.assertTrue(any(fragment in e for e in errors), f"expected {fragment!r} in {errors}")

    def test_repository_dockerfiles_pass(self):
        files = sorted(glob.glob(os.path.join(REPO, "deploy", "docker", "*.Dockerfile")))
        self.assertEqual(len(files), 3, files)
        for path in files:
            self.assertEqual(check_dockerfiles.check_file(path, REPO), [], path)

    def test_valid_example_passes(self):
        self.assertEqual(self.check(VALID), [])

    def test_unknown_instruction(self):
        self.assert_rejects(VALID.replace("RUN useradd", "RUNN useradd"), "unknown instruction 'RUNN'")

    def test_instruction_before_from(self):
        self.assert_rejects("RUN true\n" + VALID, "RUN before the first FROM")

    def test_undeclared_from_arg(self):
        self.assert_rejects(VALID.replace("ARG BASE=debian:bookworm-slim\n", ""),
                            "no ARG before the first FROM declares")

    def test_copy_from_unknown_stage(self):
        self.assert_rejects(VALID.replace("--from=build", "--from=builder"),
                            "--from=builder names no earlier stage")

    def test_copy_source_missing(self):
        self.assert_rejects(VALID.replace("COPY scripts/install-deps", "COPY scripts/no-such-file"),
                            "source 'scripts/no-such-file' does not exist")

    def test_duplicate_stage_name(self):
        self.assert_rejects(VALID.replace("AS runtime", "AS build"), "stage name 'build' is used twice")

    def test_bad_exec_form(self):
        self.assert_rejects(VALID.replace('CMD ["serve", "--listen"', 'CMD ["serve" "--listen"'),
                            "exec form is not valid JSON")

    def test_root_final_user(self):
        self.assert_rejects(VALID.replace("USER app", "USER root"), "non-root USER")

    def test_missing_user(self):
        self.assert_rejects(VALID.replace("USER app\n", ""), "non-root USER")

    def test_single_stage(self):
        text = "FROM debian:bookworm-slim\nUSER nobody\nCMD [\"true\"]\n"
        self.assert_rejects(text, "single stage")

    def test_bad_expose(self):
        self.assert_rejects(VALID.replace("EXPOSE 7070", "EXPOSE http"), "EXPOSE 'http'")

    def test_bad_healthcheck_option(self):
        self.assert_rejects(VALID.replace("--interval=10s", "--every=10s"), "unknown HEALTHCHECK option --every")

    def test_dangling_continuation(self):
        self.assert_rejects(VALID + "RUN echo \\\n", "runs into the end of the file")

    def test_error_names_line(self):
        errors = self.check(VALID.replace("RUN useradd", "RUNN useradd"))
        self.assertTrue(any(":9: " in e for e in errors), errors)


if __name__ == "__main__":
    unittest.main()
