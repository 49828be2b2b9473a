#include "fs/views.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::fs {
namespace {

// Reads [off, off+len) of a file made of an in-memory header followed by a body, calling
// body(off_in_body, len) for the part past the header.
template <class Body>
ptc::Status read_header_then(const std::string& header, uint64_t off, uint64_t len, ReadBuffer& out, Body body) {
  if (off < header.size()) {
    const uint64_t n = std::min<uint64_t>(len, header.size() - off);
    out.add_mem(header.data() + off, n);
    off += n;
    len -= n;
  }
  if (len == 0) return ptc::Status::ok();
  return body(off - header.size(), len);
}

class BytesView final : public View {
 public:
  ptc::metrics::ViewKind kind() const override { return ptc::metrics::ViewKind::kMetadata; }
  explicit BytesView(std::string b) : b_(std::move(b)) {}
  uint64_t size() const override { return b_.size(); }
  ptc::Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    out.add_mem(b_.data() + off, len);
    return ptc::Status::ok();
  }

 private:
  std::string b_;
};

class SafetensorsView final : public View {
 public:
  ptc::metrics::ViewKind kind() const override { return ptc::metrics::ViewKind::kRankFile; }
  uint64_t version() const override { return c_->version(); }
  SafetensorsView(std::shared_ptr<const StepContent> c, ptc::ShardId shard, ptc::SafetensorsLayout l)
      : c_(std::move(c)), shard_(shard), l_(std::move(l)) {}
  uint64_t size() const override { return l_.file_size(); }
  ptc::Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    return read_header_then(l_.header, off, len, out, [&](uint64_t pos, uint64_t n) -> ptc::Status {
      // The first slice whose range ends after pos.
      auto it = std::upper_bound(l_.entries.begin(), l_.entries.end(), pos,
                                 [](uint64_t p, const ptc::SafetensorsEntry& e) { return p < e.end; });
      for (; n > 0 && it != l_.entries.end(); ++it) {
        const uint64_t in = pos - it->begin;
        const uint64_t take = std::min(n, it->end - pos);
        PTC_RETURN_IF_ERROR(c_->read_slice(shard_, static_cast<size_t>(it - l_.entries.begin()), in, take, out));
        pos += take;
        n -= take;
      }
      return n == 0 ? ptc::Status::ok() : ptc::internal("safetensors view read past its end");
    });
  }

 private:
  std::shared_ptr<const StepContent> c_;
  ptc::ShardId shard_;
  ptc::SafetensorsLayout l_;
};

class SliceNpyView final : public View {
 public:
  ptc::metrics::ViewKind kind() const override { return ptc::metrics::ViewKind::kSliceNpy; }
  uint64_t version() const override { return c_->version(); }
  SliceNpyView(std::shared_ptr<const StepContent> c, ptc::ShardId shard, size_t slice)
      : c_(std::move(c)), shard_(shard), slice_(slice) {
    const auto& layout = c_->layout();
    const auto& sl = layout.slices(shard)[slice];
    header_ = ptc::npy_header(layout.tensor(sl).dtype, sl.local_shape);
    body_ = layout.bytes(sl);
  }
  uint64_t size() const override { return header_.size() + body_; }
  ptc::Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    return read_header_then(header_, off, len, out,
                            [&](uint64_t pos, uint64_t n) { return c_->read_slice(shard_, slice_, pos, n, out); });
  }

 private:
  std::shared_ptr<const StepContent> c_;
  ptc::ShardId shard_;
  size_t slice_;
  std::string header_;
  uint64_t body_ = 0;
};

