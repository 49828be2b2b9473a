// The map of a file for the direct data path: the bytes of a view (fs/views.h) as spans of
// files the client maps itself. Pieces of mapped blobs and of dataset files become spans of
// those files (zero-copy), padding becomes zeros, and bytes only in memory (headers, slices
// pulled from other nodes) are gathered into one sealed memfd passed with the others.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "fs/content.h"
#include "transport/direct_protocol.h"

namespace ptcfs {

struct FileMap {
  std::vector<transport::direct::Span> spans;
  std::vector<int> fds;  // the descriptors spans index (borrowed, except memfd)
  int memfd = -1;        // owned: closed with the map
  FileMap() = default;
  FileMap(FileMap&& o) noexcept : spans(std::move(o.spans)), fds(std::move(o.fds)), memfd(std::exchange(o.memfd, -1)) {}
  FileMap& operator=(FileMap&& o) noexcept {
    std::swap(spans, o.spans);
    std::swap(fds, o.fds);
    std::swap(memfd, o.memfd);
    return *this;
  }
  ~FileMap();
};

// The map of the bytes `rb` holds (a whole file read). Adjacent spans of one descriptor merge.
ptc::Result<FileMap> map_of(const fs::ReadBuffer& rb);

}  // namespace ptcfs
