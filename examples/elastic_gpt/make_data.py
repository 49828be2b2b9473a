#!/usr/bin/env python3
"""Writes a small synthetic token dataset as JSONL: one {"id": i, "tokens": [...]} per line,
each seq + 1 tokens (inputs and next-token targets); i is the line's index, so a trainer can
record which samples it consumed. Deterministic in --seed.

The sequences have structure a small GPT can learn within a few steps: each is a walk
through the vocabulary whose stride is drawn per sequence from a few values, with an
occasional random jump.

    $PTCFS_PYTHON examples/elastic_gpt/make_data.py /tmp/train.jsonl --samples 256
"""

import argparse
import json
import sys

import numpy as np


def sequences(samples: int, seq: int, vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(samples):
        stride = int(rng.choice([1, 2, 3, 5]))
        tok = int(rng.integers(vocab))
        out = [tok]
        for _ in range(seq):
            tok = int(rng.integers(vocab)) if rng.random() < 0.1 else (tok + stride) % vocab
            out.append(tok)
        yield out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--seq", type=int, default=16, help="tokens per sample are seq + 1")
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    with open(a.out, "w") as f:
        for i, s in enumerate(sequences(a.samples, a.seq, a.vocab, a.seed)):
            f.write(json.dumps({"id": i, "tokens": s}, separators=(",", ":")) + "\n")
    print(f"make_data: wrote {a.samples} samples of {a.seq + 1} tokens (vocab {a.vocab}) to {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