class FullNpyView final : public View {
 public:
  ptc::metrics::ViewKind kind() const override { return ptc::metrics::ViewKind::kFullNpy; }
  uint64_t version() const override { return c_->version(); }
  FullNpyView(std::shared_ptr<const StepContent> c, size_t tensor) : c_(std::move(c)), tensor_(tensor) {
    const auto& spec = c_->layout().ptc().tensors[tensor];
    elem_ = ptc::dtype_size(spec.dtype);
    whole_ = ptc::Box::of_shape(spec.shape);
    header_ = ptc::npy_header(spec.dtype, spec.shape);
    body_ = static_cast<uint64_t>(ptc::num_elements(spec.shape)) * elem_;
    sources_ = c_->layout().covering(tensor);
  }
  uint64_t size() const override { return header_.size() + body_; }
  ptc::Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    return read_header_then(header_, off, len, out, [&](uint64_t pos, uint64_t n) -> ptc::Status {
      // Runs of every covering piece inside the window, put in destination order.
      struct R {
        int64_t dst, len, src;
        size_t source;
      };
      std::vector<R> runs;
      const auto& layout = c_->layout();
      for (size_t i = 0; i < sources_.size(); ++i) {
        const auto& [shard, slice] = sources_[i];
        const auto& sl = layout.slices(shard)[slice];
        const ptc::Box local = ptc::Box::of_shape(sl.local_shape);
        for (const auto& pc : sl.pieces) {
          std::vector<int64_t> shift(pc.local.rank());
          for (size_t d = 0; d < shift.size(); ++d) shift[d] = pc.global.lo[d] - pc.local.lo[d];
          ptc::for_each_run_in(pc.global, local.translated(shift), whole_, elem_, static_cast<int64_t>(pos),
                               static_cast<int64_t>(pos + n), [&](const ptc::Run& r) {
                                 runs.push_back(R{r.dst, r.len, r.src, i});
                               });
        }
      }
      std::sort(runs.begin(), runs.end(), [](const R& a, const R& b) { return a.dst < b.dst; });
      uint64_t at = pos;
      for (const R& r : runs) {
        if (static_cast<uint64_t>(r.dst) != at) return ptc::internal("full view: pieces do not tile the tensor");
        PTC_RETURN_IF_ERROR(c_->read_slice(sources_[r.source].first, sources_[r.source].second,
                                           static_cast<uint64_t>(r.src), static_cast<uint64_t>(r.len), out));
        at += static_cast<uint64_t>(r.len);
      }
      return at == pos + n ? ptc::Status::ok() : ptc::internal("full view: pieces do not tile the tensor");
    });
  }

 private:
  std::shared_ptr<const StepContent> c_;
  size_t tensor_;
  size_t elem_ = 1;
  ptc::Box whole_;
  std::string header_;
  uint64_t body_ = 0;
  std::vector<std::pair<ptc::ShardId, size_t>> sources_;
};

}  // namespace

std::shared_ptr<const View> bytes_view(std::string bytes) { return std::make_shared<BytesView>(std::move(bytes)); }

ptc::Result<std::shared_ptr<const View>> shard_safetensors_view(std::shared_ptr<const StepContent> c,
                                                                const ptc::ShardId& shard) {
  const auto& layout = c->layout();
  std::vector<ptc::TensorDecl> decls;
  for (const auto& sl : layout.slices(shard)) {
    const auto& spec = layout.tensor(sl);
    decls.push_back(ptc::TensorDecl{spec.name, spec.dtype, sl.local_shape});
  }
  PTC_ASSIGN_OR_RETURN(auto l, ptc::layout_safetensors(decls));
  return std::shared_ptr<const View>(std::make_shared<SafetensorsView>(std::move(c), shard, std::move(l)));
}

std::shared_ptr<const View> slice_npy_view(std::shared_ptr<const StepContent> c, const ptc::ShardId& shard,
                                           size_t slice) {
  return std::make_shared<SliceNpyView>(std::move(c), shard, slice);
}

std::shared_ptr<const View> full_npy_view(std::shared_ptr<const StepContent> c, size_t tensor) {
  return std::make_shared<FullNpyView>(std::move(c), tensor);
}

}  // namespace ptcfs::fs
