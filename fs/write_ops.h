// The write operations of the mount (fs/write_ops.cc): the save path of pending steps
// (docs/FORMATS.md "Saving into the mount"), passed to the WriteTarget. Internal to fs/:
// filesystem.cc registers them with libfuse. Each replies to its request itself; errors go
// to the kernel as errno (fs/errno_map.h).
//
// Thread-safety: called from any FUSE worker at once, as libfuse calls its operations.
#pragma once

#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include "fs/tree.h"

namespace ptcfs::fs {

void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode);
void op_create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi);
void op_write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi);
void op_flush(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi);
void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, fuse_file_info* fi);
void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi);
void op_unlink(fuse_req_t req, fuse_ino_t parent, const char* name);
void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char* name);
void op_rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
               unsigned int flags);
// Opening a pending file for writing (from op_open).
int do_open_for_write(const Node& n, fuse_file_info* fi);

}  // namespace ptcfs::fs
