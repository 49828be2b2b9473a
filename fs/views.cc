#include "fs/views.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <tuple>
#include <vector>

#include "ptc/base/log.h"
#include "ptc/formats/npy.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::fs {
namespace {

// Reads [off, off+len) of a file made of an in-memory header followed by a body, calling
// body(off_in_body, len) for the part past the header.
template <class Body>
Status read_header_then(const std::string& header, uint64_t off, uint64_t len, ReadBuffer& out, Body body) {
  if (off < header.size()) {
    const uint64_t n = std::min<uint64_t>(len, header.size() - off);
    out.add_mem(header.data() + off, n);
    off += n;
    len -= n;
  }
  if (len == 0) return Status::ok();
  return body(off - header.size(), len);
}

class BytesView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kMetadata; }
  explicit BytesView(std::string b) : b_(std::move(b)) {}
  uint64_t size() const override { return b_.size(); }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    out.add_mem(b_.data() + off, len);
    return Status::ok();
  }

 private:
  std::string b_;
};

// Bytes made by `make` when the file is first sized or read.
class LazyBytesView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kMetadata; }
  explicit LazyBytesView(std::function<std::string()> make) : make_(std::move(make)) {}
  uint64_t size() const override { return bytes().size(); }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    out.add_mem(bytes().data() + off, len);
    return Status::ok();
  }

 private:
  const std::string& bytes() const {
    std::call_once(once_, [&] { b_ = make_(); });
    return b_;
  }
  std::function<std::string()> make_;
  mutable std::once_flag once_;
  mutable std::string b_;
};

// A shard as one safetensors file. Its header (every slice's name, dtype, shape and offsets) is
// built when the file is first sized or read, not when the tree is: a step of 100,000 tensors
// rebuilds its tree at every change, and most of its shard files are never opened.
class SafetensorsView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kRankFile; }
  uint64_t version() const override { return c_->version(); }
  SafetensorsView(std::shared_ptr<const StepContent> c, ptc::ShardId shard) : c_(std::move(c)), shard_(shard) {}
  uint64_t size() const override {
    const auto* l = layout();
    return l ? l->file_size() : 1;  // one byte whose read fails (EIO, the log says why), not an empty file
  }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    const auto* l = layout();
    if (!l) return built_.status();
    return read_header_then(l->header, off, len, out, [&](uint64_t pos, uint64_t n) -> Status {
      // The first slice whose range ends after pos.
      auto it = std::upper_bound(l->entries.begin(), l->entries.end(), pos,
                                 [](uint64_t p, const formats::SafetensorsEntry& e) { return p < e.end; });
      for (; n > 0 && it != l->entries.end(); ++it) {
        const uint64_t in = pos - it->begin;
        const uint64_t take = std::min(n, it->end - pos);
        PTC_RETURN_IF_ERROR(c_->read_slice(shard_, static_cast<size_t>(it - l->entries.begin()), in, take, out));
        pos += take;
        n -= take;
      }
      return n == 0 ? Status::ok() : internal("safetensors view read past its end");
    });
  }

 private:
  // The file's layout, built once; null when it cannot be (built_ says why).
  const formats::SafetensorsLayout* layout() const {
    std::call_once(once_, [&] {
      built_ = shard_safetensors_layout(c_->layout(), shard_);
      if (!built_) log::error("{}.safetensors: {}", shard_.name(), built_.status().to_string());
    });
    return built_ ? &*built_ : nullptr;
  }

  std::shared_ptr<const StepContent> c_;
  ptc::ShardId shard_;
  mutable std::once_flag once_;
  mutable Result<formats::SafetensorsLayout> built_ = internal("not built");
};

class SliceNpyView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kSliceNpy; }
  uint64_t version() const override { return c_->version(); }
  SliceNpyView(std::shared_ptr<const StepContent> c, ptc::ShardId shard, size_t slice)
      : c_(std::move(c)), shard_(shard), slice_(slice) {}
  uint64_t size() const override { return header().size() + c_->layout().bytes(c_->layout().slices(shard_)[slice_]); }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    return read_header_then(header(), off, len, out,
                            [&](uint64_t pos, uint64_t n) { return c_->read_slice(shard_, slice_, pos, n, out); });
  }

 private:
  // Made on first use, not with the tree (which makes a view for every slice at every change).
  const std::string& header() const {
    std::call_once(once_, [&] {
      const auto& layout = c_->layout();
      const auto& sl = layout.slices(shard_)[slice_];
      header_ = formats::npy_header(layout.tensor(sl).dtype, sl.local_shape);
    });
    return header_;
  }

  std::shared_ptr<const StepContent> c_;
  ptc::ShardId shard_;
  size_t slice_;
  mutable std::once_flag once_;
  mutable std::string header_;
};

