#include "client/gpu/upload_plan.h"

#include <algorithm>

namespace ptcfs::gpu {

std::vector<Piece> cut_range(const std::vector<Piece>& spans, uint64_t off, uint64_t len) {
  std::vector<Piece> out;
  uint64_t at = 0;
  for (const Piece& s : spans) {
    if (len == 0) break;
    if (off >= at + s.len) {
      at += s.len;
      continue;
    }
    const uint64_t in = off - at;
    const uint64_t n = std::min(len, s.len - in);
    out.push_back(Piece{s.data ? s.data + in : nullptr, n, s.source});
    off += n;
    len -= n;
    at += s.len;
  }
  return out;
}

namespace {

struct Placed {
  Piece piece;
  uint64_t dst;
};

// Cuts one window (pieces of one source, by rising address, all inside [lo, hi)) into chunks.
void chunk_window(const std::vector<Placed>& w, const std::byte* lo, const std::byte* hi, const UploadOptions& o,
                  UploadPlan& plan) {
  size_t first = 0;  // pieces are by rising start: those before `first` end before this chunk
  for (const std::byte* a = lo; a < hi; a += o.chunk_bytes) {
    const std::byte* b = std::min<const std::byte*>(hi, a + o.chunk_bytes);
    Chunk c{a, static_cast<uint64_t>(b - a), {}, w.front().piece.source};
    while (first < w.size() && w[first].piece.data + w[first].piece.len <= a) ++first;
    for (size_t k = first; k < w.size() && w[k].piece.data < b; ++k) {
      const Placed& p = w[k];
      const std::byte* s = std::max(a, p.piece.data);
      const std::byte* e = std::min(b, p.piece.data + p.piece.len);
      if (s >= e) continue;
      c.segments.push_back(Segment{static_cast<uint64_t>(s - a), p.dst + static_cast<uint64_t>(s - p.piece.data),
                                   static_cast<uint64_t>(e - s)});
    }
    if (c.segments.empty()) continue;  // a gap longer than a chunk: nothing to stage
    // Stage only from the first to the last byte used.
    const uint64_t first = c.segments.front().src;
    uint64_t last = 0;
    for (Segment& s : c.segments) last = std::max(last, s.src + s.len);
    for (Segment& s : c.segments) s.src -= first;
    c.src = a + first;
    c.len = last - first;
    plan.staged_bytes += c.len;
    (c.direct() ? plan.direct_chunks : plan.gathered_chunks)++;
    plan.chunks.push_back(std::move(c));
  }
}

}  // namespace

UploadPlan plan_upload(const std::vector<Piece>& pieces, const UploadOptions& o) {
  UploadPlan plan;
  std::vector<Placed> data;
  uint64_t dst = 0;
  for (const Piece& p : pieces) {
    if (p.len == 0) continue;
    if (p.data) {
      data.push_back(Placed{p, dst});
    } else {
      plan.chunks.push_back(Chunk{nullptr, 0, {Segment{0, dst, p.len}}, 0});
      plan.zero_bytes += p.len;
    }
    dst += p.len;
  }
  // Windows: by source, then address; a stable sort keeps the destination order of equal
  // addresses (the same bytes read twice).
  std::stable_sort(data.begin(), data.end(), [](const Placed& a, const Placed& b) {
    return a.piece.source != b.piece.source ? a.piece.source < b.piece.source : a.piece.data < b.piece.data;
  });
  std::vector<std::pair<uint64_t, std::vector<Chunk>>> windows;  // first destination byte, chunks
  for (size_t i = 0; i < data.size();) {
    std::vector<Placed> w{data[i]};
    const std::byte* lo = data[i].piece.data;
    const std::byte* hi = lo + data[i].piece.len;
    size_t j = i + 1;
    for (; j < data.size() && data[j].piece.source == data[i].piece.source; ++j) {
      const Piece& p = data[j].piece;
      const uint64_t limit = std::max(o.gap_floor, p.len);
      if (p.data > hi && static_cast<uint64_t>(p.data - hi) > limit) break;
      w.push_back(data[j]);
      hi = std::max(hi, p.data + p.len);
    }
    uint64_t first = UINT64_MAX;
    for (const Placed& p : w) first = std::min(first, p.dst);
    UploadPlan part;
    chunk_window(w, lo, hi, o, part);
    plan.staged_bytes += part.staged_bytes;
    plan.direct_chunks += part.direct_chunks;
    plan.gathered_chunks += part.gathered_chunks;
    windows.emplace_back(first, std::move(part.chunks));
    i = j;
  }
  std::stable_sort(windows.begin(), windows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [first, chunks] : windows)
    for (Chunk& c : chunks) plan.chunks.push_back(std::move(c));
  return plan;
}

}  // namespace ptcfs::gpu
