// The host half of the GPU load (transport/gpu/): upload plans and their executor, run against a
// host double of the device that gathers with the kernel's own segment copy.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <vector>

#include "transport/gpu/upload.h"
#include "transport/gpu/upload_plan.h"

using namespace ptcfs::gpu;

namespace {

// Device memory is a host vector; a gathered chunk is copied to scratch, then every segment is
// copied by 4 "threads" of copy_segment_share, as the kernel's block does.
class HostDevice final : public Device {
 public:
  HostDevice(size_t slots, uint64_t slot_bytes)
      : slot_bytes_(slot_bytes), staging_(slots, std::vector<std::byte>(slot_bytes)) {}
  size_t slots() const override { return staging_.size(); }
  uint64_t slot_bytes() const override { return slot_bytes_; }
  std::byte* staging(size_t i) override { return staging_[i].data(); }
  ptc::Status wait(size_t) override { return ptc::Status::ok(); }
  ptc::Status copy(size_t i, const Chunk& c, const std::byte* host, std::byte* dst) override {
    REQUIRE(host == staging_[i].data());
    if (c.direct()) {
      std::memcpy(dst + c.segments[0].dst, host, c.len);
      ++direct;
      return ptc::Status::ok();
    }
    std::vector<unsigned char> scratch(c.len);
    std::memcpy(scratch.data(), host, c.len);
    for (const Segment& s : c.segments)
      for (uint64_t t = 0; t < 4; ++t)
        copy_segment_share(s, scratch.data(), reinterpret_cast<unsigned char*>(dst), t, 4);
    ++gathered;
    return ptc::Status::ok();
  }
  ptc::Status zero(std::byte* dst, uint64_t len) override {
    std::memset(dst, 0, len);
    return ptc::Status::ok();
  }
  ptc::Status finish() override { return ptc::Status::ok(); }
  size_t direct = 0, gathered = 0;

 private:
  uint64_t slot_bytes_;
  std::vector<std::vector<std::byte>> staging_;
};

std::vector<std::byte> pattern(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 rng(seed);
  for (auto& b : v) b = std::byte(rng() & 0xff);
  return v;
}

// What the range holds: the pieces' bytes in order.
std::vector<std::byte> expected(const std::vector<Piece>& pieces) {
  std::vector<std::byte> out;
  for (const Piece& p : pieces) {
    if (p.data)
      out.insert(out.end(), p.data, p.data + p.len);
    else
      out.insert(out.end(), p.len, std::byte{0});
  }
  return out;
}

// Uploads `pieces` through a host device; checks every byte and that each destination byte is
// written by exactly one segment or zero fill.
UploadPlan upload_and_check(const std::vector<Piece>& pieces, const UploadOptions& o, HostDevice& dev) {
  const UploadPlan plan = plan_upload(pieces, o);
  const std::vector<std::byte> want = expected(pieces);
  std::vector<int> writes(want.size(), 0);
  for (const Chunk& c : plan.chunks) {
    REQUIRE(c.len <= o.chunk_bytes);
    for (const Segment& s : c.segments) {
      if (c.src) REQUIRE(s.src + s.len <= c.len);
      for (uint64_t i = 0; i < s.len; ++i) ++writes[s.dst + i];
    }
  }
  size_t wrong = 0;
  for (int w : writes) wrong += w != 1;
  REQUIRE(wrong == 0);
  std::vector<std::byte> got(want.size(), std::byte{0x5a});
  ParallelCopy copier(2);
  REQUIRE(run_upload(plan, got.data(), dev, copier));
  REQUIRE(got == want);
  return plan;
}

}  // namespace

TEST_CASE("a contiguous range goes up as direct chunks of one staging slot each", "[gpu]") {
  const auto blob = pattern(20 << 20, 1);
  const std::vector<Piece> spans{{blob.data(), blob.size(), 0}};
  HostDevice dev(3, 8 << 20);
  UploadOptions o;
  o.chunk_bytes = 8 << 20;
  const UploadPlan plan = upload_and_check(cut_range(spans, 1000, (20 << 20) - 2000), o, dev);
  CHECK(plan.chunks.size() == 3);
  CHECK(plan.direct_chunks == 3);
  CHECK(plan.gathered_chunks == 0);
  CHECK(plan.staged_bytes == (20 << 20) - 2000);
  CHECK(dev.direct == 3);
}

