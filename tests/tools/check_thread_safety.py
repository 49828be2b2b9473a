#!/usr/bin/python3
"""Runs clang's thread-safety analysis over the sources whose lock rules are annotated
(ptc/base/mutex.h: PTC_GUARDED_BY, PTC_REQUIRES), with the flags the build used for them.

    check_thread_safety.py BUILD_DIR

Reads BUILD_DIR/compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS), compiles each annotated
source with clang++ -fsyntax-only -Wthread-safety, and exits 1 on any finding (printing it),
2 when clang++ or the compile database is missing. Only thread-safety findings fail: other
warnings are the build's business.
"""
import json
import os
import shlex
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The sources that use annotated mutexes (every file that touches an annotated member must be
# here, or its uses go unchecked).
ANNOTATED = ["daemon/save/"]


def flags_for(entry):
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c"):
            skip = a == "-o"
            continue
        if a == entry["file"] or a.startswith("-W") or a.startswith("-O") or a == "-g":
            continue
        out.append(a)
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    db_path = os.path.join(sys.argv[1], "compile_commands.json")
    clang = os.environ.get("CLANGXX", "clang++")
    try:
        db = json.load(open(db_path))
    except OSError as e:
        print(f"check_thread_safety: {e}", file=sys.stderr)
        return 2
    wanted = [e for e in db if any(os.path.relpath(e["file"], ROOT).startswith(p) for p in ANNOTATED)]
    if not wanted:
        print(f"check_thread_safety: no annotated source in {db_path}", file=sys.stderr)
        return 2
    # The analysis must be live: a read of a guarded member without its lock is a finding.
    probe = ('#include "ptc/base/mutex.h"\n'
             "struct P { ptcfs::Mutex mu; int n PTC_GUARDED_BY(mu) = 0; };\n"
             "int read_unlocked(P& p) { return p.n; }\n")
    try:
        r = subprocess.run([clang, "-x", "c++", "-std=c++20", "-fsyntax-only", "-Wthread-safety",
                            "-Werror=thread-safety", "-I", ROOT, "-"], input=probe, capture_output=True, text=True)
    except FileNotFoundError:
        print(f"check_thread_safety: {clang} not found (Debian package clang)", file=sys.stderr)
        return 2
    if r.returncode == 0 or "requires holding mutex" not in r.stderr:
        print("check_thread_safety: the analysis did not flag a known-bad probe:\n" + r.stderr, file=sys.stderr)
        return 2
    failed = 0
    for e in sorted(wanted, key=lambda e: e["file"]):
        cmd = [clang, "-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Wthread-safety-beta",
               "-Werror=thread-safety", "-Werror=thread-safety-beta"] + flags_for(e) + [e["file"]]
        try:
            r = subprocess.run(cmd, cwd=e.get("directory", ROOT), capture_output=True, text=True)
        except FileNotFoundError:
            print(f"check_thread_safety: {clang} not found (Debian package clang)", file=sys.stderr)
            return 2
        if r.returncode != 0:
            failed += 1
            sys.stdout.write(r.stdout + r.stderr)
    print(f"check_thread_safety: {len(wanted)} sources, {failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
