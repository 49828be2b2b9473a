// Serving a peer's read: a window of bytes of a slab [lo, lo + len) (along the slab
// dimension) of a slice stored on this node, as spans of mapped blobs and zeros (no copy)
// with the XXH3 of those bytes. A whole slice is the slab [0, extent).
//
// Request: ReadRequest (daemon/cluster/change_record.h); reply {"xxh3": h} with n bytes:
// bytes [off, off + n) of the slab
// laid out row by row (ptc::SlabGeometry); the XXH3 of a window served before is looked up
// in `digests` rather than computed again. Refused: an unknown step, version, shard or
// tensor (not_found), a shard this node does not hold (unavailable), a slab or window
// outside the slice (out_of_range), more than max_bytes (resource_exhausted).
#pragma once

#include <cstdint>

#include "daemon/cluster/change_record.h"
#include "daemon/cluster/read_leases.h"
#include "daemon/cluster/slab_digests.h"
#include "daemon/store/store.h"
#include "transport/rpc.h"

namespace ptcfs {

// `digests`: the XXH3s of windows served before (null: every window is hashed). `leases`: the
// version read is held there when the request asks it to (ReadRequest::hold).
Result<transport::Reply> serve_slab_read(Store& store, const ReadRequest& req, uint64_t max_bytes,
                                         SlabDigests* digests = nullptr, ReadLeases* leases = nullptr);

}  // namespace ptcfs
