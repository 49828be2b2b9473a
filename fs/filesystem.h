// The FUSE filesystem (libfuse3 low-level API, multithreaded loop). Committed steps are
// read-only; with a WriteTarget, new jobs and steps can be made and pending steps written
// (docs/FORMATS.md "Saving into the mount"; fs/write_ops.cc).
//
// The filesystem serves the current Tree; refresh() builds a new one from the source and
// swaps it in. Lookup counts are not tracked: a node lives as long as a tree holds it, and
// a file handle holds its view, so forget() has nothing to free. An inode that is no longer
// in the current tree answers ESTALE, except through handles opened before.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fs/content.h"
#include "ptc/base/status.h"

namespace ptcfs::fs {

struct MountOptions {
  std::string mountpoint;
  bool allow_other = true;  // training processes may run as other users
  unsigned max_threads = 16;
  bool debug = false;  // libfuse's request log
  // The direct socket (daemon/direct/direct_server.h): the mount shows its path in the hidden
  // file MNT/.ptcfs-direct (fs/tree.h), so a client finds it from any path of the mount. Empty: none.
  std::string direct_socket;
  // The size past which a step's hf/ view starts a new safetensors file (fs/hf_views.h).
  uint64_t hf_shard_bytes = 5'000'000'000;
};

class View;

class Filesystem {
 public:
  using Source = std::function<Contents()>;

  // Mounts at opts.mountpoint. A stale mount there (a daemon that died) is detached first;
  // a live one is an error. `target` (may be null: read-only; must outlive the mount) takes
  // the writes; the source then shows its pending steps too.
  // Process-wide: mount installs a SIGUSR1 handler (a no-op without SA_RESTART, replacing any
  // other), with which stop() wakes the loop thread out of its wait. The process must not use
  // SIGUSR1 for anything else while a filesystem is mounted.
  static Result<std::unique_ptr<Filesystem>> mount(const MountOptions& opts, Source source,
                                                   WriteTarget* target = nullptr);
  ~Filesystem();  // stops the loop if running and unmounts

  // Rebuilds the tree from the source; safe from any thread.
  Status refresh();
  // The view of the committed file at `path` (relative to the mount root, '/'-separated) in
  // the current tree: what an open() of it would read, holding its version. kNotFound when
  // there is none, kInvalidArgument for a folder, kFailedPrecondition for a file of a step
  // still being saved.
  Result<std::shared_ptr<const View>> open_view(const std::string& path) const;
  // Serves requests until stop() or an external unmount; blocks.
  Status run();
  // Ends run() and unmounts; safe from any thread and from a signal-handling thread.
  void stop();

  class Impl;

 private:
  explicit Filesystem(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ptcfs::fs
