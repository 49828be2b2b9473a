// The map of a file for the direct data path: the bytes of a view (fs/views.h) as runs of rows
// of files the client maps itself (transport/direct_protocol.h). Pieces of mapped blobs and of
// dataset files become pieces of those files (zero-copy), the rows of a strided slice one run,
// padding zeros, and bytes only in memory (headers, slices pulled from other nodes) are gathered
// into one sealed memfd passed with the others.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "fs/content.h"
#include "transport/direct_protocol.h"

namespace ptcfs {

struct FileMap {
  transport::direct::RunMap runs;  // version 2; runs.spans() is version 1
  std::vector<int> fds;            // the descriptors the runs index (borrowed, except memfd)
  int memfd = -1;                  // owned: closed with the map
  FileMap() = default;
  FileMap(FileMap&& o) noexcept : runs(std::move(o.runs)), fds(std::move(o.fds)), memfd(std::exchange(o.memfd, -1)) {}
  FileMap& operator=(FileMap&& o) noexcept {
    std::swap(runs, o.runs);
    std::swap(fds, o.fds);
    std::swap(memfd, o.memfd);
    return *this;
  }
  ~FileMap();
};

// The map of the bytes `rb` holds (a whole file read; rows it took stay runs of rows). Adjacent
// pieces of one descriptor merge.
Result<FileMap> map_of(const fs::ReadBuffer& rb);

}  // namespace ptcfs
