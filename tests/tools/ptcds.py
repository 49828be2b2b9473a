"""Independent reference for ptcfs datasets (docs/FORMATS.md "Dataset order"): the per-epoch
permutation, the per-rank split, and a Megatron MMIDIDX reader and writer written from the
published layout. Tests use it as the oracle; it shares no code with the daemon."""
import struct

import numpy as np

M64 = (1 << 64) - 1


def _mix(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


class SplitMix64:
    def __init__(self, state):
        self.state = state & M64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & M64
        return _mix(self.state)

    def uniform(self, m):
        threshold = ((1 << 64) - m) % m
        while True:
            x = self.next()
            if x >= threshold:
                return x % m


def epoch_order(seed, epoch, n):
    """The permutation of 0..n-1 for one epoch."""
    a = list(range(n))
    g = SplitMix64(_mix(seed & M64) ^ _mix((epoch ^ 0xD1B54A32D192ED03) & M64))
    for i in range(n - 1, 0, -1):
        j = g.uniform(i + 1)
        a[i], a[j] = a[j], a[i]
    return a


def global_batches(order, batch):
    """The whole batches of an epoch, in order (the incomplete last one dropped)."""
    return [order[k * batch:(k + 1) * batch] for k in range(len(order) // batch)]


def rank_samples(order, batch, dp, rank, consumed, batch_offset=0):
    """What DP rank `rank` reads from position `consumed` to the end of the epoch; with a
    batch_offset (a global batch changed there), the batches start at that sample."""
    chunk = batch // dp
    out = []
    for b in global_batches(order[batch_offset:], batch)[(consumed - batch_offset) // batch:]:
        out.extend(b[rank * chunk:(rank + 1) * chunk])
    return out


# Megatron indexed datasets, from the published layout: 9-byte magic, u64 version 1, u8 dtype
# code, u64 sequence count, u64 document count, int32 lengths, int64 byte pointers, int64
# document indices.
MAGIC = b"MMIDIDX\x00\x00"
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64, 7: np.float32,
          8: np.uint16}


def write_megatron(prefix, sequences, dtype_code, documents=None):
    """Writes PREFIX.bin and PREFIX.idx holding the given sequences (lists of numbers)."""
    dt = DTYPES[dtype_code]
    arrays = [np.asarray(s, dtype=dt) for s in sequences]
    with open(prefix + ".bin", "wb") as f:
        for a in arrays:
            f.write(a.tobytes())
    lengths = np.array([len(a) for a in arrays], dtype=np.int32)
    pointers = np.zeros(len(arrays), dtype=np.int64)
    if len(arrays) > 1:
        pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dt).itemsize)
    docs = np.array(documents if documents is not None else range(len(arrays) + 1), dtype=np.int64)
    with open(prefix + ".idx", "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", dtype_code))
        f.write(struct.pack("<Q", len(arrays)))
        f.write(struct.pack("<Q", len(docs)))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(docs.tobytes())


def read_megatron(prefix):
    """Reads PREFIX.idx and PREFIX.bin: (dtype code, list of numpy arrays, document indices)."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == MAGIC, "bad magic"
    (version,) = struct.unpack_from("<Q", idx, 9)
    assert version == 1
    code = idx[17]
    n, m = struct.unpack_from("<QQ", idx, 18)
    off = 34
    lengths = np.frombuffer(idx, dtype=np.int32, count=n, offset=off)
    off += 4 * n
    pointers = np.frombuffer(idx, dtype=np.int64, count=n, offset=off)
    off += 8 * n
    docs = np.frombuffer(idx, dtype=np.int64, count=m, offset=off)
    off += 8 * m
    assert off == len(idx), "trailing bytes in the index"
    dt = DTYPES[code]
    data = np.fromfile(prefix + ".bin", dtype=np.uint8)
    seqs = []
    for ln, p in zip(lengths, pointers):
        nbytes = int(ln) * np.dtype(dt).itemsize
        seqs.append(data[int(p):int(p) + nbytes].view(dt))
    return code, seqs, list(docs)


if __name__ == "__main__":
    for seed, epoch, n in [(0, 0, 10), (42, 0, 10), (42, 1, 10), (7, 3, 1000)]:
        o = epoch_order(seed, epoch, n)
        print(seed, epoch, n, o[:10])
