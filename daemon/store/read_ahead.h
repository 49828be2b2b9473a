// The page ranges a read reply is about to copy from mapped blobs, asked of the kernel ahead
// (POSIX_FADV_WILLNEED) exactly, when they are strided: a fault on a page not in the page cache
// reads ahead around it on its own (the file's readahead window), and for a strided slice, whose
// rows take a quarter of each blob row after tp 1 -> 4 along the last dimension, that read the
// whole blob to serve a quarter of it. Pages asked for here are in the cache (or under way) when
// the copy touches them, so no fault reads around them. A read that takes one contiguous range
// of a file is left to the kernel's readahead, which also reads ahead of the reader.
//
// Ranges of one file that touch or overlap, once rounded out to pages, are one range; a file
// with two or more ranges in one read is strided, and each of its ranges is asked for.
// Thread-safety: a value; one thread uses it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace ptcfs {

class ReadAhead {
 public:
  // `advise(fd, off, len)`: asks for bytes [off, off + len) of `fd` (page-aligned); the
  // default is posix_fadvise(POSIX_FADV_WILLNEED).
  using Advise = std::function<void(int fd, uint64_t off, uint64_t len)>;
  explicit ReadAhead(Advise advise = {});
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;
  ~ReadAhead() { flush(); }

  // Bytes [off, off + len) of file `fd` will be read.
  void add(int fd, uint64_t off, uint64_t len);
  // Asks for the strided ranges gathered so far, and starts afresh.
  void flush();

 private:
  struct Range {
    int fd;
    uint64_t begin, end;  // page-aligned
  };
  Advise advise_;
  std::vector<Range> ranges_;  // in the order read
};

}  // namespace ptcfs
