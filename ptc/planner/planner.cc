#include "ptc/planner/planner.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>

namespace ptcfs::planner {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kMaxGpus = 1 << 20;

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / kGiB);
  return buf;
}

// The divisors of n >= 1, ascending.
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

std::string config_name(const ParallelConfig& c) {
  return "tp=" + std::to_string(c.tp) + (c.cp != 1 ? ",cp=" + std::to_string(c.cp) : "") +
         ",pp=" + std::to_string(c.pp) + ",dp=" + std::to_string(c.dp) +
         ",micro_batch=" + std::to_string(c.micro_batch) +
         (c.virtual_stages != 1 ? ",virtual_stages=" + std::to_string(c.virtual_stages) : "");
}

// Context parallelism of `cp` GPUs: the load-balanced causal split gives each GPU two chunks
// of the sequence, so 2 cp divides it (Megatron-LM's context parallelism).
bool context_splittable(const ModelSpec& m, int cp) {
  return cp == 1 || (m.context_parallel && m.seq % (2 * int64_t{cp}) == 0);
}

// Whether v > 1 interleaved stages are allowed: Narayanan et al. 2021, section 2.2.2 (the
// micro-batches a multiple of pp; each stage's layers split evenly into v chunks; with the
// embedding-and-loss split, its slots, as Megatron-LM's transformer_config.py requires).
bool interleavable(const ModelSpec& m, int pp, int64_t micro_batches, int v) {
  return pp > 1 && pipeline_slots(m) % (int64_t{pp} * v) == 0 && micro_batches % pp == 0;
}

// The embedding-and-loss split needs pp to divide its slots (Megatron-LM refuses the rest);
// the even split takes any pp.
bool splittable(const ModelSpec& m, int pp) {
  return m.pipeline_split == PipelineSplit::kEven || pp == 1 || pipeline_slots(m) % pp == 0;
}

// "4 layers", or "128 slots (126 layers, the embedding and the loss)".
std::string slots_name(const ModelSpec& m) {
  if (m.pipeline_split == PipelineSplit::kEven) return std::to_string(m.layers) + " layers";
  return std::to_string(pipeline_slots(m)) + " slots (" + std::to_string(m.layers) +
         " layers, the embedding and the loss)";
}

}  // namespace

double Candidate::memory_gb() const { return memory.total() / kGiB; }

double Candidate::tflops_per_gpu() const { return step.flops / (config.gpus() * step.total()) / 1e12; }

Status validate_config(const ModelSpec& m, const ParallelConfig& c) {
  const std::string name = config_name(c);
  if (c.tp < 1 || c.pp < 1 || c.dp < 1 || c.micro_batch < 1 || c.virtual_stages < 1 || c.cp < 1)
    return invalid(name + ": every degree must be at least 1");
  if (c.cp > 1 && !m.context_parallel) return invalid(name + ": cp > 1 needs \"context_parallel\": true");
  if (!context_splittable(m, c.cp))
    return invalid(name + ": cp needs 2 x cp to divide seq (" + std::to_string(m.seq) + ")");
  if (m.heads % c.tp != 0 || m.query_groups % c.tp != 0 || m.ffn % c.tp != 0)
    return invalid(name + ": tp must divide heads (" + std::to_string(m.heads) + "), query_groups (" +
                   std::to_string(m.query_groups) + ") and ffn (" + std::to_string(m.ffn) + ")");
  if (c.tp > m.gpu.per_node)
    return invalid(name + ": tp is more than the " + std::to_string(m.gpu.per_node) + " GPUs of a node");
  if (c.pp > m.layers) return invalid(name + ": pp is more than the " + std::to_string(m.layers) + " layers");
  if (!splittable(m, c.pp))
    return invalid(name + ": pipeline_split embedding_and_loss needs pp to divide the " + slots_name(m));
  if (m.global_batch % (int64_t{c.dp} * c.micro_batch) != 0)
    return invalid(name + ": dp x micro_batch must divide global_batch (" + std::to_string(m.global_batch) + ")");
  if (c.virtual_stages > 1) {
    if (!m.interleave) return invalid(name + ": virtual stages need \"interleave\": true");
    if (!interleavable(m, c.pp, m.global_batch / (int64_t{c.dp} * c.micro_batch), c.virtual_stages))
      return invalid(name + ": virtual stages need pp > 1, pp x virtual_stages dividing the " + slots_name(m) +
                     " and pp dividing the micro-batches");
  }
  return Status::ok();
}

