#include "fs/scratch_pool.h"

#include <mutex>
#include <vector>

namespace ptcfs::fs {
namespace {

constexpr size_t kKept = 16;        // blocks kept at most (FUSE threads each hold one or two)
constexpr size_t kGrain = 1 << 20;  // sizes rounded up to a multiple: a block serves any smaller request

struct Block {
  std::byte* mem;
  size_t size;
};

std::mutex g_mu;
std::vector<Block>& free_blocks() {
  static auto* blocks = new std::vector<Block>();  // never destroyed: blocks return after exit starts
  return *blocks;
}

void give_back(Block b) {
  {
    std::lock_guard lock(g_mu);
    auto& blocks = free_blocks();
    if (b.size <= kScratchMax && blocks.size() < kKept) {
      blocks.push_back(b);
      return;
    }
  }
  delete[] b.mem;
}

}  // namespace

std::shared_ptr<std::byte[]> scratch(size_t bytes) {
  Block b{nullptr, 0};
  {
    std::lock_guard lock(g_mu);
    auto& blocks = free_blocks();
    // The smallest block that fits, and not one over twice the request's size: a large block
    // serving small requests would leave the large ones to allocate anew.
    const size_t most = 2 * ((bytes + kGrain - 1) / kGrain * kGrain);
    size_t best = blocks.size();
    for (size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].size >= bytes && blocks[i].size <= most &&
          (best == blocks.size() || blocks[i].size < blocks[best].size))
        best = i;
    if (best < blocks.size()) {
      b = blocks[best];
      blocks[best] = blocks.back();
      blocks.pop_back();
    }
  }
  if (b.mem == nullptr) {
    b.size = (bytes + kGrain - 1) / kGrain * kGrain;
    b.mem = new std::byte[b.size];
  }
  return std::shared_ptr<std::byte[]>(b.mem, [b](std::byte*) { give_back(b); });
}

}  // namespace ptcfs::fs
