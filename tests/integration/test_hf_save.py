"""Stock save_pretrained into the mount (docs/FORMATS.md "save_pretrained into the mount"):
model.save_pretrained("MNT/<job>/<step>") into a new step folder commits a step, whole or
sharded, that from_pretrained loads back from its hf/ view and that repartitions like any other;
what it cannot take is refused, saying why, and nothing is committed."""

import errno
import json
import os
import shutil

import pytest

from hf_util import load_digests, save_llama

pytest.importorskip("transformers")


def saved(r):
    assert r.returncode == 0, f"save_pretrained exited {r.returncode}:\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shard", ["", "200KB"])
def test_save_pretrained_into_the_mount_commits_a_step_that_loads_back(daemon, shard):
    sd = os.path.join(daemon.mnt, "j", "2")
    os.makedirs(sd)
    want = saved(save_llama(sd, seed=21, max_shard_size=shard))
    # Committed when save_pretrained returned: in the store, with its config, at tp=1.
    info = daemon.cli_json("ls", "j/2", "--json")
    assert info["state"] == "committed", info
    ptc = json.load(open(os.path.join(sd, "ptc.json")))
    assert ptc["parallelism"] == {"tp": 1, "pp": 1, "dp": 1}
    assert ptc["hf_config"]["model_type"] == "llama" and ptc["hf_config"]["num_key_value_heads"] == 2
    assert sorted(ptc["tensors"]) == sorted(want)
    assert ptc["tensors"]["model.embed_tokens.weight"]["pad_to"] == 128
    hf = os.path.join(sd, "hf")
    assert load_digests(hf) == want
    for to in ("tp=2,pp=2,dp=1", "tp=1,pp=4,dp=2"):
        daemon.cli("repartition", "--job", "j", "--step", "2", "--to", to)
        assert load_digests(hf) == want, to
    # The other views serve it too: the whole embedding, unpadded, in full/.
    import numpy as np
    emb = np.load(os.path.join(sd, "full", "model.embed_tokens.weight.npy"))
    assert emb.shape == (1000, 64) and emb.dtype == np.float32


def test_a_bfloat16_save_keeps_every_bit(daemon):
    sd = os.path.join(daemon.mnt, "j", "3")
    os.makedirs(sd)
    want = saved(save_llama(sd, seed=22, dtype="bfloat16"))
    daemon.cli("repartition", "--job", "j", "--step", "3", "--to", "tp=2,pp=1,dp=1")
    assert load_digests(os.path.join(sd, "hf")) == want


def test_what_a_save_cannot_take_is_refused_and_nothing_commits(daemon, tmp_path):
    # A tokenizer's files are not the model's: refused at their creation, naming what a step holds.
    sd = os.path.join(daemon.mnt, "j", "4")
    os.makedirs(sd)
    with pytest.raises(OSError) as e:
        open(os.path.join(sd, "tokenizer.json"), "w").close()
    assert e.value.errno == errno.EINVAL
    assert "j/4/tokenizer.json" in daemon.log_tail()
    # A model_type without a shipped template: the close of the save's last file fails, the step
    # stays pending and failed, ls says why, and rm frees the name.
    src = str(tmp_path / "src")
    saved(save_llama(src, seed=23))
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["model_type"] = "t5"
    sd5 = os.path.join(daemon.mnt, "j", "5")
    os.makedirs(sd5)
    with open(os.path.join(sd5, "config.json"), "w") as f:
        json.dump(cfg, f)
    with pytest.raises(OSError) as e:
        shutil.copyfile(os.path.join(src, "model.safetensors"), os.path.join(sd5, "model.safetensors"))
    assert e.value.errno == errno.EINVAL
    info = daemon.cli_json("ls", "j/5", "--json")
    assert info["state"] == "pending" and len(info["errors"]) == 1, info
    assert "model_type 't5' has no shipped template" in info["errors"][0], info
    daemon.cli("rm", "j/5")
    # The same files, with the model's own config, commit.
    os.makedirs(sd5)
    shutil.copyfile(os.path.join(src, "config.json"), os.path.join(sd5, "config.json"))
    shutil.copyfile(os.path.join(src, "model.safetensors"), os.path.join(sd5, "model.safetensors"))
    assert daemon.cli_json("ls", "j/5", "--json")["state"] == "committed"
