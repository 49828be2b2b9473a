// The host half of the GPU load (client/gpu/): upload plans and their executor, run against a
// host double of the device that gathers with the kernel's own segment copy; chunks staged by
// memcpy from the mapping and by pread of the mapped file (PTCFS_GPU_STAGE) give the same bytes.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "client/gpu/upload.h"
#include "client/gpu/upload_plan.h"

using namespace ptcfs;
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
  Status wait(size_t) override { return Status::ok(); }
  Status copy(size_t i, const Chunk& c, const std::byte* host, std::byte* dst) override {
    REQUIRE(host == staging_[i].data());
    if (c.direct()) {
      std::memcpy(dst + c.segments[0].dst, host, c.len);
      ++direct;
      return Status::ok();
    }
    std::vector<unsigned char> scratch(c.len);
    std::memcpy(scratch.data(), host, c.len);
    for (const Segment& s : c.segments)
      for (uint64_t t = 0; t < 4; ++t)
        copy_segment_share(s, scratch.data(), reinterpret_cast<unsigned char*>(dst), t, 4);
    ++gathered;
    return Status::ok();
  }
  Status zero(std::byte* dst, uint64_t len) override {
    std::memset(dst, 0, len);
    return Status::ok();
  }
  Status finish() override { return Status::ok(); }
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

// Blobs written to unlinked files, for staging by pread: files[i] is blob i's bytes, its base the
// blob's memory (the mapping's place).
class BlobFiles {
 public:
  explicit BlobFiles(const std::vector<std::vector<std::byte>>& blobs) {
    for (const auto& b : blobs) {
      char name[] = "/tmp/ptcfs-gpu-upload-XXXXXX";
      const int fd = ::mkstemp(name);
      REQUIRE(fd >= 0);
      ::unlink(name);
      REQUIRE(::write(fd, b.data(), b.size()) == static_cast<ssize_t>(b.size()));
      files.push_back(SourceFile{b.data(), b.size(), fd});
    }
  }
  ~BlobFiles() {
    for (const SourceFile& f : files)
      if (f.fd >= 0) ::close(f.fd);
  }
  BlobFiles(const BlobFiles&) = delete;
  BlobFiles& operator=(const BlobFiles&) = delete;
  std::vector<SourceFile> files;
};

// What the range holds, read from the files by pread.
std::vector<std::byte> expected_from_files(const std::vector<Piece>& pieces, const std::vector<SourceFile>& files) {
  std::vector<std::byte> out;
  for (const Piece& p : pieces) {
    const size_t at = out.size();
    out.resize(at + p.len, std::byte{0});
    if (!p.data) continue;
    const SourceFile& f = files[p.source];
    REQUIRE(::pread(f.fd, out.data() + at, p.len, p.data - f.base) == static_cast<ssize_t>(p.len));
  }
  return out;
}

// Uploads `pieces` through a host device; checks every byte and that each destination byte is
// written by exactly one segment or zero fill. With `files` (by source), uploads again staged by
// pread from them, and checks the same bytes, which are also the files'.
UploadPlan upload_and_check(const std::vector<Piece>& pieces, const UploadOptions& o, HostDevice& dev,
                            const std::vector<SourceFile>& files = {}) {
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
  if (!files.empty()) {
    REQUIRE(expected_from_files(pieces, files) == want);
    std::vector<std::byte> read(want.size(), std::byte{0xa5});
    REQUIRE(run_upload(plan, read.data(), dev, copier, nullptr, files));
    REQUIRE(read == got);
  }
  return plan;
}

}  // namespace

