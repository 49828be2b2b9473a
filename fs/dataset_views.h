// The files of a dataset in the mount (MNT/<job>/data/<name>/), built from one DatasetContent:
//
//   state.json            num_samples, seed, global_batch, dp, epoch, consumed, dropped, and
//                         format, samples_per_epoch, version (docs/FORMATS.md)
//   dp{d}.jsonl           JSONL datasets: the lines rank d reads, from `consumed` to the end
//                         of the epoch, in order
//   dp{d}.bin, dp{d}.idx  Megatron datasets: the same as a Megatron indexed dataset (MMIDIDX),
//                         one document per sequence, so Megatron's own loader reads it
//
// Record files are virtual: a read maps its range onto the records it covers and asks the
// content for their bytes; no sample is copied to build them.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fs/content.h"
#include "fs/views.h"

namespace ptcfs::fs {

// The state.json document, and its text (with a trailing newline).
nlohmann::json dataset_state(const DatasetContent& c);
std::string dataset_state_json(const DatasetContent& c);

// Every file of the dataset's folder, by name.
std::vector<std::pair<std::string, std::shared_ptr<const View>>> dataset_views(
    const std::shared_ptr<const DatasetContent>& c);

}  // namespace ptcfs::fs
