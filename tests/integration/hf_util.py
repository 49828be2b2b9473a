"""Small Hugging Face models for the hf/ view's tests: made with stock transformers from a config
(random weights, no hub), and the digest of every parameter as stock from_pretrained loads it."""

import hashlib
import json
import os
import subprocess
import sys
from typing import Dict

# Offline: nothing may download at test time.
HF_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
          "TOKENIZERS_PARALLELISM": "false"}

# A Llama with grouped-query attention (4 heads, 2 key/value groups), a vocabulary that is no
# multiple of 128 (the template pads it) and an untied head.
LLAMA = dict(vocab_size=1000, hidden_size=64, intermediate_size=176, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=128)

# Run in a fresh interpreter (the environment variables the loader reads, and no state shared
# with the test): loads `path` with AutoModelForCausalLM.from_pretrained and prints each parameter's
# dtype, shape and sha256 as JSON.
_LOAD = r"""
import hashlib, json, sys
import torch
from transformers import AutoModelForCausalLM
m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype="auto")
out = {k: [str(v.dtype), list(v.shape), hashlib.sha256(v.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()]
       for k, v in m.state_dict().items()}
print(json.dumps(out))
"""


def digests(state_dict) -> Dict[str, list]:
    import torch
    return {k: [str(v.dtype), list(v.shape),
                hashlib.sha256(v.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()]
            for k, v in state_dict.items()}


def make_llama(out_dir: str, seed: int = 1, dtype: str = "float32", **overrides) -> Dict[str, list]:
    """Saves a random Llama with save_pretrained into out_dir; returns its parameters' digests."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**{**LLAMA, **overrides})).to(getattr(torch, dtype))
    model.save_pretrained(out_dir)
    return digests(model.state_dict())


def load_digests(path: str, timeout: float = 300, **env) -> Dict[str, list]:
    """Stock from_pretrained(path) in a new process, with `env` added; its parameters' digests."""
    r = subprocess.run([sys.executable, "-c", _LOAD, path], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, **HF_ENV, **env})
    assert r.returncode == 0, f"from_pretrained({path}) exited {r.returncode}:\n{r.stderr[-4000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


_SAVE = r"""
import hashlib, json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM
path, seed, dtype, shard, cfg = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
torch.manual_seed(seed)
m = LlamaForCausalLM(LlamaConfig(**cfg)).to(getattr(torch, dtype))
m.save_pretrained(path, **({"max_shard_size": shard} if shard else {}))
out = {k: [str(v.dtype), list(v.shape), hashlib.sha256(v.detach().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()]
       for k, v in m.state_dict().items()}
print(json.dumps(out))
"""


def save_llama(path: str, seed: int = 1, dtype: str = "float32", max_shard_size: str = "", timeout: float = 300,
               **overrides) -> subprocess.CompletedProcess:
    """Stock save_pretrained of a random Llama into `path`, in a new process: its result (stdout:
    the parameters' digests as JSON, when it succeeded)."""
    return subprocess.run([sys.executable, "-c", _SAVE, path, str(seed), dtype, max_shard_size,
                           json.dumps({**LLAMA, **overrides})], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **HF_ENV})
