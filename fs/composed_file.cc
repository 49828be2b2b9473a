#include "fs/composed_file.h"

#include <algorithm>

namespace ptcfs::fs {

Status SegmentView::read(uint64_t off, uint64_t len, ReadBuffer& out) const {
  auto it = std::upper_bound(segs_.begin(), segs_.end(), off,
                             [](uint64_t p, const Segment& s) { return p < s.begin + s.len; });
  for (; len > 0 && it != segs_.end(); ++it) {
    const uint64_t in = off - it->begin;
    const uint64_t n = std::min(len, it->len - in);
    if (it->shard) {
      PTC_RETURN_IF_ERROR(c_->read_slice(*it->shard, it->slice, it->src + in, n, out));
    } else if (it->view) {
      PTC_RETURN_IF_ERROR(it->view->read(it->src + in, n, out));
    } else {
      out.add_mem(it->mem.data() + in, n);
    }
    off += n;
    len -= n;
  }
  return len == 0 ? Status::ok() : internal("composed view read past its end");
}

uint64_t ComposedFiles::end(const std::string& f) const {
  auto it = segs.find(f);
  return it == segs.end() || it->second.empty() ? 0 : it->second.back().begin + it->second.back().len;
}

void ComposedFiles::add(const std::string& f, Segment s) {
  s.begin = end(f);
  if (s.len) segs[f].push_back(std::move(s));
}

void ComposedFiles::mem(const std::string& f, std::string bytes) {
  Segment s;
  s.len = bytes.size();
  s.mem = std::move(bytes);
  add(f, std::move(s));
}

std::map<std::string, std::shared_ptr<const View>> ComposedFiles::views(const std::shared_ptr<const StepContent>& c,
                                                                        metrics::ViewKind kind) {
  std::map<std::string, std::shared_ptr<const View>> out;
  for (auto& [name, s] : segs) out.emplace(name, std::make_shared<SegmentView>(c, std::move(s), kind));
  return out;
}

const View& LazyFolder::file(const std::string& name) const {
  std::call_once(once_, [&] { files_ = build_(); });
  auto it = files_.find(name);
  return it == files_.end() ? empty_ : *it->second;
}

namespace {

class LazyView final : public View {
 public:
  LazyView(std::shared_ptr<const LazyFolder> folder, std::string name, uint64_t version, metrics::ViewKind kind,
           std::function<void(uint64_t)> on_read)
      : folder_(std::move(folder)),
        name_(std::move(name)),
        version_(version),
        kind_(kind),
        on_read_(std::move(on_read)) {}
  metrics::ViewKind kind() const override { return kind_; }
  uint64_t version() const override { return version_; }
  uint64_t size() const override { return folder_->file(name_).size(); }
  Status read(uint64_t off, uint64_t len, ReadBuffer& out) const override {
    PTC_RETURN_IF_ERROR(folder_->file(name_).read(off, len, out));
    if (on_read_) on_read_(len);
    return Status::ok();
  }

 private:
  std::shared_ptr<const LazyFolder> folder_;
  std::string name_;
  uint64_t version_;
  metrics::ViewKind kind_;
  std::function<void(uint64_t)> on_read_;
};

}  // namespace

std::shared_ptr<const View> lazy_folder_file(std::shared_ptr<const LazyFolder> folder, std::string name,
                                             uint64_t version, metrics::ViewKind kind,
                                             std::function<void(uint64_t)> on_read) {
  return std::make_shared<LazyView>(std::move(folder), std::move(name), version, kind, std::move(on_read));
}

}  // namespace ptcfs::fs
