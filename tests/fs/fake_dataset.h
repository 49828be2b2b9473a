// A test double of fs::DatasetContent (fs/content.h): the daemon implements it over its
// dataset store (daemon/store/dataset_store.h); here the records are strings in memory.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fs/content.h"

namespace ptcfs::fs::testing {

class FakeDataset final : public DatasetContent {
 public:
  // `records` by sample id; `order`: the epoch's permutation of them.
  FakeDataset(uint64_t version, ptc::DatasetSpec spec, ptc::DatasetPosition pos, std::vector<std::string> records,
              std::vector<uint32_t> order, int dtype_code = 0)
      : spec_(spec),
        pos_(pos),
        version_(version),
        records_(std::move(records)),
        order_(std::move(order)),
        dtype_code_(dtype_code) {}

  const ptc::DatasetSpec& spec() const override { return spec_; }
  const ptc::DatasetPosition& position() const override { return pos_; }
  int dtype_code() const override { return dtype_code_; }
  uint64_t version() const override { return version_; }
  int64_t mtime() const override { return 1700000100; }
  const std::vector<uint32_t>& order() const override { return order_; }
  uint64_t record_bytes(uint32_t sample) const override { return records_.at(sample).size(); }
  Status read_records(const std::vector<Piece>& pieces, ReadBuffer& out) const override {
    for (const auto& p : pieces) {
      if (p.off + p.len > records_.at(p.sample).size()) return internal("read past the end of a record");
      out.add_mem(records_.at(p.sample).data() + p.off, p.len);
    }
    return Status::ok();
  }

 private:
  ptc::DatasetSpec spec_;
  ptc::DatasetPosition pos_;
  uint64_t version_;
  std::vector<std::string> records_;
  std::vector<uint32_t> order_;
  int dtype_code_;
};

// A JSONL dataset of 4 records of 8 bytes, global batch 2, read by 2 DP ranks from the start.
inline std::shared_ptr<const DatasetContent> small_jsonl(uint64_t version) {
  ptc::DatasetSpec spec;
  spec.num_samples = 4;
  spec.global_batch = 2;
  ptc::DatasetPosition pos;
  pos.dp = 2;
  return std::make_shared<FakeDataset>(
      version, spec, pos, std::vector<std::string>{"{\"a\":0}\n", "{\"a\":1}\n", "{\"a\":2}\n", "{\"a\":3}\n"},
      std::vector<uint32_t>{2, 0, 3, 1});
}

}  // namespace ptcfs::fs::testing
