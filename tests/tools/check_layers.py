#!/usr/bin/env python3
"""Checks that #include dependencies point down the layers of docs/ARCHITECTURE.md.

Modules, bottom to top: ptc/base < ptc (the partition math) < ptc/formats, ptc/planner < fs, transport
< client (the client SDK, libptcfs_client) < daemon/store, daemon/direct < daemon/dataset < daemon/reshard
< daemon/save < daemon/change < daemon/durable < daemon/cluster, daemon/control < daemon (main.cc, the node, its config); cli uses
the four ptc libraries
and transport only. ptc/formats and ptc/planner do not see each other, and ptc/planner is for cli
alone (no other module may include it). client is the client library's own: neither the daemon nor
cli may include it (both halves of the direct socket share transport/direct_protocol.h instead), and
it includes only what it links: ptc/base, ptc and transport/direct_protocol.h.
A file may include its own layer and those below it, never one above. Prints every violation
(file:line and the include) and exits 1 if there is any.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RANK = {
    "ptc/base": 0,
    "ptc": 1,
    "ptc/formats": 2,
    "ptc/planner": 2,
    "fs": 3,
    "transport": 3,
    "client": 3.5,
    "daemon/store": 4,
    "daemon/direct": 4,
    "daemon/dataset": 5,
    "daemon/reshard": 6,
    "daemon/save": 7,
    "daemon/change": 8,
    "daemon/durable": 8.5,
    "daemon/cluster": 9,
    "daemon/control": 9,
    "daemon": 10,
}
# Modules of the same rank that must not see each other.
SIBLINGS_APART = {("fs", "transport"), ("transport", "fs"), ("ptc/formats", "ptc/planner"), ("ptc/planner", "ptc/formats")}
# Modules only cli (and the module itself) may include.
CLI_ONLY = {"ptc/planner"}
# Modules nobody else includes: the client SDK is a product of its own, not a part of the daemon.
OWN_ONLY = {"client"}
CLI_MAY_USE = {"ptc/base", "ptc", "ptc/formats", "ptc/planner", "transport", "cli"}
# The client library links only ptc/base, the partition math and the direct socket's protocol:
# it may include those and nothing else below it.
CLIENT_MAY_USE = {"ptc/base", "ptc", "client"}
CLIENT_MAY_INCLUDE = {"transport/direct_protocol.h"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def module_of(path):
    parts = path.split("/")
    if parts[0] in ("daemon", "ptc") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def main():
    bad = []
    for top in ("ptc", "fs", "transport", "client", "daemon", "cli"):
        root = os.path.join(REPO, top)
        if not os.path.isdir(root):
            continue
        for dirpath, _, files in os.walk(root):
            for name in files:
                if not name.endswith((".h", ".cc")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), REPO)
                mine = module_of(rel)
                with open(os.path.join(REPO, rel)) as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m or "/" not in m.group(1):
                            continue
                        theirs = module_of(m.group(1))
                        if theirs not in RANK:
                            continue
                        if mine == "cli":
                            ok = theirs in CLI_MAY_USE
                        elif mine == "client":
                            ok = theirs in CLIENT_MAY_USE or m.group(1) in CLIENT_MAY_INCLUDE
                        else:
                            ok = RANK[theirs] <= RANK[mine] and (mine, theirs) not in SIBLINGS_APART
                            if (theirs in CLI_ONLY or theirs in OWN_ONLY) and theirs != mine:
                                ok = False
                            if RANK[theirs] == RANK[mine] and theirs != mine and mine.startswith("daemon/"):
                                ok = False
                        if not ok:
                            bad.append(f"{rel}:{lineno}: {mine} includes {m.group(1)} ({theirs} is not below it)")
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} include(s) point up the layers")
        return 1
    print("layers: every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
