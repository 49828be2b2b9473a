// Indexing a dataset's source files (`ptcfs dataset add`): where every sample lies. Sample
// bytes stay in their files; the index is a table of (file, offset, bytes) per sample.
//
//   jsonl     every non-blank line is a sample and must be valid JSON; blank lines (only
//             spaces, tabs or '\r') are skipped. A record is the line with its '\n'; a
//             last line without one gets it supplied by the views (daemon/dataset/jsonl_index.h:
//             the files are scanned in chunks on every core).
//   megatron  FILES name indexed datasets as PREFIX, PREFIX.bin or PREFIX.idx; every
//             sequence of every .idx (ptc/formats/mmidx.h) is a sample, read from its .bin. All
//             must share one dtype.
// Samples are numbered in the order of FILES, then within each file.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "daemon/store/dataset_records.h"
#include "ptc/base/status.h"
#include "ptc/dataset.h"

namespace ptcfs {

struct DatasetIndex {
  ptc::DatasetFormat format = ptc::DatasetFormat::kJsonl;
  int dtype_code = 0;  // megatron
  std::vector<SourceFile> files;
  std::vector<SampleRecord> samples;
};

// Called with bytes read so far and the total.
using IndexProgress = std::function<void(uint64_t done, uint64_t total)>;

// Reads and validates the files; errors name the file and the line or sequence at fault.
Result<DatasetIndex> index_dataset(ptc::DatasetFormat format, const std::vector<std::string>& files,
                                   const IndexProgress& progress = {});

}  // namespace ptcfs
