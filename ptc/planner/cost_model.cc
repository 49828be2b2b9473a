#include "ptc/planner/cost_model.h"

#include <algorithm>
#include <array>
#include <cassert>
#include <cmath>

namespace ptcfs::planner {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Bytes of one activation element: 16-bit training keeps 16-bit activations (the "2" of
// every term of Korthikanti et al.'s Table 2); F32 keeps 4. Dropout masks are 1 byte in all.
double activation_element_bytes(Precision p) { return p == Precision::kF32 ? 4 : 2; }

// Bytes of a dropout mask per element: 1 where the model trains with dropout, none without
// (at probability 0 dropout passes its input on and keeps no mask).
double mask_bytes(const ModelSpec& m) { return m.dropout ? 1 : 0; }

// Device-memory traffic of the attention core's element-wise work, for b sequences on one
// GPU (none with FlashAttention, which fuses it): the softmax reads and writes a s^2 b
// elements (2e), its dropout reads, writes and writes a mask (2e + 1). With context
// parallelism a GPU scores its s / cp queries against all s keys.
double core_elementwise_bytes(const ModelSpec& m, int tp, int64_t b, int cp) {
  if (m.flash_attention) return 0;
  const double e = activation_element_bytes(m.dtype);
  const double per_score = 2 * e + (m.dropout ? 2 * e + 1 : 0);
  return per_score * m.heads * static_cast<double>(b) * m.seq / cp * m.seq / tp;
}

double bytes_per_second(double gbps) { return gbps * 1e9 / 8; }

// Ring all-reduce of `bytes` over n ranks: each sends and receives 2 (n - 1) / n x bytes
// (Patarasuk and Yuan 2009; the volume Narayanan et al. 2021 use in section 3.2).
double ring_allreduce_seconds(double bytes, int n, double bandwidth) {
  if (n <= 1) return 0;
  return 2.0 * (n - 1) / n * bytes / bandwidth;
}

// Whether a group of `count` ranks first, first + stride, ... spans two nodes of
// `per_node` GPUs (ranks fill nodes in order, so its first and last rank tell).
bool group_crosses_nodes(int64_t first, int64_t stride, int64_t count, int per_node) {
  return first / per_node != (first + stride * (count - 1)) / per_node;
}

bool tp_groups_cross_nodes(const ParallelConfig& c, int per_node) {
  for (int64_t k = 0; k < c.gpus() / c.tp; ++k)
    if (group_crosses_nodes(k * c.tp, 1, c.tp, per_node)) return true;
  return false;
}

// The gradients are reduced over dp x cp ranks (Megatron-LM's data-parallel group with
// context parallelism): t + tp (c + cp d) for one t and p.
bool dp_groups_cross_nodes(const ParallelConfig& c, int per_node) {
  for (int p = 0; p < c.pp; ++p)
    for (int t = 0; t < c.tp; ++t)
      if (group_crosses_nodes(t + int64_t{c.tp} * c.cp * c.dp * p, c.tp, int64_t{c.cp} * c.dp, per_node)) return true;
  return false;
}

// A context-parallel group: t + tp c for one t, d and p.
bool cp_groups_cross_nodes(const ParallelConfig& c, int per_node) {
  for (int64_t k = 0; k < c.gpus() / (int64_t{c.tp} * c.cp); ++k)
    for (int t = 0; t < c.tp; ++t)
      if (group_crosses_nodes(t + k * c.tp * c.cp, c.tp, c.cp, per_node)) return true;
  return false;
}

// Rank r of stage p sends to rank r + tp x dp of stage p + 1. Some pair lies on two nodes
// exactly when the job spans more than one node: r = max(0, per_node - tp x dp) is such a
// pair's sender whenever gpus > per_node.
bool pp_sends_cross_nodes(const ParallelConfig& c, int per_node) { return c.pp > 1 && c.gpus() > per_node; }

double link(const GpuSpec& g, bool crosses) {
  return bytes_per_second(crosses ? g.inter_node_gbps : g.intra_node_gbps);
}

// Korthikanti et al. shard an activation over tp either always (inside the attention and
// MLP blocks) or only with sequence parallelism (LayerNorms, dropouts, block inputs).
double sequence_share(const ModelSpec& m, int tp) { return m.sequence_parallel ? tp : 1; }

// A gated MLP (SwiGLU) has two input products of width ffn: 6 b s h ffn instead of 4.
double mlp_inputs(const ModelSpec& m) { return m.mlp == Mlp::kSwiglu ? 2 : 1; }

// Forward FLOPs of one layer for one micro-batch of b sequences: 2 per multiply-add of
// every matrix product (Narayanan et al. 2021, section 5.1: 24 b s h^2 + 4 b s^2 h for
// MHA and ffn = 4h): QKV projection, Q K^T and attention over V (each 2 b s^2 h: every
// query head attends over s keys), output projection, the two MLP products.
double layer_forward_flops(const ModelSpec& m, int64_t b) {
  const double bs = static_cast<double>(b) * m.seq, h = m.hidden;
  return 2 * bs * h * (h + 2.0 * kv_width(m)) + 4 * bs * m.seq * h + 2 * bs * h * h +
         2 * (mlp_inputs(m) + 1) * bs * h * m.ffn;
}

// One linear layer of a micro-batch of `tokens` rows, `in` x `out` on this GPU: the forward
// product, and in the backward the input gradient (tokens x in, over out) and the weight
// gradient (in x out, over tokens).
LayerSeconds linear_seconds(const GpuSpec& g, double e, double tokens, double in, double out) {
  return {gemm_seconds(g, e, tokens, out, in),
          gemm_seconds(g, e, tokens, in, out) + gemm_seconds(g, e, in, out, tokens)};
}

// Training FLOPs of one layer: backward is twice the forward (Narayanan et al. 2021,
// section 5.1); full recomputation runs the forward once more, selective recomputation
// only Q K^T and attention over V (Korthikanti et al. 2022, section 5).
double layer_training_flops(const ModelSpec& m, int64_t b) {
  const double fwd = layer_forward_flops(m, b);
  double again = 0;
  if (m.recompute == Recompute::kFull) again = fwd;
  if (m.recompute == Recompute::kSelective) again = 4.0 * b * m.seq * m.seq * m.hidden;
  return 3 * fwd + again;
}

// The output layer (logits over the padded vocabulary): 2 b s h V forward, three times that
// in training, never recomputed (the 6 B s h V of Narayanan et al. 2021, eq. 3).
double logit_training_flops(const ModelSpec& m, int tp, int64_t b) {
  return 6.0 * b * m.seq * m.hidden * static_cast<double>(padded_vocab(m, tp));
}

// The memory-bound operations of one layer's forward pass for b sequences on one GPU, as
// Megatron-LM runs them in fused kernels (Narayanan et al. 2021, section 4.2: bias + GeLU,
// bias + dropout + add, scale + mask + softmax), each reading its inputs from and writing
// its outputs to device memory once; the tensors are Korthikanti et al. 2022's (section
// 4.1). Outside the tensor-parallel regions, on every tp rank unless sequence parallel:
// two LayerNorms (read and write s b h each), two bias + dropout + adds (read the input and
// the residual, write the sum and, with dropout, a 1-byte mask). Inside, split over tp: the
// GeLU (read and write s b f; SwiGLU reads 2 s b f) and the attention core's softmax and
// dropout (core_elementwise_bytes). The backward pass of each reads its output's gradient
// and its saved input and writes its input's gradient: taken as twice the forward's bytes.
// With context parallelism a GPU holds s / cp of each sequence's tokens.
double elementwise_bytes(const ModelSpec& m, int tp, int64_t b, int cp) {
  const double e = activation_element_bytes(m.dtype);
  const double sb = static_cast<double>(m.seq) / cp * b, sbh = sb * m.hidden, sbf = sb * m.ffn;
  return (10 * e + 2 * mask_bytes(m)) * sbh / sequence_share(m, tp) + (mlp_inputs(m) + 1) * e * sbf / tp +
         core_elementwise_bytes(m, tp, b, cp);
}

LayerSeconds operator+(LayerSeconds a, LayerSeconds b) { return {a.forward + b.forward, a.backward + b.backward}; }

// The stages that can be the slowest or the fullest, each once: the first (the most layers
// with the even split, the embedding), the second with the embedding-and-loss split (the
// middle stage with the most layers and micro-batches in flight) and the last (the logits).
struct Stages {
  std::array<int, 3> at{};
  int n = 0;
  const int* begin() const { return at.data(); }
  const int* end() const { return at.data() + n; }
};

Stages bounding_stages(const ModelSpec& m, const ParallelConfig& c) {
  Stages s;
  s.at[s.n++] = 0;
  if (m.pipeline_split == PipelineSplit::kEmbeddingAndLoss && c.pp > 2) s.at[s.n++] = 1;
  if (c.pp > 1) s.at[s.n++] = c.pp - 1;
  return s;
}

}  // namespace

int64_t padded_vocab(const ModelSpec& m, int tp) {
  const int64_t multiple = int64_t{128} * tp;
  return ceil_div(m.vocab, multiple) * multiple;
}

int64_t kv_width(const ModelSpec& m) { return m.hidden / m.heads * m.query_groups; }

// A Megatron GPT layer: QKV projection h x (h + 2 kv) with bias, output projection h x h
// with bias, MLP h x ffn and ffn x h with biases, two LayerNorms (weight and bias). With
// kv = h and ffn = 4h: 12 h^2 + 13 h, the per-layer term of Narayanan et al. 2021's
// P = 12 l h^2 (1 + 13/12h + (V + s)/12lh).
// A SwiGLU MLP has two input products h x f with biases (Shazeer 2020): 3 h f + 2 f + h.
int64_t layer_params(const ModelSpec& m) {
  const int64_t h = m.hidden, kv = kv_width(m), f = m.ffn, in = m.mlp == Mlp::kSwiglu ? 2 : 1;
  return h * (h + 2 * kv) + (h + 2 * kv) + h * h + h + (in + 1) * h * f + in * f + h + 4 * h;
}

// Layers, word embeddings (padded), position embeddings, final LayerNorm. Narayanan et
// al.'s formula leaves out the final LayerNorm's 2h.
int64_t model_params(const ModelSpec& m, int tp) {
  const int64_t h = m.hidden, word = padded_vocab(m, tp) * h;
  return m.layers * layer_params(m) + word * (m.tied_embeddings ? 1 : 2) + m.seq * h + 2 * h;
}

int64_t pipeline_slots(const ModelSpec& m) {
  return m.layers + (m.pipeline_split == PipelineSplit::kEmbeddingAndLoss ? 2 : 0);
}

int64_t stage_layers(const ModelSpec& m, int pp, int stage) {
  if (pp == 1) return m.layers;
  const int64_t slots = pipeline_slots(m);
  int64_t layers = slots / pp + (stage < slots % pp ? 1 : 0);
  if (m.pipeline_split == PipelineSplit::kEmbeddingAndLoss) layers -= (stage == 0) + (stage == pp - 1);
  return std::max<int64_t>(layers, 0);
}

namespace {

// Transformer layers of the stages before `stage`.
double layers_before(const ModelSpec& m, int pp, int stage) {
  int64_t n = 0;
  for (int j = 0; j < stage; ++j) n += stage_layers(m, pp, j);
  return static_cast<double>(n);
}

}  // namespace

// Megatron splits the QKV and first MLP products by columns, the output projection and
// second MLP product by rows (Shoeybi et al. 2019): every weight and the column-parallel
// biases are divided by tp; the row-parallel biases (2h) and the LayerNorms (4h) are on
// every rank. The vocabulary-parallel word embeddings are on the first stage and, for the
// tied output layer, again on the last when pp > 1 (an untied output layer is on the last
// whatever pp); position embeddings on the first, the final LayerNorm on the last.
int64_t gpu_params(const ModelSpec& m, const ParallelConfig& c, int stage) {
  const int64_t h = m.hidden;
  const int64_t replicated = 6 * h;
  const int64_t split = layer_params(m) - replicated;
  assert(split % c.tp == 0);
  int64_t p = stage_layers(m, c.pp, stage) * (split / c.tp + replicated);
  const int64_t word = padded_vocab(m, c.tp) / c.tp * h;
  if (stage == 0) p += word + m.seq * h;
  if (stage == c.pp - 1) p += 2 * h + (c.pp > 1 || !m.tied_embeddings ? word : 0);
  return p;
}

// Megatron-LM's distributed-optimizer documentation (docs/source/api-guide/
// distrib_optimizer.md), bytes per parameter without / with a distributed optimizer:
// BF16 params with FP32 grads 18 / 6 + 12/d (2 param + 4 main grad + 4 master + 4 + 4
// Adam moments), FP16 20 / 4 + 16/d, FP32 16 / 8 + 8/d. BF16 gradients reduced in BF16
// (Megatron-LM's --grad-reduce-in-bf16) are 2 bytes: 16 / 4 + 12/d.
BytesPerParam bytes_per_param(const ModelSpec& m) {
  switch (m.dtype) {
    case Precision::kBF16:
      return {2, m.grad_reduce_in_bf16 ? 2.0 : 4.0, 12};
    case Precision::kF16:
      return {2, 2, 16};
    case Precision::kF32:
      return {4, 4, 8};
  }
  return {};
}

double optimizer_step_bytes(const ModelSpec& m, double params, int dp) {
  const BytesPerParam b = bytes_per_param(m);
  return params * (b.gradients + 2 * b.optimizer + b.weights) / (m.distributed_optimizer ? dp : 1);
}

// Korthikanti et al. 2022, section 4 and Table 2, per layer and micro-batch (16-bit, e = 2):
//   no parallelism          s b h (34 + 5 a s / h)
//   tp                      s b h (10 + 24/t + 5 a s / h t)
//   tp + sequence parallel  s b h / t (34 + 5 a s / h)
//   selective recompute     drops the 5 a s / h term (the attention core is recomputed)
//   full recompute          2 s b h: the layer's input only (divided by t with sequence
//                           parallelism, whose layer inputs are split along s).
// Written here per tensor so that grouped-query attention (K and V of width kv) and any ffn
// width f fit: with kv = h and f = 4h the terms are exactly the paper's.
double layer_activation_bytes(const ModelSpec& m, int tp, int64_t micro_batch, Recompute r, int cp) {
  const double e = activation_element_bytes(m.dtype);
  // With context parallelism a GPU holds s / cp of each sequence's tokens (and their
  // scores against all s keys).
  const double sb = static_cast<double>(m.seq) / cp * micro_batch;
  const double sbh = sb * m.hidden, sbkv = sb * kv_width(m), sbf = sb * m.ffn;
  const double share = sequence_share(m, tp);
  if (r == Recompute::kFull) return e * sbh / share;
  // Outside the tensor-parallel regions: both LayerNorm inputs (2e), the inputs of the QKV
  // and first MLP products (e each), the two dropout masks (1 each, none without dropout):
  // 10 s b h for e = 2.
  const double outside = (4 * e + 2 * mask_bytes(m)) * sbh;
  // Inside, split over tp: Q, K, V and the output projection's input; the GeLU's input and
  // the second MLP product's input: 24 s b h for e = 2, kv = h, f = 4h. SwiGLU keeps both
  // input products' outputs (2 s b f) and its own output.
  const double inside = e * (2 * sbh + 2 * sbkv + (mlp_inputs(m) + 1) * sbf);
  // The attention core: softmax output (e), its dropout mask (1) and dropout output (e),
  // a x s x s per sequence: 5 a s^2 b for e = 2; without dropout the softmax output alone,
  // the input of attention over V too (2 a s^2 b).
  // FlashAttention keeps none of it: the softmax's statistics, 4 bytes per head and
  // position (Dao et al. 2022, section 3.1), and it recomputes the rest itself.
  const double per_score = e + (m.dropout ? e + 1 : 0);
  const double core = m.flash_attention            ? 4.0 * m.heads * sb
                      : r == Recompute::kSelective ? 0
                                                   : per_score * m.heads * sb * m.seq;
  return outside / share + (inside + core) / tp;
}

MemoryEstimate stage_memory(const ModelSpec& m, const ParallelConfig& c, int stage) {
  MemoryEstimate e;
  e.stage = stage;
  const double params = static_cast<double>(gpu_params(m, c, stage));
  const BytesPerParam bpp = bytes_per_param(m);
  e.weights = params * bpp.weights;
  e.gradients = params * bpp.gradients;
  // A distributed optimizer shards its state over the dp x cp ranks that reduce the
  // gradients (Megatron-LM's data-parallel group with context parallelism).
  e.optimizer = params * bpp.optimizer / (m.distributed_optimizer ? c.dp * c.cp : 1);

  // 1F1B (Narayanan et al. 2021, section 2.2.1): stage i runs pp - i forward passes before
  // its first backward, so it keeps min(pp - i, m) micro-batches' activations.
  // The interleaved schedule keeps 1 + (pp - 1) / (pp v) times as many (Korthikanti et al.
  // 2022, section 4.2.3; stated for the first stage, applied here to the last too).
  const int64_t micro_batches = m.global_batch / (int64_t{c.dp} * c.micro_batch);
  const double interleaved =
      c.virtual_stages > 1 ? 1 + (c.pp - 1.0) / (static_cast<double>(c.pp) * c.virtual_stages) : 1;
  const double in_flight = static_cast<double>(std::min<int64_t>(c.pp - stage, micro_batches)) * interleaved;
  const int64_t layers = stage_layers(m, c.pp, stage);
  e.activations =
      static_cast<double>(layers) * layer_activation_bytes(m, c.tp, c.micro_batch, m.recompute, c.cp) * in_flight;
  // With full recomputation the backward pass of a layer rebuilds that layer's activations
  // (one layer, one micro-batch) before it runs.
  if (m.recompute == Recompute::kFull && layers > 0)
    e.activations += layer_activation_bytes(m, c.tp, c.micro_batch, Recompute::kNone, c.cp);
  const double sbh = static_cast<double>(m.seq) / c.cp * c.micro_batch * m.hidden;
  const double share = sequence_share(m, c.tp);
  // Korthikanti et al. 2022, section 4.3: the embedding's dropout mask (s b h / t with
  // sequence parallelism) for each micro-batch in flight on the first stage ...
  if (stage == 0) e.activations += in_flight * mask_bytes(m) * sbh / share;
  // ... and on the last, the final LayerNorm's and the output layer's inputs (2 s b h / t
  // each) and the FP32 logits of the vocabulary-parallel cross entropy (4 s b V / t):
  // 4 s b h / t (1 + V / h) in all.
  if (stage == c.pp - 1) {
    const double e_bytes = activation_element_bytes(m.dtype);
    e.activations += 2 * e_bytes * sbh / share +
                     4.0 * m.seq / c.cp * c.micro_batch * static_cast<double>(padded_vocab(m, c.tp)) / c.tp;
  }
  return e;
}

MemoryEstimate estimate_memory(const ModelSpec& m, const ParallelConfig& c) {
  MemoryEstimate worst = stage_memory(m, c, 0);
  for (int stage : bounding_stages(m, c)) {
    if (stage == 0) continue;
    MemoryEstimate e = stage_memory(m, c, stage);
    if (e.total() > worst.total()) worst = e;
  }
  return worst;
}

double flops_per_step(const ModelSpec& m, int tp) {
  const double per_sequence =
      static_cast<double>(m.layers) * layer_training_flops(m, 1) + logit_training_flops(m, tp, 1);
  return static_cast<double>(m.global_batch) * per_sequence;
}

double gemm_seconds(const GpuSpec& g, double element_bytes, double rows, double cols, double depth, double batch) {
  const double row_tiles = std::ceil(rows / 256), col_tiles = std::ceil(cols / 128);
  const double waves = batch * row_tiles * col_tiles / g.sms;
  const double math =
      2 * batch * (row_tiles * 256) * (col_tiles * 128) * depth / (g.tflops * 1e12) * ((waves + 0.5) / waves);
  const double memory =
      element_bytes * batch * (rows * depth + depth * cols + rows * cols) / (g.memory_bandwidth_gbs * 1e9);
  return std::max(math, memory);
}

// The attention core of b sequences on one GPU, a / tp heads each (head width d): forward
// Q K^T (s x s over d) and P V (s x d over s); backward dP = dO V^T (s x s over d) and dV,
// dQ, dK (each s x d over s). With context parallelism a GPU holds s / cp queries against
// all s keys: a cp-th of each product (the backward's taken at the forward's shapes).
LayerSeconds core_seconds(const ModelSpec& m, int tp, int64_t b, int cp) {
  const GpuSpec& g = m.gpu;
  const double e = activation_element_bytes(m.dtype), s = static_cast<double>(m.seq), q = s / cp;
  const double d = static_cast<double>(m.hidden / m.heads), batch = static_cast<double>(b) * m.heads / tp;
  const double scores = gemm_seconds(g, e, q, s, d, batch), values = gemm_seconds(g, e, q, d, s, batch);
  // FlashAttention's backward pass computes Q K^T again (Dao et al. 2022, section 3.1).
  return {scores + values, (m.flash_attention ? 2 : 1) * scores + 3 * values};
}

// Per GPU, t = tp, T = b s / cp tokens: the QKV product (h in, (h + 2 kv) / t out), the output
// projection (h / t in, h out), the MLP's input product(s) (h in, f / t out each, one
// GEMM of both for SwiGLU) and output product (f / t in, h out), and the attention core.
// Backward is twice the forward's FLOPs (Narayanan et al. 2021, section 5.1), here as its
// two GEMMs per product; full recomputation runs the forward again before it, selective
// the attention core's forward (Korthikanti et al. 2022, section 5).
LayerSeconds layer_seconds(const ModelSpec& m, int tp, int64_t micro_batch, int cp) {
  const GpuSpec& g = m.gpu;
  const double e = activation_element_bytes(m.dtype), tokens = static_cast<double>(micro_batch) * m.seq / cp;
  const double h = static_cast<double>(m.hidden), kv = static_cast<double>(kv_width(m));
  const double f = static_cast<double>(m.ffn);
  const double bandwidth = g.memory_bandwidth_gbs * 1e9;
  const double elementwise = elementwise_bytes(m, tp, micro_batch, cp) / bandwidth;
  // The softmax and its dropout: what selective recomputation runs again with the core
  // (FlashAttention recomputes them inside its own backward pass already).
  const double core_elementwise = core_elementwise_bytes(m, tp, micro_batch, cp) / bandwidth;
  const LayerSeconds core = core_seconds(m, tp, micro_batch, cp);
  LayerSeconds s = linear_seconds(g, e, tokens, h, (h + 2 * kv) / tp) + linear_seconds(g, e, tokens, h / tp, h) +
                   linear_seconds(g, e, tokens, h, mlp_inputs(m) * f / tp) + linear_seconds(g, e, tokens, f / tp, h) +
                   core + LayerSeconds{elementwise, 2 * elementwise};
  if (m.recompute == Recompute::kFull) s.backward += s.forward;
  if (m.recompute == Recompute::kSelective && !m.flash_attention) s.backward += core.forward + core_elementwise;
  return s;
}

StepEstimate estimate_step(const ModelSpec& m, const ParallelConfig& c) {
  const GpuSpec& g = m.gpu;
  const double micro_batches = static_cast<double>(m.global_batch / (int64_t{c.dp} * c.micro_batch));
  const double v = c.virtual_stages;
  const double e = activation_element_bytes(m.dtype);
  // A GPU's tokens of a micro-batch: s / cp of each of its b sequences.
  const double sbh_bytes = e * static_cast<double>(m.seq) / c.cp * c.micro_batch * m.hidden;

  // Megatron's tensor-parallel layer all-reduces its output twice in the forward pass
  // (attention, MLP) and twice in the backward (Shoeybi et al. 2019, Figure 4); full
  // recomputation repeats the forward's two. With sequence parallelism each becomes a
  // reduce-scatter plus an all-gather: the same volume (Korthikanti et al. 2022, 4.2.2).
  const int allreduces = m.recompute == Recompute::kFull ? 6 : 4;
  const double tp_link = link(g, tp_groups_cross_nodes(c, g.per_node));
  const double tp_per_layer = allreduces * ring_allreduce_seconds(sbh_bytes, c.tp, tp_link);
  // Each stage boundary passes the activations forward and their gradients back, one
  // message of s b h elements per micro-batch each way, split over the tp ranks (the
  // scatter/gather optimisation of Narayanan et al. 2021, 4.1; with sequence parallelism
  // they are split already); with v model chunks per stage, v such boundaries.
  const double pp_link = link(g, pp_sends_cross_nodes(c, g.per_node));
  const double p2p = c.pp > 1 ? v * 2 * (sbh_bytes / c.tp) / pp_link : 0;

  const LayerSeconds layer = layer_seconds(m, c.tp, c.micro_batch, c.cp);
  const double tokens = static_cast<double>(c.micro_batch) * m.seq / c.cp;

  // Context parallelism (Megatron-LM, docs/user-guide/features/context_parallel.md): each
  // GPU keeps the keys and values of its s / cp tokens and all-gathers the others' in a ring
  // of point-to-point sends before attention, again in the backward pass, which also
  // reduce-scatters their gradients: (cp - 1) / cp of the sequence's K and V (its kv / tp
  // heads' width) received per pass, three times per layer (four with full recomputation).
  // The ring passes each block while attention runs on the one before (Ring Attention, Liu et
  // al. 2023): the attention core of the pass hides as much.
  double cp_per_layer = 0;
  if (c.cp > 1) {
    const double kv_bytes = 2 * e * static_cast<double>(m.seq) * c.micro_batch * kv_width(m) / c.tp;
    const double gather = (c.cp - 1.0) / c.cp * kv_bytes / link(g, cp_groups_cross_nodes(c, g.per_node));
    const LayerSeconds core = core_seconds(m, c.tp, c.micro_batch, c.cp);
    const double forward = std::max(0.0, gather - core.forward);
    cp_per_layer = forward * (m.recompute == Recompute::kFull ? 2 : 1) + std::max(0.0, 2 * gather - core.backward);
  }
  const LayerSeconds logits =
      linear_seconds(g, e, tokens, static_cast<double>(m.hidden), static_cast<double>(padded_vocab(m, c.tp)) / c.tp);

  // The slowest stage sets the pace (bounding_stages: the most layers, or the logits).
  StepEstimate s;
  double slot = -1;  // one micro-batch
  for (int stage : bounding_stages(m, c)) {
    const double layers = static_cast<double>(stage_layers(m, c.pp, stage));
    double forward = layers * layer.forward, backward = layers * layer.backward;
    if (stage == c.pp - 1) {
      forward += logits.forward;
      backward += logits.backward;
    }
    const double tp = layers * tp_per_layer, cp = layers * cp_per_layer;
    // Megatron-LM's --overlap-p2p-communication (interleaved schedule only) sends while
    // the stage computes another chunk: only what exceeds its compute is left.
    const double sends = m.overlap_p2p_comm && c.virtual_stages > 1 ? std::max(0.0, p2p - (forward + backward)) : p2p;
    if (forward + backward + tp + cp + sends > slot) {
      slot = forward + backward + tp + cp + sends;
      s.compute = micro_batches * (forward + backward);
      s.tp_comm = micro_batches * tp;
      s.cp_comm = micro_batches * cp;
      s.pp_comm = micro_batches * sends;
    }
  }
  // The 1F1B schedule takes m + pp - 1 slots of a micro-batch each, the interleaved one
  // m + (pp - 1) / v: a bubble of (pp - 1) / (v m) of the ideal time (Narayanan et al.
  // 2021, sections 2.2.1 and 2.2.2).
  s.bubble = (c.pp - 1) / v * slot;

  // After the last backward, every stage all-reduces its gradients over dp in parallel;
  // the stage with the most parameters finishes last. A distributed optimizer
  // reduce-scatters the gradients and, after its step, all-gathers the updated weights
  // instead: half the ring's volume each (Megatron-LM distributed optimizer; ZeRO stage 1,
  // Rajbhandari et al. 2020). With overlap_grad_reduce the reduction of each bucket starts
  // as the backward pass of the last micro-batch produces it (Megatron-LM's
  // --overlap-grad-reduce; Li et al. 2020, PyTorch DDP, section 3.2): that backward pass
  // hides as much. With overlap_param_gather the all-gather of each bucket is waited for
  // only when the next step's first forward pass reaches it (Megatron-LM's
  // --overlap-param-gather, forward pre-hooks): that forward pass hides as much.
  const BytesPerParam bpp = bytes_per_param(m);
  const double dp_link = link(g, dp_groups_cross_nodes(c, g.per_node));
  for (int stage : bounding_stages(m, c)) {
    const double params = static_cast<double>(gpu_params(m, c, stage));
    const double share = m.distributed_optimizer ? 0.5 : 1;
    // Over the dp x cp ranks of the data-parallel group with context parallelism.
    const int ranks = c.dp * c.cp;
    const double reduce = share * ring_allreduce_seconds(params * bpp.gradients, ranks, dp_link);
    const double gather =
        m.distributed_optimizer ? share * ring_allreduce_seconds(params * bpp.weights, ranks, dp_link) : 0;
    // Stage i's last backward pass ends before stage 0's, which ends the step (the 1F1B
    // cool-down, Narayanan et al. 2021, Figure 4), by the passes of the stages before it, and
    // its first forward pass starts that much after stage 0's: its reduction and gather have
    // those too. With v model chunks the stages are a chunk apart, not a stage.
    const auto window = [&](double per_layer, double logit) {
      return (static_cast<double>(stage_layers(m, c.pp, stage)) + layers_before(m, c.pp, stage) / v) * per_layer +
             (stage == c.pp - 1 ? logit : 0);
    };
    const double reduce_window = m.overlap_grad_reduce ? window(layer.backward, logits.backward) : 0;
    // Megatron-LM takes --overlap-param-gather only with --overlap-grad-reduce.
    const double gather_window =
        m.overlap_param_gather && m.overlap_grad_reduce ? window(layer.forward, logits.forward) : 0;
    const double exposed = std::max(0.0, reduce - reduce_window) + std::max(0.0, gather - gather_window);
    if (exposed >= s.dp_comm) {
      s.dp_comm = exposed;
      s.dp_comm_hidden = reduce + gather - exposed;
    }
    // The optimizer step follows the reduction; the stage with the most parameters ends last
    // (Narayanan et al. 2021, section 5.1, count it in the end-to-end step).
    s.optimizer = std::max(s.optimizer, optimizer_step_bytes(m, params, c.dp * c.cp) / (g.memory_bandwidth_gbs * 1e9));
  }
  // With pp > 1 tied word embeddings live on the first and the last stage, whose
  // gradients are all-reduced between the two (Megatron-LM, finalize_model_grads.py,
  // _allreduce_word_embedding_grads).
  if (c.pp > 1 && m.tied_embeddings) {
    const double word = static_cast<double>(padded_vocab(m, c.tp) / c.tp * m.hidden);
    s.dp_comm += ring_allreduce_seconds(word * bpp.gradients, 2, pp_link);
  }
  s.flops = flops_per_step(m, c.tp);
  return s;
}

}  // namespace ptcfs::planner
