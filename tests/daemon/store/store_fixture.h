// A small checkpoint for store tests (tp=2, pp=2, every kind of tensor) written as rank
// files, and checks that a store holds it byte for byte.
#pragma once

#include <xxhash.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/store/store.h"
#include "ptc/formats/safetensors.h"

namespace ptcfs::testing {

namespace stdfs = std::filesystem;

// tp=2, pp=2 over two layers, with a padded vocabulary, fused parts, a column split, a
// replicated layer tensor, a last-stage tensor and a scalar on every stage.
inline const std::string kPtcJson = R"({
  "parallelism": {"tp": 2, "pp": 2, "dp": 1},
  "num_layers": 2,
  "tensors": {
    "emb": {"dtype": "BF16", "shape": [10, 4], "tp_dim": 0, "pad_to": 4},
    "layers.0.qkv": {"dtype": "F32", "shape": [8, 3], "tp_dim": 0, "parts": 2, "layer": 0},
    "layers.1.dense": {"dtype": "F16", "shape": [3, 4], "tp_dim": 1, "layer": 1},
    "layers.1.ln": {"dtype": "F32", "shape": [5], "layer": 1},
    "final.w": {"dtype": "F32", "shape": [2, 2], "stage": "last"},
    "step": {"dtype": "I64", "shape": [], "stage": "all"}
  }
})";

using SliceBytes = std::map<std::pair<std::string, std::string>, std::string>;  // (shard, tensor) -> bytes

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(f.good());
}

// The bytes of one stored slice: a pattern unique to (shard, tensor) in the elements that
// pieces cover, zeros in the padding.
inline std::string slice_bytes(const ptc::Layout& l, const ptc::ShardId& shard, const ptc::Slice& s, uint32_t salt) {
  const size_t elem = ptc::dtype_size(l.tensor(s).dtype);
  std::string out(l.bytes(s), '\0');
  const ptc::Shape& shape = s.local_shape;
  uint32_t x = salt * 2654435761u + static_cast<uint32_t>(shard.t * 7919 + shard.p * 104729) +
               static_cast<uint32_t>(s.tensor) * 31337u;
  for (const auto& pc : s.pieces) {
    ptc::for_each_run(pc.local, pc.local, ptc::Box::of_shape(shape), elem, [&](const ptc::Run& r) {
      for (int64_t i = 0; i < r.len; ++i) {
        x = x * 1664525u + 1013904223u;
        out[static_cast<size_t>(r.dst + i)] = static_cast<char>((x >> 24) | 1);  // never zero
      }
    });
  }
  return out;
}

// Writes ckpt/ptc.json and one rank file per shard (tensors written in reverse name order,
// so file order differs from the layout's). Returns every slice's bytes.
inline SliceBytes write_checkpoint(const std::string& dir, const std::string& ptc_json, uint32_t salt = 1) {
  stdfs::create_directories(dir);
  write_file(dir + "/ptc.json", ptc_json);
  auto p = ptc::parse_ptc_json(ptc_json, "ptc.json");
  REQUIRE(p.is_ok());
  auto l = ptc::Layout::make(*p, p->parallelism);
  REQUIRE(l.is_ok());
  SliceBytes bytes;
  for (const auto& shard : l->shards()) {
    std::vector<formats::TensorDecl> decls;
    std::map<std::string, std::string> data;
    const auto& slices = l->slices(shard);
    for (auto it = slices.rbegin(); it != slices.rend(); ++it) {
      const auto& spec = l->tensor(*it);
      decls.push_back({spec.name, spec.dtype, it->local_shape});
      data[spec.name] = slice_bytes(*l, shard, *it, salt);
      bytes[{shard.name(), spec.name}] = data[spec.name];
    }
    auto sl = formats::layout_safetensors(decls);
    REQUIRE(sl.is_ok());
    std::string file = sl->header;
    for (const auto& e : sl->entries) {
      REQUIRE(e.begin == file.size() - sl->header.size());
      file += data[e.name];
    }
    REQUIRE(file.size() == sl->file_size());
    write_file(dir + "/" + shard.name() + ".safetensors", file);
  }
  return bytes;
}

inline std::set<std::string> blob_files(const std::string& data_dir) {
  std::set<std::string> out;
  for (const auto& e : stdfs::directory_iterator(data_dir + "/blobs")) out.insert(e.path().filename().string());
  return out;
}

inline std::unique_ptr<Store> open_store(const std::string& data_dir) {
  auto s = Store::open(data_dir);
  INFO(s.status().to_string());
  REQUIRE(s.is_ok());
  return std::move(s).value();
}

inline std::string read_all(const StepVersion& v, const ptc::ShardId& shard, size_t slice, uint64_t off, uint64_t len) {
  fs::ReadBuffer buf;
  const Status s = v.read_slice(shard, slice, off, len, buf);
  INFO(s.to_string());
  REQUIRE(s.is_ok());
  REQUIRE(buf.size() == len);
  std::string out(len, '\0');
  REQUIRE(buf.copy_to(reinterpret_cast<std::byte*>(out.data())).is_ok());
  return out;
}

inline std::shared_ptr<const StepVersion> find_step(const Store& store, const std::string& job,
                                                    const std::string& step) {
  auto snap = store.snapshot();
  auto it = snap->steps.find({job, step});
  REQUIRE(it != snap->steps.end());
  return it->second;
}

// Checks that (job, step) is version 1 of kPtcJson and every slice reads back as `want`,
// with a checksum of its bytes.
inline void check_step(const Store& store, const std::string& job, const std::string& step, const SliceBytes& want) {
  INFO("step " << job << "/" << step);
  const auto v = find_step(store, job, step);
  CHECK(v->job() == job);
  CHECK(v->step() == step);
  CHECK(v->version() == 1);
  const ptc::Layout& l = v->layout();
  CHECK(l.parallelism() == ptc::Parallelism{2, 2, 1});
  auto expected_ptc = ptc::parse_ptc_json(kPtcJson, "ptc.json");
  REQUIRE(expected_ptc.is_ok());
  CHECK(ptc::ptc_to_json(l.ptc()) == ptc::ptc_to_json(*expected_ptc));
  REQUIRE(l.shards().size() == 4);

  size_t seen = 0;
  uint64_t total = 0;
  for (const auto& shard : l.shards()) {
    const auto& slices = l.slices(shard);
    for (size_t j = 0; j < slices.size(); ++j) {
      const std::string& name = l.tensor(slices[j]).name;
      INFO("shard " << shard.name() << " tensor " << name);
      auto w = want.find({shard.name(), name});
      REQUIRE(w != want.end());
      const std::string& bytes = w->second;
      REQUIRE(l.bytes(slices[j]) == bytes.size());
      CHECK(read_all(*v, shard, j, 0, bytes.size()) == bytes);
      // A read that starts and ends inside the slice.
      if (bytes.size() > 5) CHECK(read_all(*v, shard, j, 3, bytes.size() - 5) == bytes.substr(3, bytes.size() - 5));
      const StoredSlice& ss = v->stored(shard, j);
      REQUIRE(ss.xxh3.has_value());
      CHECK(*ss.xxh3 == XXH3_64bits(bytes.data(), bytes.size()));
      uint64_t sum = 0;
      for (const auto& e : ss.extents) sum += e.len;
      CHECK(sum == bytes.size());
      total += bytes.size();
      ++seen;
    }
  }
  CHECK(seen == want.size());
  CHECK(v->total_bytes() == total);
}

}  // namespace ptcfs::testing