TEST_CASE("a contiguous range goes up as direct chunks of one staging slot each", "[gpu]") {
  const std::vector<std::vector<std::byte>> blobs{pattern(20 << 20, 1)};
  const auto& blob = blobs[0];
  const BlobFiles files(blobs);
  const std::vector<Piece> spans{{blob.data(), blob.size(), 0}};
  HostDevice dev(3, 8 << 20);
  UploadOptions o;
  o.chunk_bytes = 8 << 20;
  // Chunks of 8 MiB and of 4 MiB less 2000 bytes, starting and ending off page boundaries: the
  // copy and the pread are split over the threads.
  const UploadPlan plan = upload_and_check(cut_range(spans, 1000, (20 << 20) - 2000), o, dev, files.files);
  CHECK(plan.chunks.size() == 3);
  CHECK(plan.direct_chunks == 3);
  CHECK(plan.gathered_chunks == 0);
  CHECK(plan.staged_bytes == (20 << 20) - 2000);
  CHECK(dev.direct == 6);  // copied, then read
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
  const std::vector<std::vector<std::byte>> blobs{pattern(32 * 512, 3), pattern(32 * 512, 4)};
  const auto &a = blobs[0], &b = blobs[1];
  const BlobFiles files(blobs);
  std::vector<Piece> rows;
  for (int r = 0; r < 32; ++r) {
    rows.push_back(Piece{a.data() + r * 512, 512, 0});
    rows.push_back(Piece{b.data() + r * 512, 512, 1});
  }
  HostDevice dev(2, 1 << 20);
  const UploadPlan plan = upload_and_check(rows, UploadOptions{1 << 20, 64 << 10}, dev, files.files);
  CHECK(plan.chunks.size() == 2);
  CHECK(plan.staged_bytes == 2 * 32 * 512);
  CHECK(plan.chunks[0].src == a.data());  // windows in order of their first destination byte
  CHECK(plan.chunks[1].src == b.data());
  CHECK(plan.chunks[0].source == 0);
  CHECK(plan.chunks[1].source == 1);
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

TEST_CASE("random maps and ranges upload byte for byte with small slots, copied and read", "[gpu]") {
  std::mt19937 rng(42);
  std::vector<std::vector<std::byte>> blobs;
  for (uint32_t i = 0; i < 4; ++i) blobs.push_back(pattern(1 << 16, 100 + i));
  const BlobFiles files(blobs);
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
    upload_and_check(cut_range(spans, off, len), o, dev, files.files);
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

TEST_CASE("the parallel staging read reads every byte once, at any offset", "[gpu]") {
  const std::vector<std::vector<std::byte>> blobs{pattern((5 << 20) + 5000, 10)};
  const BlobFiles files(blobs);
  const int fd = files.files[0].fd;
  ParallelCopy copier(3);
  for (const uint64_t off : {0ul, 777ul, 4096ul}) {
    for (const uint64_t len : {uint64_t{(5 << 20) + 123}, uint64_t{1000}, uint64_t{0}}) {
      std::vector<std::byte> dst(len + 1, std::byte{0x77});
      REQUIRE(copier.read(dst.data(), fd, off, len));
      CHECK(std::memcmp(dst.data(), blobs[0].data() + off, len) == 0);
      CHECK(dst[len] == std::byte{0x77});
    }
  }
}

TEST_CASE("a source file that fails a pread is an error naming the chunk, not a crash", "[gpu]") {
  const std::vector<std::vector<std::byte>> blobs{pattern(3 << 20, 11)};
  BlobFiles files(blobs);
  const std::vector<Piece> spans{{blobs[0].data(), blobs[0].size(), 0}};
  const UploadPlan plan = plan_upload(cut_range(spans, 10, (3 << 20) - 20), UploadOptions{1 << 20, 64 << 10});
  REQUIRE(plan.chunks.size() == 3);
  HostDevice dev(2, 1 << 20);
  ParallelCopy copier(2);
  std::vector<std::byte> got(3 << 20);

  // Cut short behind our back: the last chunk reads past the end.
  REQUIRE(::ftruncate(files.files[0].fd, (2 << 20) + 4096) == 0);
  Status s = run_upload(plan, got.data(), dev, copier, nullptr, files.files);
  CHECK(s.code() == Code::kCorrupt);
  CHECK(s.message().starts_with("staging chunk 3 of 3: reading source 0 by pread: pread at offset "));

  // A descriptor that is not open.
  ::close(files.files[0].fd);
  files.files[0].fd = -1;
  s = run_upload(plan, got.data(), dev, copier, nullptr, files.files);
  CHECK(s.code() == Code::kIo);
  CHECK(s.message().starts_with("staging chunk 1 of 3: reading source 0 by pread: pread of "));
  CHECK(s.message().ends_with(std::strerror(EBADF)));

  // Files that do not hold the chunks' bytes (a wrong mapping): refused before any read.
  const std::vector<SourceFile> elsewhere{SourceFile{got.data(), got.size(), -1}};
  s = run_upload(plan, got.data(), dev, copier, nullptr, elsewhere);
  CHECK(s.code() == Code::kInternal);
  CHECK(s.message() == "staging chunk 1 of 3: reading source 0 by pread: the chunk lies outside the source's mapping");
}

TEST_CASE("PTCFS_GPU_STAGE picks the staging: pread by default, copy, else an error", "[gpu]") {
  const auto with = [](const char* v) {
    if (v)
      ::setenv("PTCFS_GPU_STAGE", v, 1);
    else
      ::unsetenv("PTCFS_GPU_STAGE");
    auto r = stage_from_env();
    ::unsetenv("PTCFS_GPU_STAGE");
    return r;
  };
  CHECK(*with(nullptr) == Stage::kPread);
  CHECK(*with("") == Stage::kPread);
  CHECK(*with("copy") == Stage::kCopy);
  CHECK(*with("pread") == Stage::kPread);
  const auto bad = with("mmap");
  REQUIRE(!bad);
  CHECK(bad.status().code() == Code::kInvalidArgument);
  CHECK(bad.status().message() == "PTCFS_GPU_STAGE must be copy or pread, not 'mmap'");
}
