// The C interface of libptcfs_client (client/ptcfs_client.h) over DirectFile.
#include "client/ptcfs_client.h"

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "ptc/live_plan.h"
#include "ptc/model.h"
#include "client/c_error.h"
#include "client/direct_client.h"
#include "client/gpu/cuda_device.h"
#include "client/gpu/device_read.h"

struct ptcfs_file {
  std::unique_ptr<ptcfs::client::DirectFile> f;
};

using ptcfs::client::set_error;

extern "C" {

ptcfs_file* ptcfs_open(const char* path, const char* socket, char* err, size_t errlen) {
  try {
    if (!path) {
      set_error(err, errlen, "invalid_argument: no path");
      return nullptr;
    }
    auto f = ptcfs::client::DirectFile::open(path, socket ? socket : "");
    if (!f) {
      set_error(err, errlen, f.status().to_string());
      return nullptr;
    }
    return new ptcfs_file{std::move(f).value()};
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
    return nullptr;
  }
}

void ptcfs_close(ptcfs_file* f) { delete f; }

uint64_t ptcfs_size(const ptcfs_file* f) { return f->f->size(); }
uint64_t ptcfs_version(const ptcfs_file* f) { return f->f->version(); }
size_t ptcfs_span_count(const ptcfs_file* f) { return f->f->spans().size(); }

int ptcfs_span(const ptcfs_file* f, size_t i, const void** data, uint64_t* len) {
  const auto& spans = f->f->spans();
  if (i >= spans.size()) return -1;
  *data = spans[i].data;
  *len = spans[i].len;
  return 0;
}

const void* ptcfs_contiguous(const ptcfs_file* f, uint64_t off, uint64_t len) { return f->f->contiguous(off, len); }

int ptcfs_read(const ptcfs_file* f, uint64_t off, uint64_t len, void* dst, char* err, size_t errlen) {
  auto s = f->f->read(off, len, dst);
  if (s) return 0;
  set_error(err, errlen, s.to_string());
  return -1;
}

size_t ptcfs_mapping_count(const ptcfs_file* f) { return f->f->mappings().size(); }

int ptcfs_mapping(const ptcfs_file* f, size_t i, const void** data, uint64_t* len) {
  const auto& maps = f->f->mappings();
  if (i >= maps.size()) return -1;
  *data = maps[i].data;
  *len = maps[i].len;
  return 0;
}

int ptcfs_mapping_fd(const ptcfs_file* f, size_t i) { return i < f->f->mappings().size() ? f->f->fd(i) : -1; }

int ptcfs_locate(const ptcfs_file* f, size_t n, const uint64_t* off, const uint64_t* len, int64_t* mapping,
                 uint64_t* at, char* err, size_t errlen) {
  try {
    std::vector<ptcfs::client::DirectFile::Location> where(n);
    auto s = f->f->locate(n, off, len, where.data());
    if (!s) {
      set_error(err, errlen, s.to_string());
      return -1;
    }
    for (size_t k = 0; k < n; ++k) {
      mapping[k] = where[k].mapping;
      at[k] = where[k].at;
    }
    return 0;
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
    return -1;
  }
}

int ptcfs_read_many(const ptcfs_file* f, size_t n, const uint64_t* off, const uint64_t* len, void* const* dst,
                    char* err, size_t errlen) {
  try {
    auto s = f->f->read_many(n, off, len, dst);
    if (s) return 0;
    set_error(err, errlen, s.to_string());
    return -1;
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
    return -1;
  }
}

int ptcfs_gpu_available(char* err, size_t errlen) {
  auto s = ptcfs::gpu::gpu_available();
  if (s) return 0;
  set_error(err, errlen, s.to_string());
  return -1;
}

int ptcfs_read_device(const ptcfs_file* f, uint64_t off, uint64_t len, void* dst, void* stream,
                      ptcfs_device_stats* stats, char* err, size_t errlen) {
  try {
    ptcfs::gpu::UploadStats st;
    auto s = ptcfs::gpu::read_to_device(*f->f, off, len, dst, stream, &st);
    if (!s) {
      set_error(err, errlen, s.to_string());
      return -1;
    }
    if (stats)
      *stats = ptcfs_device_stats{st.staged_bytes, st.zero_bytes, st.chunks,  st.direct_chunks, st.gathered_chunks,
                                  st.plan_ns,      st.stage_ns,   st.wait_ns, st.total_ns};
    return 0;
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
    return -1;
  }
}

char* ptcfs_live_plan(const char* ptc_json, const char* from, const char* to, char* err, size_t errlen) {
  try {
    if (!ptc_json || !from || !to) {
      set_error(err, errlen, "invalid_argument: ptcfs_live_plan needs a ptc.json text and two configs");
      return nullptr;
    }
    auto ptc = ptcfs::ptc::parse_ptc_json(ptc_json, "ptc.json");
    if (!ptc) {
      set_error(err, errlen, ptc.status().to_string());
      return nullptr;
    }
    auto f = ptcfs::ptc::parse_parallelism(from);
    auto t = ptcfs::ptc::parse_parallelism(to);
    if (!f || !t) {
      set_error(err, errlen, (!f ? f.status() : t.status()).to_string());
      return nullptr;
    }
    auto plan = ptcfs::ptc::make_live_plan(*ptc, *f, *t);
    if (!plan) {
      set_error(err, errlen, plan.status().to_string());
      return nullptr;
    }
    const std::string text = ptcfs::ptc::live_plan_json(*ptc, *f, *t, *plan);
    char* out = static_cast<char*>(std::malloc(text.size() + 1));
    if (!out) {
      set_error(err, errlen, "internal: out of memory for a live plan of " + std::to_string(text.size()) + " bytes");
      return nullptr;
    }
    std::memcpy(out, text.c_str(), text.size() + 1);
    return out;
  } catch (const std::exception& e) {  // nothing may cross the C boundary
    set_error(err, errlen, std::string("internal: ") + e.what());
    return nullptr;
  }
}

void ptcfs_free(void* p) { std::free(p); }

}  // extern "C"
