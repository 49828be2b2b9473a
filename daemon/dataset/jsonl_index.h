// The lines of JSONL files as samples (docs/ARCHITECTURE.md "Datasets"): every non-blank
// line must be valid JSON (daemon/dataset/json_check.h); blank lines (only spaces, tabs or
// '\r') are skipped. A record is the line with its '\n'; a last line without one gets
// kSupplyNewline.
//
// Each file is cut into chunks scanned (memchr for newlines) on every core: a chunk owns the
// lines that start in it, and reads on past its end to finish its last one. A file is read
// where it lies, through a read-only mapping, its lines checked in place under the SIGBUS
// guard (daemon/store/guarded_copy.h: the file may be cut short meanwhile); where mmap
// fails, each chunk is read with pread into a buffer (read on until its last line ends) and
// its lines scanned there the same way. The results are joined in file order, so samples,
// line numbers and the error reported (the first in file order) are those of a scan line by
// line.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "daemon/store/dataset_records.h"
#include "daemon/store/file_util.h"
#include "ptc/base/status.h"

namespace ptcfs {

struct JsonlInput {
  const File* file = nullptr;
  uint64_t size = 0;  // as indexed: a file shorter when read is an error
};

struct JsonlScanOptions {
  uint64_t chunk_bytes = 8 << 20;
  unsigned threads = 0;  // 0: one per core
  bool map = true;       // false: every chunk read with pread (tests both ways)
  // When set, the bytes read with pread are added to it (a mapped scan adds none): what a
  // test observes of how far the chunks read on past their ends.
  std::atomic<uint64_t>* pread_bytes = nullptr;
};

// Appends the samples of `files` (file numbers their positions) to `out`. `advance(bytes)`
// is called, one call at a time, as chunks finish. Errors name the file and line at fault.
Status index_jsonl_files(const std::vector<JsonlInput>& files, std::vector<SampleRecord>& out,
                         const std::function<void(uint64_t)>& advance, const JsonlScanOptions& options = {});

}  // namespace ptcfs
