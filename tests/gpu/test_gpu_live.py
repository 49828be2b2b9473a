"""Live resharding over NCCL on a GPU (docs/ARCHITECTURE.md "Live resharding"): ptcfs.live.NcclComm
(libptcfs_client's NCCL communicator) moves every slice of each plan of
tp=2,pp=2,dp=1 -> tp=1,pp=2,dp=2 -> tp=1,pp=1,dp=1 -> tp=2,pp=2,dp=1 with ncclSend/ncclRecv; one GPU
plays every rank (live_local.py), and every rank's new tensors equal the ptcgen oracle's slices bit
for bit, with exactly the plan's minimum of bytes through NCCL. Rounds that NCCL would hang on, and
tensors it cannot move, are refused with clear errors."""

import pytest
import torch

import ptcgen
from live_local import reshard_all
from live_worker import bits, oracle_state
from ptcfs import Error, live

CONFIGS = [(2, 2, 1), (1, 2, 2), (1, 1, 1), (2, 2, 1)]


def gpt_ptc():
    # vocab 1000 pads at tp=2 (zeros in the last rows); dense_h_to_4h is fused; ~10 MB of state.
    return ptcgen.make_ptc("gpt", tp=2, pp=2, dp=1, layers=4, hidden=256, vocab=1000, max_seq=64)


@pytest.mark.parametrize("chunk_bytes,staging_bytes", [(16 << 20, 64 << 20), (4096, 64 << 10)],
                         ids=["one-round", "chunked"])
def test_every_slice_of_each_plan_goes_through_nccl_and_lands_exactly(chunk_bytes, staging_bytes):
    ptc = gpt_ptc()
    full = ptcgen.full_tensors(ptc, seed=0)
    world = max(t * p * d for t, p, d in CONFIGS)
    with live.NcclComm(rank=0, world=1, device="cuda:0") as comm:
        states = [{n: t.to("cuda:0") for n, t in oracle_state(ptc, full, CONFIGS[0], r).items()} for r in range(world)]
        for frm, to in zip(CONFIGS, CONFIGS[1:]):
            new, st = reshard_all(states, ptc, frm, to, comm, chunk_bytes, staging_bytes)
            assert st["moved"] == st["plan"]["bytes_min"] > 0, (frm, to)
            if chunk_bytes == 4096:
                assert st["rounds"] > 1, st["rounds"]
            for r in range(world):
                want = oracle_state(ptc, full, to, r)
                got = new[r] if r < len(new) else {}
                assert sorted(got) == sorted(want), (frm, to, r)
                for n, w in want.items():
                    g = got[n]
                    assert g.is_cuda and g.dtype == w.dtype and list(g.shape) == list(w.shape), (frm, to, r, n)
                    assert torch.equal(bits(g.cpu()), bits(w)), (frm, to, r, n)
            states = [new[r] if r < len(new) else {} for r in range(world)]


def test_rounds_nccl_would_hang_on_and_tensors_it_cannot_move_are_refused():
    with live.NcclComm(rank=0, world=1, device="cuda:0") as comm:
        a = torch.arange(16, dtype=torch.int32, device="cuda:0")
        b = torch.empty(16, dtype=torch.int32, device="cuda:0")
        comm.exchange([(0, 0, a)], [(0, 0, b)])
        assert torch.equal(a, b)
        with pytest.raises(Error) as e:  # a send to itself with no receive to pair with
            comm.exchange([(0, 0, a)], [])
        assert e.value.code == "invalid_argument"
        assert e.value.message == ("rank 0 sends itself 1 messages in this round but receives 0 from itself: "
                                   "they must pair up")
        with pytest.raises(Error) as e:
            comm.exchange([(0, 0, a)], [(0, 0, b[:8])])
        assert e.value.message == "rank 0's message 0 to itself has 64 bytes but the receive it pairs with 32"
        with pytest.raises(Error) as e:
            comm.exchange([(0, 0, a.cpu())], [(0, 0, b)])
        assert e.value.code == "invalid_argument" and "not one on cpu" in e.value.message
        with pytest.raises(Error) as e:
            comm.exchange([(1, 0, a)], [])
        assert e.value.message == "operation 0 (send to 1, 64 bytes): the peer is outside ranks 0-0"
        comm.exchange([(0, 0, b)], [(0, 0, a)])  # still usable after refusals
    with pytest.raises(Error) as e:
        comm.exchange([], [])
    assert e.value.code == "failed_precondition"
    with pytest.raises(Error) as e:
        live.NcclComm(rank=0, world=1, device=f"cuda:{torch.cuda.device_count()}")
    assert e.value.code == "invalid_argument" and "does not exist" in e.value.message
