// The S3 tier's disk budget (docs/OPERATIONS.md "A disk budget"): while the blobs take more
// than the budget, the blobs of the steps read least recently whose durable copy is of the
// version this node serves are evicted, and a read of one fetches it back from the copy first.
//
// - Evicting a blob: its bytes are mapped into the copy's rank files (evicted_blob.h) and
//   hashed, the record is written to the metadata, then the file goes (BlobStore::evict).
//   Never evicted: a blob a dataset uses, or a version replaced but still held by a reader, or a
//   step whose copy is not of its version (repartitioned or changed since the copy was made), or
//   a step read or committed in the last 10 s (in use: the budget is exceeded meanwhile).
// - Fetching back (BlobStore's refill, on the reading thread): ranged GETs of exactly the
//   mapped bytes, 4 in flight, into DATA/blobs/<id>.refill, checked against the record's XXH3,
//   synced, renamed into place; then the record goes. A copy changed or damaged since is never
//   served: the read fails (EIO) naming the object, and the blob stays evicted, as it does while
//   S3 cannot be reached.
//
// Thread-safety: pass() runs on the tier's worker; refills run on any reading thread, one per
// blob at a time (BlobStore::file).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/durable/copy_restore.h"
#include "daemon/durable/durable_plan.h"
#include "daemon/durable/evicted_blob.h"
#include "daemon/store/kv.h"
#include "ptc/base/status.h"
#include "transport/s3_client.h"

namespace ptcfs {
class Store;
class StepVersion;
}  // namespace ptcfs

namespace ptcfs::durable {

class DiskBudget {
 public:
  // `store` must outlive this object; `s3` reads the copies (a client of its own: a read
  // fetching a blob back does not wait for the tier's uploads). Notes the blobs an earlier run
  // evicted, and sets the store's refill.
  DiskBudget(Store& store, std::unique_ptr<transport::S3Client> s3, uint64_t budget_bytes);
  ~DiskBudget();  // unsets the refill (one under way finishes)
  DiskBudget(const DiskBudget&) = delete;
  DiskBudget& operator=(const DiskBudget&) = delete;

  // Evicts until the blobs take at most the budget; `copy_of(v)` says whether the durable copy
  // of v's step is of v; `stopping()` ends it between two blobs. Forgets evicted blobs no version
  // uses any more.
  void pass(const std::function<bool(const StepVersion&)>& copy_of, const std::function<bool()>& stopping);

  // Shards `shards` (indices in layout.shards()) of version `version` of job/step, whose origin
  // is `origin`, over the step's durable copy (copy_restore.h), asked with this object's client
  // (a stopped S3 costs about 20 s). The copy must be whole (its ptc.json there) and of that
  // version, or of `copy_origin`'s (the version the peers' durable records name: the same tensors
  // at the copy's own layout, read from its ptc.json); nullopt for a copy of other tensors (another
  // step once saved under the name), kNotFound while there is no whole copy (no ptc.json). The
  // blobs are evicted and pending (BlobStore::create_evicted) and their records put in `b`; on an
  // error none is left.
  struct FromCopy {
    CopyRestore shards;
    VersionId copy;  // the version the copy is of (its manifest's)
  };
  Result<std::optional<FromCopy>> restore(const std::string& job, const std::string& step, uint64_t version,
                                          const std::string& origin, const std::string& copy_origin,
                                          const ptc::Layout& layout, const std::vector<size_t>& shards, WriteBatch& b);

 private:
  struct Refiller;
  Status evict(uint64_t blob, std::vector<CopyRange> ranges, uint64_t& freed);
  void forget_unused();

  Store& store_;
  std::shared_ptr<Refiller> refiller_;
  const uint64_t budget_;
};

}  // namespace ptcfs::durable
