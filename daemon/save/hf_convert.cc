// SaveService's half of a stock save_pretrained into the mount (daemon/save/hf_save.h): the rename
// of each temporary to its safetensors name, the check at each close, and the conversion.
#include <cstring>

#include "daemon/save/hf_save.h"
#include "daemon/save/save_service.h"
#include "daemon/save/staged_file.h"
#include "ptc/base/log.h"

namespace ptcfs {

Status SaveService::rename_hf(const std::string& job, const std::string& step, const std::string& from,
                              const std::string& to) {
  auto s = find(job, step);
  if (!s) return error(Code::kPermissionDenied, job + "/" + step + " is not being saved");
  MutexLock lock(s->mu);
  if (s->committing || s->removed || s->converting)
    return error(Code::kPermissionDenied, s->name() + " is no longer pending");
  auto it = s->staged.find(from);
  if (it == s->staged.end()) return not_found(s->name() + "/" + from + " does not exist");
  if (s->staged.count(to)) return error(Code::kAlreadyExists, s->name() + "/" + to + " exists");
  s->staged[to] = it->second;
  s->staged.erase(it);
  s->stamp = std::make_shared<int>(0);
  return Status::ok();
}

Status SaveService::hf_closed(const std::shared_ptr<PendingStep>& s) {
  std::map<std::string, bool> closed;
  std::optional<std::string> index;
  {
    MutexLock lock(s->mu);
    if (s->committing || s->removed || s->converting) return Status::ok();
    for (const auto& [rel, f] : s->staged) {
      closed[rel] = f->closed();
      if (rel == kHfIndexFile) index = f->text();
    }
  }
  PTC_ASSIGN_OR_RETURN(bool complete, hf_save_complete(closed, index, s->name()));
  if (!complete) return Status::ok();
  {
    MutexLock lock(s->mu);
    if (s->committing || s->removed || s->converting) return Status::ok();  // another close won
    s->converting = true;
  }
  // save_pretrained returns with this close: a load right after it must find the step, in the
  // store and in the mount (a close holds no lock of the kernel's that the refresh needs).
  PTC_RETURN_IF_ERROR(commit_converted(s, "stock save_pretrained", convert_hf(s)));
  changed();
  return Status::ok();
}

Result<DcpSave> SaveService::convert_hf(const std::shared_ptr<PendingStep>& s) {
  std::map<std::string, std::shared_ptr<StagedFile>> staged;
  {
    MutexLock lock(s->mu);
    staged = s->staged;
  }
  const std::string where = s->name();
  std::vector<std::string> names;
  for (const auto& [rel, f] : staged) {
    PTC_RETURN_IF_ERROR(f->seal().status());
    names.push_back(rel);
  }
  auto file = [&](const std::string& name) -> Result<std::shared_ptr<StagedFile>> {
    auto it = staged.find(name);
    if (it == staged.end()) return not_found(where + "/" + name + " was not written");
    return it->second;
  };
  formats::HfReader io{[&]() -> Result<std::vector<std::string>> { return names; },
                       [&](const std::string& name) -> Result<std::string> {
                         PTC_ASSIGN_OR_RETURN(auto f, file(name));
                         return f->text();
                       },
                       [&](const std::string& name) -> Result<formats::SafetensorsHeader> {
                         PTC_ASSIGN_OR_RETURN(auto f, file(name));
                         auto read_at = [f](uint64_t off, void* buf, size_t len) -> Result<size_t> {
                           PTC_ASSIGN_OR_RETURN(
                               std::string got,
                               f->read(off, std::min<uint64_t>(len, f->size() - std::min(off, f->size()))));
                           std::memcpy(buf, got.data(), got.size());
                           return got.size();
                         };
                         return formats::read_safetensors_header(f->size(), read_at, where + "/" + name);
                       }};
  PTC_ASSIGN_OR_RETURN(const formats::HfCheckpoint ck, formats::read_hf_checkpoint(where, io));
  PTC_ASSIGN_OR_RETURN(auto config, file(formats::kHfConfigFile));
  PTC_ASSIGN_OR_RETURN(const std::string name, hf_template_for(config->text(), where));
  PTC_ASSIGN_OR_RETURN(const formats::PtcTemplate tmpl, formats::builtin_template(name));
  PTC_ASSIGN_OR_RETURN(DcpSave save, plan_hf_save(ck, tmpl, where));
  const DcpFileReader read = [&](const std::string& name, uint64_t off, uint64_t len) -> Result<std::string> {
    PTC_ASSIGN_OR_RETURN(auto f, file(name));
    return f->read(off, len);
  };
  PTC_RETURN_IF_ERROR(write_dcp_tensors(*this, s->job, s->step, save, read));
  log::info("stock save_pretrained {}: {} tensors with template {}, {} bytes from {} files", where,
            save.ptc.tensors.size(), name, save.bytes, ck.files.size());
  return save;
}

}  // namespace ptcfs
