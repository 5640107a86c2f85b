#!/usr/bin/env python3
"""Syntax and consistency check for Dockerfiles, standing in for hadolint (not installable here).

  check_dockerfiles.py [--context DIR] DOCKERFILE...

For each file: every instruction is a real Dockerfile instruction; the first one (after global
ARGs) is FROM; stage names are unique; `FROM stage` and `COPY --from=stage` name an earlier
stage (or are image references); ARGs used in FROM are declared before the first FROM; exec-form
(JSON) CMD/ENTRYPOINT/HEALTHCHECK/VOLUME parse as arrays of strings; COPY/ADD sources without
--from exist in the build context (default: the repository root); EXPOSE takes ports; there are
at least two stages and the final stage switches to a non-root USER.
Prints each problem as FILE:LINE: message and exits 1 if there is any. Standard library only.
"""

import argparse
import glob
import json
import os
import re
import shlex
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTRUCTIONS = {"FROM", "RUN", "CMD", "LABEL", "MAINTAINER", "EXPOSE", "ENV", "ADD", "COPY",
                "ENTRYPOINT", "VOLUME", "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL",
                "HEALTHCHECK", "SHELL"}
VAR_RE = re.compile(r"\$\{?(\w+)")


def logical_lines(text):
    """Yields (first physical line number, instruction text) with continuations joined and
    comments dropped. Heredocs are not used in our Dockerfiles and are reported as unknown."""
    buf, start = [], None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.rstrip()
        stripped = line.lstrip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continuation are ignored by Docker
        if start is None:
            start = n
        if line.endswith("\\"):
            buf.append(line[:-1])
            continue
        buf.append(line)
        yield start, " ".join(part.strip() for part in buf if part.strip())
        buf, start = [], None
    if buf:
        yield start, " ".join(buf) + " \\"  # dangling continuation, reported by the caller


def split_flags(args):
    """'--from=build --chown=a b c' -> ({'from': 'build', 'chown': 'a'}, ['b', 'c'])."""
    flags, rest = {}, []
    words = args.split()
    i = 0
    while i < len(words) and words[i].startswith("--"):
        key, _, value = words[i][2:].partition("=")
        flags[key] = value
        i += 1
    rest = words[i:]
    return flags, rest


def check_json_array(where, args, errors):
    if not args.lstrip().startswith("["):
        return
    try:
        value = json.loads(args)
    except json.JSONDecodeError as e:
        errors.append(f"{where}: exec form is not valid JSON: {e.msg}")
        return
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value) or not value:
        errors.append(f"{where}: exec form must be a non-empty JSON array of strings")


