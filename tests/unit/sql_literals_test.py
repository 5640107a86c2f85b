#!/usr/bin/env python3
"""No SQL text in the server's code: every statement is a named file in server/store/sql/.

Scans the string literals of server/**/*.{cc,h} (comments skipped, raw strings included) for the
start of an SQL statement and fails naming each file:line. Store code runs statements by name
(pg::Exec(tx, "lease", ...)); the SQL goes in server/store/sql/<name>.sql (CONTRIBUTING.md).

Usage: sql_literals_test.py [SOURCE_DIR]   (default: $ABLATE_SOURCE_DIR, else the checkout)
"""
import os
import pathlib
import re
import sys

# What begins (or clearly is) an SQL statement. Upper case as the project writes SQL, plus the
# unmistakable two-word forms in any case; a lone lower-case "update" in a message is prose.
SQL = re.compile(
    r"\b(SELECT|INSERT|UPDATE|DELETE|MERGE|TRUNCATE|ANALYZE|VACUUM|LISTEN|NOTIFY|COPY|"
    r"CREATE|ALTER|DROP|GRANT|REVOKE|EXPLAIN|PREPARE)\b"
    r"|(?i:\bselect\b.*\bfrom\b|\binsert\s+into\b|\bupdate\s+\w+\s+set\b|\bdelete\s+from\b"
    r"|\bwith\s+\w+\s+as\s*\(|\bpg_\w+\s*\()")


def literals(text):
    """Yields (line, literal) for each string literal of C++ source `text`."""
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
        elif c == "'":  # a character literal ('"' must not open a string)
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif c == "R" and text.startswith('R"', i) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            open_paren = text.find("(", i + 2)
            delim = text[i + 2:open_paren]
            close = text.find(")" + delim + '"', open_paren)
            close = n if close < 0 else close
            yield line, text[open_paren + 1:close]
            line += text.count("\n", i, close)
            i = close + len(delim) + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"' and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            yield line, text[i + 1:j]
            i = j + 1
        else:
            i += 1


def offenders(path, text):
    for line, lit in literals(text):
        if SQL.search(lit):
            yield f"{path}:{line}: SQL in a string literal: \"{lit[:70]}\""


def self_test():
    bad = 'int f() { Exec(tx, "SELECT 1 FROM runs " "WHERE id = $1"); }\n'
    raw = 'auto q = R"x(\n  update runs set state = 1)x";\n'
    ok = ('// SELECT in a comment\n/* INSERT INTO t */ char q = \'"\';\n'
          'Error("select a sweep by id or name"); Exec(tx, "lease");\n')
    assert len(list(offenders("bad", bad))) == 1, "missed an ad-hoc SELECT"
    assert len(list(offenders("raw", raw))) == 1, "missed SQL in a raw string"
    assert not list(offenders("ok", ok)), list(offenders("ok", ok))


def main():
    self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                        os.environ.get("ABLATE_SOURCE_DIR", pathlib.Path(__file__).parents[2]))
    files = sorted(p for ext in ("*.cc", "*.h") for p in (root / "server").rglob(ext))
    if not files:
        print(f"no sources under {root / 'server'}", file=sys.stderr)
        return 2
    found = [o for p in files for o in offenders(p.relative_to(root), p.read_text())]
    for o in found:
        print(o, file=sys.stderr)
    if found:
        print("\nSQL goes in server/store/sql/<name>.sql, run with pg::Exec(tx, \"<name>\", ...) "
              "(CONTRIBUTING.md)", file=sys.stderr)
        return 1
    print(f"{len(files)} files under server/: no SQL in string literals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
