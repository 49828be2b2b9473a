// Models for the planner's tests, built directly (not through MODEL.json).
#pragma once

#include <cstdint>

#include "ptc/planner/model_spec.h"

namespace ptcfs::planner::testing {

// A GPT of Narayanan et al. 2021, Table 1 (ffn = 4h, V = 51,200, s = 2,048) on their
// cluster: A100 80 GB, 312 TFLOP/s dense BF16, 8 per node on NVSwitch (300 GB/s = 2,400
// Gbit/s per GPU and direction), 8 HDR InfiniBand cards of 200 Gbit/s per node.
inline ModelSpec gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t global_batch) {
  ModelSpec m;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.query_groups = heads;
  m.ffn = 4 * hidden;
  m.vocab = 51200;
  m.seq = 2048;
  m.global_batch = global_batch;
  m.gpu = {80, 312, 8, 2400, 200};
  m.flash_attention = false;  // 2021: the attention core in separate kernels
  return m;
}

// A Llama-style model (SwiGLU MLP of width `ffn`, untied output layer, `groups` key/value
// heads) as this model builds it, on the A100 cluster of gpt(); seq and global_batch unset.
inline ModelSpec llama(int64_t layers, int64_t hidden, int64_t heads, int64_t groups, int64_t ffn, int64_t vocab) {
  ModelSpec m;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.query_groups = groups;
  m.ffn = ffn;
  m.vocab = vocab;
  m.mlp = Mlp::kSwiglu;
  m.tied_embeddings = false;
  m.gpu = {80, 312, 8, 2400, 200};
  return m;
}

// An H100 SXM 80 GB in a DGX H100 (NVIDIA datasheets): 989 TFLOP/s dense BF16, 8 per node,
// NVLink 450 GB/s per direction (3,600 Gbit/s), one 400 Gbit/s InfiniBand card per GPU, 132
// SMs, 3,350 GB/s.
inline GpuSpec h100() { return {80, 989, 8, 3600, 400, 132, 3350}; }

// Nemotron-4 as NVIDIA's NeMo configurations give it, a GPT of ffn 4h (squared ReLU: GeLU's
// shapes) with 8 query groups, 256,000 tokens, seq 4,096, untied, dropout 0, FlashAttention
// (Transformer Engine), a distributed optimizer with BF16 gradients (grad_sync_dtype bf16), on
// H100s. RoPE and the missing biases are ignored (under 0.1% of the parameters).
inline ModelSpec nemotron4(int64_t layers, int64_t hidden, int64_t heads, int64_t global_batch) {
  ModelSpec m = gpt(layers, hidden, heads, global_batch);
  m.query_groups = 8;
  m.vocab = 256000;
  m.seq = 4096;
  m.tied_embeddings = false;
  m.dropout = false;
  m.flash_attention = true;
  m.distributed_optimizer = true;
  m.grad_reduce_in_bf16 = true;
  m.gpu = h100();
  return m;
}

// 4 layers, h = 64, 4 heads, ffn = 256, V = 256, s = 32, B = 8; 16 GiB GPUs, 4 per node.
inline ModelSpec small_model() {
  ModelSpec m;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.query_groups = 4;
  m.ffn = 256;
  m.vocab = 256;
  m.seq = 32;
  m.global_batch = 8;
  m.gpu = {16, 100, 4, 800, 100};
  m.flash_attention = false;  // Korthikanti et al.'s tensors, as their Table 2 counts them
  return m;
}

}  // namespace ptcfs::planner::testing