def check_file(path, context):
    errors = []
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        return [f"{path}: {e}"]
    global_args, stages, seen_from = set(), [], False
    stage_users = {}
    for line_no, inst in logical_lines(text):
        where = f"{path}:{line_no}"
        if inst.endswith(" \\"):
            errors.append(f"{where}: line continuation runs into the end of the file")
            continue
        keyword, _, args = inst.partition(" ")
        kw = keyword.upper()
        args = args.strip()
        if kw not in INSTRUCTIONS:
            errors.append(f"{where}: unknown instruction {keyword!r}")
            continue
        if keyword != kw:
            errors.append(f"{where}: write instructions in upper case ({kw})")
        if not args:
            errors.append(f"{where}: {kw} needs arguments")
            continue
        if not seen_from and kw not in ("FROM", "ARG"):
            errors.append(f"{where}: {kw} before the first FROM (only ARG may precede it)")
        if kw == "ARG":
            name = args.split("=", 1)[0].strip()
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                errors.append(f"{where}: ARG name {name!r} is invalid")
            if not seen_from:
                global_args.add(name)
        elif kw == "FROM":
            seen_from = True
            flags, words = split_flags(args)
            if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
                errors.append(f"{where}: expected FROM [--platform=P] IMAGE [AS NAME]")
                continue
            image = words[0]
            for var in VAR_RE.findall(image):
                if var not in global_args:
                    errors.append(f"{where}: FROM uses ${var}, which no ARG before the first FROM declares")
            if not VAR_RE.search(image) and not re.fullmatch(r"[a-z0-9][a-z0-9._/:@-]*", image):
                errors.append(f"{where}: {image!r} is not an image reference")
            name = words[2].lower() if len(words) == 3 else None
            if name and name in [s for s, _ in stages]:
                errors.append(f"{where}: stage name {name!r} is used twice")
            stages.append((name, line_no))
        elif kw in ("COPY", "ADD"):
            flags, words = split_flags(args)
            if args.lstrip().startswith("["):
                check_json_array(where, args, errors)
                continue
            if len(words) < 2:
                errors.append(f"{where}: {kw} needs at least one source and a destination")
                continue
            src_stage = flags.get("from")
            if src_stage is not None:
                earlier = [s for s, _ in stages[:-1]]
                is_index = src_stage.isdigit() and int(src_stage) < len(stages) - 1
                looks_like_image = "/" in src_stage or ":" in src_stage
                if src_stage.lower() not in earlier and not is_index and not looks_like_image:
                    errors.append(f"{where}: --from={src_stage} names no earlier stage")
                continue
            for src in words[:-1]:
                if kw == "ADD" and re.match(r"https?://", src):
                    continue
                if not glob.glob(os.path.join(context, src)):
                    errors.append(f"{where}: {kw} source {src!r} does not exist in {context}")
        elif kw in ("CMD", "ENTRYPOINT", "VOLUME", "SHELL"):
            check_json_array(where, args, errors)
            if kw == "SHELL" and not args.startswith("["):
                errors.append(f"{where}: SHELL takes the JSON form only")
        elif kw == "HEALTHCHECK":
            flags, words = split_flags(args)
            for key in flags:
                if key not in ("interval", "timeout", "start-period", "start-interval", "retries"):
                    errors.append(f"{where}: unknown HEALTHCHECK option --{key}")
            if not words or words[0].upper() not in ("CMD", "NONE"):
                errors.append(f"{where}: HEALTHCHECK needs CMD ... or NONE")
            elif words[0].upper() == "CMD":
                check_json_array(where, args.split(None, len(flags) + 1)[-1] if len(words) > 1 else "", errors)
        elif kw == "EXPOSE":
            for port in args.split():
                if not re.fullmatch(r"\d{1,5}(/(tcp|udp))?", port):
                    errors.append(f"{where}: EXPOSE {port!r} is not PORT[/tcp|udp]")
        elif kw == "ENV":
            try:
                words = shlex.split(args)
            except ValueError as e:
                errors.append(f"{where}: ENV does not parse: {e}")
                continue
            if "=" in words[0]:
                bad = [w for w in words if "=" not in w]
                if bad:
                    errors.append(f"{where}: ENV mixes KEY=VALUE with {bad[0]!r}")
        elif kw == "USER":
            if stages:
                stage_users[len(stages) - 1] = args.split(":")[0]
    if not stages:
        errors.append(f"{path}: no FROM instruction")
        return errors
    if len(stages) < 2:
        errors.append(f"{path}: single stage; build and runtime should be separate stages")
    final_user = stage_users.get(len(stages) - 1)
    if final_user is None or final_user in ("root", "0"):
        errors.append(f"{path}: the final stage must switch to a non-root USER")
    return errors


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--context", default=REPO, help="build context (default: repository root)")
    ap.add_argument("dockerfiles", nargs="+")
    args = ap.parse_args(argv)
    errors = []
    for path in args.dockerfiles:
        errors += check_file(path, args.context)
    if errors:
        print(*errors, sep="\n", file=sys.stderr)
        return 1
    print(f"ok: {len(args.dockerfiles)} Dockerfiles")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