class FullNpyView final : public View {
 public:
  metrics::ViewKind kind() const override { return metrics::ViewKind::kFullNpy; }
  uint64_t version() const override { return c_->version(); }
  FullNpyView(std::shared_ptr<const StepContent> c, size_t tensor) : c_(std::move(c)), tensor_(tensor) {}
  uint64_t size() const override { return built().header.size() + built().body; }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    const Built& m = built();
    const auto& sources = m.sources;
    const auto& whole = m.whole;
    const size_t elem = m.elem;
    return read_header_then(m.header, off, len, out, [&](uint64_t pos, uint64_t n) -> Status {
      // Runs of every covering piece inside the window, put in destination order.
      struct R {
        int64_t dst, len, src;
        size_t source;
      };
      std::vector<R> runs;
      const auto& layout = c_->layout();
      for (size_t i = 0; i < sources.size(); ++i) {
        const auto& [shard, slice] = sources[i];
        const auto& sl = layout.slices(shard)[slice];
        const ptc::Box local = ptc::Box::of_shape(sl.local_shape);
        for (const auto& pc : sl.pieces) {
          std::vector<int64_t> shift(pc.local.rank());
          for (size_t d = 0; d < shift.size(); ++d) shift[d] = pc.global.lo[d] - pc.local.lo[d];
          ptc::for_each_run_in(pc.global, local.translated(shift), whole, elem, static_cast<int64_t>(pos),
                               static_cast<int64_t>(pos + n), [&](const ptc::Run& r) {
                                 runs.push_back(R{r.dst, r.len, r.src, i});
                               });
        }
      }
      std::sort(runs.begin(), runs.end(), [](const R& a, const R& b) { return a.dst < b.dst; });
      uint64_t at = pos;
      for (const R& r : runs) {
        if (static_cast<uint64_t>(r.dst) != at) return internal("full view: pieces do not tile the tensor");
        PTC_RETURN_IF_ERROR(c_->read_slice(sources[r.source].first, sources[r.source].second,
                                           static_cast<uint64_t>(r.src), static_cast<uint64_t>(r.len), out));
        at += static_cast<uint64_t>(r.len);
      }
      return at == pos + n ? Status::ok() : internal("full view: pieces do not tile the tensor");
    });
  }

 private:
  // What a read needs, made on first use, not with the tree (which makes a view for every tensor
  // at every change).
  struct Built {
    size_t elem = 1;
    ptc::Box whole;
    std::string header;
    uint64_t body = 0;
    std::vector<std::pair<ptc::ShardId, size_t>> sources;  // the slices covering the tensor
  };
  const Built& built() const {
    std::call_once(once_, [&] {
      const auto& spec = c_->layout().ptc().tensors[tensor_];
      built_.elem = ptc::dtype_size(spec.dtype);
      built_.whole = ptc::Box::of_shape(spec.shape);
      built_.header = formats::npy_header(spec.dtype, spec.shape);
      built_.body = static_cast<uint64_t>(ptc::num_elements(spec.shape)) * built_.elem;
      built_.sources = c_->layout().covering(tensor_);
    });
    return built_;
  }

  std::shared_ptr<const StepContent> c_;
  size_t tensor_;
  mutable std::once_flag once_;
  mutable Built built_;
};

}  // namespace

std::shared_ptr<const View> bytes_view(std::string bytes) { return std::make_shared<BytesView>(std::move(bytes)); }

std::shared_ptr<const View> lazy_bytes_view(std::function<std::string()> make) {
  return std::make_shared<LazyBytesView>(std::move(make));
}

Result<formats::SafetensorsLayout> shard_safetensors_layout(const ptc::Layout& layout, const ptc::ShardId& shard) {
  std::vector<formats::TensorDecl> decls;
  for (const auto& sl : layout.slices(shard)) {
    const auto& spec = layout.tensor(sl);
    decls.push_back(formats::TensorDecl{spec.name, spec.dtype, sl.local_shape});
  }
  return formats::layout_safetensors(decls);
}

std::shared_ptr<const View> shard_safetensors_view(std::shared_ptr<const StepContent> c, const ptc::ShardId& shard) {
  return std::make_shared<SafetensorsView>(std::move(c), shard);
}

std::shared_ptr<const View> slice_npy_view(std::shared_ptr<const StepContent> c, const ptc::ShardId& shard,
                                           size_t slice) {
  return std::make_shared<SliceNpyView>(std::move(c), shard, slice);
}

std::shared_ptr<const View> full_npy_view(std::shared_ptr<const StepContent> c, size_t tensor) {
  return std::make_shared<FullNpyView>(std::move(c), tensor);
}

}  // namespace ptcfs::fs
