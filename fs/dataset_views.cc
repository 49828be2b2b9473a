#include "fs/dataset_views.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "ptc/formats/mmidx.h"

namespace ptcfs::fs {
namespace {

// The records of one rank's samples, back to back.
class RecordsView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kDataset; }
  uint64_t version() const override { return c_->version(); }
  RecordsView(std::shared_ptr<const DatasetContent> c, std::vector<uint32_t> samples)
      : c_(std::move(c)), samples_(std::move(samples)), starts_(samples_.size() + 1, 0) {
    for (size_t i = 0; i < samples_.size(); ++i) starts_[i + 1] = starts_[i] + c_->record_bytes(samples_[i]);
  }
  uint64_t size() const override { return starts_.back(); }
  // The size of each record, in file order.
  std::vector<uint64_t> record_sizes() const {
    std::vector<uint64_t> out(samples_.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = starts_[i + 1] - starts_[i];
    return out;
  }

  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    // The last record starting at or before off.
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin()) - 1;
    std::vector<DatasetContent::Piece> pieces;
    for (; len > 0 && i < samples_.size(); ++i) {
      const uint64_t in = off - starts_[i];
      const uint64_t take = std::min(len, starts_[i + 1] - off);
      if (take > 0) pieces.push_back({samples_[i], in, take});
      off += take;
      len -= take;
    }
    if (len != 0) return internal("dataset view read past its end");
    return c_->read_records(pieces, out);
  }

 private:
  std::shared_ptr<const DatasetContent> c_;
  std::vector<uint32_t> samples_;
  std::vector<uint64_t> starts_;  // of each record in the file, then the file's size
};

}  // namespace

nlohmann::json dataset_state(const DatasetContent& c) {
  const auto& s = c.spec();
  const auto& p = c.position();
  return {{"format", ptc::format_name(s.format)},
          {"num_samples", s.num_samples},
          {"seed", s.seed},
          {"global_batch", s.global_batch},
          {"dp", p.dp},
          {"epoch", p.epoch},
          {"consumed", p.consumed},
          {"batch_offset", p.batch_offset},
          {"dropped", ptc::epoch_dropped(s, p)},
          {"samples_per_epoch", ptc::epoch_end(s, p)},
          {"version", c.version()}};
}

std::string dataset_state_json(const DatasetContent& c) { return dataset_state(c).dump(2) + "\n"; }

std::vector<std::pair<std::string, std::shared_ptr<const View>>> dataset_views(
    const std::shared_ptr<const DatasetContent>& c) {
  std::vector<std::pair<std::string, std::shared_ptr<const View>>> files;
  files.emplace_back("state.json", bytes_view(dataset_state_json(*c)));
  const auto& spec = c->spec();
  const auto& pos = c->position();
  for (int d = 0; d < pos.dp; ++d) {
    auto view = std::make_shared<RecordsView>(c, ptc::rank_samples(c->order(), spec, pos, d));
    const std::string stem = "dp" + std::to_string(d);
    if (spec.format == ptc::DatasetFormat::kJsonl) {
      files.emplace_back(stem + ".jsonl", std::move(view));
      continue;
    }
    files.emplace_back(stem + ".idx", bytes_view(formats::render_mmidx(c->dtype_code(), view->record_sizes())));
    files.emplace_back(stem + ".bin", std::move(view));
  }
  return files;
}

}  // namespace ptcfs::fs