std::vector<ParallelConfig> valid_configs(const ModelSpec& m, int gpus) {
  std::vector<ParallelConfig> out;
  if (gpus < 1) return out;
  for (int tp = 1; tp <= std::min(gpus, m.gpu.per_node); ++tp) {
    if (gpus % tp != 0 || m.heads % tp != 0 || m.query_groups % tp != 0 || m.ffn % tp != 0) continue;
    for (int cp = 1; cp <= (m.context_parallel ? gpus / tp : 1); ++cp) {
      if ((gpus / tp) % cp != 0 || !context_splittable(m, cp)) continue;
      const int rest = gpus / tp / cp;
      for (int pp = 1; pp <= rest && pp <= m.layers; ++pp) {
        if (rest % pp != 0 || !splittable(m, pp)) continue;
        const int dp = rest / pp;
        if (m.global_batch % dp != 0) continue;
        for (int64_t b : divisors(m.global_batch / dp)) {
          out.push_back({tp, pp, dp, b, 1, cp});
          if (!m.interleave || pipeline_slots(m) % pp != 0) continue;
          for (int64_t v : divisors(pipeline_slots(m) / pp))
            if (v > 1 && interleavable(m, pp, m.global_batch / (int64_t{dp} * b), static_cast<int>(v)))
              out.push_back({tp, pp, dp, b, static_cast<int>(v), cp});
        }
      }
    }
  }
  return out;
}

Candidate evaluate(const ModelSpec& m, const ParallelConfig& c) {
  return {c, estimate_memory(m, c), estimate_step(m, c)};
}

ModelSpec as_stored(ModelSpec m) {
  m.interleave = false;
  m.context_parallel = false;
  m.pipeline_split = PipelineSplit::kEven;
  return m;
}

bool fits(const ModelSpec& m, const MemoryEstimate& e) { return e.total() <= m.gpu.memory_gb * kGiB; }

bool better(const Candidate& a, const Candidate& b) {
  const auto key = [](const Candidate& x) {
    return std::make_tuple(x.step.total(), x.memory.total(), x.config.tp, x.config.cp, x.config.pp,
                           x.config.micro_batch, x.config.virtual_stages);
  };
  return key(a) < key(b);
}

Result<std::vector<Candidate>> plan_parallelism(const ModelSpec& m, int gpus) {
  if (gpus < 1) return invalid("gpus must be at least 1, got " + std::to_string(gpus));
  if (gpus > kMaxGpus)
    return invalid("gpus must be at most " + std::to_string(kMaxGpus) + ", got " + std::to_string(gpus));
  const std::vector<ParallelConfig> configs = valid_configs(m, gpus);
  if (configs.empty())
    return invalid("no valid configuration of " + std::to_string(gpus) + " GPUs: tp must divide heads (" +
                   std::to_string(m.heads) + "), query_groups (" + std::to_string(m.query_groups) + ") and ffn (" +
                   std::to_string(m.ffn) + ") and be at most " + std::to_string(m.gpu.per_node) +
                   " (GPUs per node), pp at most " + std::to_string(m.layers) +
                   " (layers), and dp = gpus / (tp x pp) must divide global_batch (" + std::to_string(m.global_batch) +
                   ")");
  std::vector<Candidate> out;
  Candidate smallest;  // the valid configuration that needs the least memory
  bool any = false;
  for (const ParallelConfig& c : configs) {
    const MemoryEstimate mem = estimate_memory(m, c);
    if (fits(m, mem)) {
      out.push_back({c, mem, estimate_step(m, c)});
    } else if (!any || mem.total() < smallest.memory.total()) {
      smallest = {c, mem, {}};
      any = true;
    }
  }
  if (out.empty()) {
    const MemoryEstimate& e = smallest.memory;
    return invalid("the model (" + std::to_string(model_params(m)) + " parameters) fits on no configuration of " +
                   std::to_string(gpus) + " GPUs of " + gib(m.gpu.memory_gb * kGiB) +
                   ": the one that needs the least memory, " + config_name(smallest.config) + ", needs " +
                   gib(e.total()) + " per GPU of stage " + std::to_string(e.stage) + " (weights " + gib(e.weights) +
                   ", gradients " + gib(e.gradients) + ", optimizer " + gib(e.optimizer) + ", activations " +
                   gib(e.activations) + "), " + gib(e.total() - m.gpu.memory_gb * kGiB) + " more than a GPU has");
  }
  std::sort(out.begin(), out.end(), better);
  return out;
}

}  // namespace ptcfs::planner
