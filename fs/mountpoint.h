// The life of the mount point around a FUSE session: made ready before mounting (created
// when missing, a stale mount of a daemon that died detached, a live one refused), the
// kernel's readahead for it raised after. The mount table is read with libmount, which
// decodes the escapes /proc writes for paths with spaces and other odd characters.
#pragma once

#include <string>

#include "ptc/base/status.h"

namespace ptcfs::fs {

// Makes `mp` ready to mount on: creates it when missing, detaches a stale FUSE mount (its
// daemon died: ENOTCONN), refuses a live mount (kFailedPrecondition).
Status prepare_mountpoint(const std::string& mp);

// Detaches the mount at `mp` lazily: umount2(MNT_DETACH), or, without the privilege,
// fusermount3 -u -z run directly (no shell).
Status detach_mount(const std::string& mp);

// Raises the readahead of the filesystem mounted at `mp` to `kb` KiB (best effort). The
// kernel caps FUSE readahead at the bdi default (128 KiB), so sequential reads arrive as
// 128 KiB requests although max_pages allows 1 MiB; a larger read_ahead_kb lets them
// arrive as 1 MiB requests (8x fewer round trips).
void raise_readahead(const std::string& mp, unsigned kb);

}  // namespace ptcfs::fs