TEST_CASE("half rows of a column split go up as one window and are gathered on the device", "[gpu]") {
  // tp1 -> tp2 along dimension 1: rank 0 holds the first 1 KiB of each 2 KiB row.
  const auto blob = pattern(64 * 2048, 2);
  std::vector<Piece> rows;
  for (int r = 0; r < 64; ++r) rows.push_back(Piece{blob.data() + r * 2048, 1024, 7});
  HostDevice dev(2, 1 << 20);
  UploadOptions o;
  o.chunk_bytes = 1 << 20;
  const UploadPlan plan = upload_and_check(rows, o, dev);
  CHECK(plan.chunks.size() == 1);
  CHECK(plan.gathered_chunks == 1);
  CHECK(plan.chunks[0].segments.size() == 64);
  CHECK(plan.staged_bytes == 63 * 2048 + 1024);  // the window, gaps included, not the blob
  CHECK(dev.gathered == 1);
}

TEST_CASE("rows merged from two sources (tp2 -> tp1 along dimension 1) make one window per source", "[gpu]") {
  const auto a = pattern(32 * 512, 3), b = pattern(32 * 512, 4);
  std::vector<Piece> rows;
  for (int r = 0; r < 32; ++r) {
    rows.push_back(Piece{a.data() + r * 512, 512, 0});
    rows.push_back(Piece{b.data() + r * 512, 512, 1});
  }
  HostDevice dev(2, 1 << 20);
  const UploadPlan plan = upload_and_check(rows, UploadOptions{1 << 20, 64 << 10}, dev);
  CHECK(plan.chunks.size() == 2);
  CHECK(plan.staged_bytes == 2 * 32 * 512);
  CHECK(plan.chunks[0].src == a.data());  // windows in order of their first destination byte
  CHECK(plan.chunks[1].src == b.data());
}

TEST_CASE("pieces far apart in one source are not merged, and zeros are filled on the device", "[gpu]") {
  const auto blob = pattern(4 << 20, 5);
  const std::vector<Piece> pieces{{blob.data(), 4096, 0}, {nullptr, 300, 0}, {blob.data() + (3 << 20), 4096, 0}};
  HostDevice dev(2, 1 << 20);
  const UploadPlan plan = upload_and_check(pieces, UploadOptions{1 << 20, 64 << 10}, dev);
  CHECK(plan.staged_bytes == 8192);  // not the 3 MiB between them
  CHECK(plan.zero_bytes == 300);
  CHECK(plan.direct_chunks == 2);
}

TEST_CASE("random maps and ranges upload byte for byte with small slots", "[gpu]") {
  std::mt19937 rng(42);
  std::vector<std::vector<std::byte>> blobs;
  for (uint32_t i = 0; i < 4; ++i) blobs.push_back(pattern(1 << 16, 100 + i));
  for (int round = 0; round < 300; ++round) {
    std::vector<Piece> spans;
    const int n = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < n; ++k) {
      const uint32_t src = rng() % 5;  // 4: zeros
      const uint64_t len = 1 + rng() % 3000;
      if (src == 4) {
        spans.push_back(Piece{nullptr, len, 0});
      } else {
        const uint64_t off = rng() % ((1 << 16) - len);
        spans.push_back(Piece{blobs[src].data() + off, len, src});
      }
    }
    uint64_t total = 0;
    for (const Piece& p : spans) total += p.len;
    const uint64_t off = rng() % total, len = rng() % (total - off + 1);
    UploadOptions o;
    o.chunk_bytes = 512 + rng() % 8192;
    o.gap_floor = rng() % 4096;
    HostDevice dev(1 + rng() % 3, o.chunk_bytes);
    upload_and_check(cut_range(spans, off, len), o, dev);
  }
}

TEST_CASE("the parallel staging copy copies every byte once", "[gpu]") {
  const auto src = pattern((5 << 20) + 123, 9);
  std::vector<std::byte> dst(src.size());
  ParallelCopy copier(3);
  copier.copy(dst.data(), src.data(), src.size());
  CHECK(dst == src);
  std::vector<std::byte> small(1000);
  copier.copy(small.data(), src.data(), small.size());
  CHECK(std::memcmp(small.data(), src.data(), 1000) == 0);
}
