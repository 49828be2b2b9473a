"""A network namespace joined to this host by a veth pair, for a node that can be cut off
from the others (a partition) and joined again. The host end is 10.201.R.1, the namespace
end 10.201.R.2; processes enter it with `wrap` (nsenter of the network namespace alone, so
FUSE mounts stay visible to the tests)."""

import os
import random
import subprocess
from typing import List

import pytest


def _ip(*args: str, ns: str = "") -> None:
    cmd = ["ip", *(["netns", "exec", ns, "ip"] if ns else []), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        pytest.fail(f"{' '.join(cmd)}: {r.stderr.strip()}", pytrace=False)


class NetNs:
    def __init__(self):
        tag = f"{os.getpid() % 100000}{random.randrange(100)}"
        self.name = f"ptcfs{tag}"
        self.host_if, self.ns_if = f"ph{tag}", f"pn{tag}"
        used = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
        free = [r for r in range(1, 250) if f"10.201.{r}." not in used]
        r = random.choice(free)
        self.host_addr, self.ns_addr = f"10.201.{r}.1", f"10.201.{r}.2"

    @property
    def wrap(self) -> List[str]:
        return ["nsenter", f"--net=/var/run/netns/{self.name}"]

    def __enter__(self):
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            _ip("link", "set", self.ns_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_addr}/24", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("addr", "add", f"{self.ns_addr}/24", "dev", self.ns_if, ns=self.name)
            _ip("link", "set", self.ns_if, "up", ns=self.name)
            _ip("link", "set", "lo", "up", ns=self.name)
        except BaseException:
            self.__exit__()
            raise
        return self

    def partition(self) -> None:
        """Cuts the namespace off: packets from the host to it are lost (connections time out), and
        it finds the network unreachable; its own addresses still answer inside it."""
        _ip("link", "set", self.ns_if, "down", ns=self.name)

    def heal(self) -> None:
        _ip("link", "set", self.ns_if, "up", ns=self.name)

    def __exit__(self, *exc):
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)  # the veth pair goes too
