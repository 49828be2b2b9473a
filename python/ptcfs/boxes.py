"""The plan of a live mesh change of arbitrary boxes (docs/PYTHON.md "Live mesh change for
DTensors"): pure planning, no torch.

Each tensor is held as boxes (``(offsets, sizes)`` of its global index space) by the ranks of
the old mesh and wanted as boxes by the ranks of the new one, as DTensor placements give them
(``Shard(d)`` on any mesh dimension, uneven chunks, ``Replicate()``: several ranks holding the same
box). ``plan`` cuts each wanted box into cells along every edge of the held boxes inside it; a
cell the rank holds itself is copied in place, any other is sent once by one of its holders (the
one that has sent least so far, then the lowest rank, so replicas share the sending). So every
rank receives exactly the bytes of its new boxes it does not hold: the minimum. Cells of one
source that are neighbours along a dimension are merged into larger boxes.
"""

from __future__ import annotations

from itertools import product
from typing import Dict, List, Optional, Sequence, Tuple

Box = Tuple[Tuple[int, ...], Tuple[int, ...]]  # (offsets, sizes)

__all__ = ["Box", "plan", "volume", "intersect"]


def volume(box: Box) -> int:
    n = 1
    for s in box[1]:
        n *= s
    return n


def intersect(a: Box, b: Box) -> Optional[Box]:
    """The common box of a and b, or None when they do not overlap (or one is empty)."""
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0]))
    hi = tuple(min(x + s, y + t) for x, s, y, t in zip(a[0], a[1], b[0], b[1]))
    if any(h <= l for l, h in zip(lo, hi)) or volume(a) == 0 or volume(b) == 0:
        return None
    return lo, tuple(h - l for l, h in zip(lo, hi))


def _contains(outer: Box, inner: Box) -> bool:
    return all(o <= i and i + t <= o + s for o, s, i, t in zip(outer[0], outer[1], inner[0], inner[1]))


def _cells(want: Box, held: Sequence[Box]) -> List[Box]:
    """`want` cut along every edge of the `held` boxes that falls inside it."""
    cuts = []
    for d, (o, s) in enumerate(zip(*want)):
        edges = {o, o + s}
        for h in held:
            for e in (h[0][d], h[0][d] + h[1][d]):
                if o < e < o + s:
                    edges.add(e)
        e = sorted(edges)
        cuts.append(list(zip(e[:-1], e[1:])))
    return [(tuple(a for a, _ in c), tuple(b - a for a, b in c)) for c in product(*cuts)]


def _merge(boxes: List[Box]) -> List[Box]:
    """Disjoint boxes of one source merged where two are neighbours along a dimension and equal in
    the others (the cells of a grid: this finds the large boxes)."""
    at = {b[0]: b for b in boxes}  # disjoint: one box per offset
    dims = len(boxes[0][0]) if boxes else 0
    changed = True
    while changed:
        changed = False
        for d in range(dims):
            for off in sorted(at):
                b = at.get(off)
                if b is None:
                    continue
                while True:
                    nxt = list(b[0])
                    nxt[d] += b[1][d]
                    nb = at.get(tuple(nxt))
                    if nb is None or any(nb[1][k] != b[1][k] for k in range(dims) if k != d):
                        break
                    size = list(b[1])
                    size[d] += nb[1][d]
                    del at[nb[0]]
                    b = (b[0], tuple(size))
                    at[off] = b
                    changed = True
    return sorted(at.values())


def plan(held: Dict[str, Dict[int, Box]], wanted: Dict[str, Dict[int, Box]],
         itemsize: Dict[str, int]) -> dict:
    """The moves that give every rank its wanted boxes from the held ones.

    ``held[t][r]`` / ``wanted[t][r]``: rank r's box of tensor t before and after (a rank without
    one is absent); ``itemsize[t]``: bytes per element. Returns {"moves": [{"tensor", "src_rank",
    "dst_rank", "src", "dst", "bytes"}], "ranks": {r: {"min", "sent", "received"}}} with regions
    as {"start", "shape"} relative to the source's and destination's own boxes (what
    ptcfs.live.run_moves takes), ``min`` the bytes rank r lacks of its new boxes (its wanted boxes
    less what it holds of them: what any plan must bring it). Raises
    ValueError naming the tensor and rank when some cell of a wanted box is held by no rank."""
    moves: List[dict] = []
    ranks: Dict[int, Dict[str, int]] = {}
    load: Dict[int, int] = {}

    def stat(r: int) -> Dict[str, int]:
        return ranks.setdefault(r, {"min": 0, "sent": 0, "received": 0})

    for t in sorted(wanted):
        holders = held.get(t, {})
        size = itemsize[t]
        for dst in sorted(wanted[t]):
            want = wanted[t][dst]
            if volume(want) == 0:
                stat(dst)
                continue
            boxes = [b for b in holders.values() if intersect(b, want)]
            by_src: Dict[int, List[Box]] = {}
            for cell in _cells(want, boxes):
                owners = sorted(r for r, b in holders.items() if volume(b) and _contains(b, cell))
                if not owners:
                    raise ValueError(f"tensor '{t}': rank {dst} wants elements at {list(cell[0])} that no rank "
                                     f"holds")
                src = dst if dst in owners else min(owners, key=lambda r: (load.get(r, 0), r))
                if src != dst:
                    load[src] = load.get(src, 0) + volume(cell) * size
                by_src.setdefault(src, []).append(cell)
            for src in sorted(by_src):
                for box in _merge(by_src[src]):
                    nbytes = volume(box) * size
                    sbox = holders[src]
                    moves.append({
                        "tensor": t, "src_rank": src, "dst_rank": dst, "bytes": nbytes,
                        "src": {"start": [a - b for a, b in zip(box[0], sbox[0])], "shape": list(box[1])},
                        "dst": {"start": [a - b for a, b in zip(box[0], want[0])], "shape": list(box[1])},
                    })
                    if src != dst:
                        stat(src)["sent"] += nbytes
                        stat(dst)["received"] += nbytes
            own = intersect(want, holders[dst]) if dst in holders else None
            stat(dst)["min"] += (volume(want) - (volume(own) if own else 0)) * size
    return {"moves": moves, "ranks": ranks}
