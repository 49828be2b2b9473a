#include "fs/mountpoint.h"

#include <dirent.h>
#include <libmount/libmount.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "ptc/base/log.h"

extern char** environ;

namespace ptcfs::fs {
namespace {

std::string real_path(const std::string& p) {
  char* real = ::realpath(p.c_str(), nullptr);
  std::string out = real ? real : p;
  std::free(real);
  return out;
}

// The device number of the newest mount at `path` (an absolute path without symlinks),
// from /proc/self/mountinfo; none when nothing is mounted there.
std::optional<dev_t> mounted_device(const std::string& path) {
  std::unique_ptr<libmnt_table, void (*)(libmnt_table*)> tb(mnt_new_table_from_file("/proc/self/mountinfo"),
                                                            mnt_unref_table);
  if (!tb) return std::nullopt;
  // Backward: the last entry for a path is the mount on top.
  libmnt_fs* fs = mnt_table_find_target(tb.get(), path.c_str(), MNT_ITER_BACKWARD);
  if (!fs || std::string(mnt_fs_get_target(fs)) != path) return std::nullopt;
  return mnt_fs_get_devno(fs);
}

// True when the FUSE mount at path has lost its daemon. A stat of the mount point may still
// be answered from the kernel's attribute cache, so this reads the directory, which needs
// the daemon.
bool is_stale(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) return errno == ENOTCONN;
  errno = 0;
  const bool dead = ::readdir(d) == nullptr && errno == ENOTCONN;
  ::closedir(d);
  return dead;
}

}  // namespace

Status detach_mount(const std::string& mp) {
  if (::umount2(mp.c_str(), MNT_DETACH) == 0) return Status::ok();
  const int err = errno;
  // Without CAP_SYS_ADMIN: the setuid helper, run directly.
  const char* argv[] = {"fusermount3", "-u", "-z", mp.c_str(), nullptr};
  pid_t pid = 0;
  if (posix_spawnp(&pid, "fusermount3", nullptr, nullptr, const_cast<char* const*>(argv), environ) != 0)
    return io_error("detaching mount " + mp, err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return io_error("detaching mount " + mp, err);
  return Status::ok();
}

Status prepare_mountpoint(const std::string& mp) {
  struct stat st {};
  if (::stat(mp.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      std::error_code ec;
      std::filesystem::create_directories(mp, ec);
      if (ec) return error(Code::kIo, "creating mount point " + mp + ": " + ec.message());
      return Status::ok();
    }
    if (errno != ENOTCONN) return io_error("mount point " + mp, errno);
    log::warn("{} is a stale mount (its daemon died); detaching it", mp);
    PTC_RETURN_IF_ERROR(detach_mount(mp));
    if (::stat(mp.c_str(), &st) != 0) return io_error("mount point " + mp, errno);
  }
  if (!S_ISDIR(st.st_mode)) return invalid("mount point " + mp + " is not a directory");
  const std::string rp = real_path(mp);
  if (mounted_device(rp)) {
    if (!is_stale(rp))
      return error(Code::kFailedPrecondition, "mount point " + mp + " is already mounted (another ptcfsd?)");
    log::warn("{} is a stale mount (its daemon died); detaching it", rp);
    PTC_RETURN_IF_ERROR(detach_mount(rp));
  }
  return Status::ok();
}

void raise_readahead(const std::string& mp, unsigned kb) {
  const std::string rp = real_path(mp);
  const auto dev = mounted_device(rp);
  if (!dev) return;
  const std::string bdi = std::to_string(major(*dev)) + ":" + std::to_string(minor(*dev));
  std::ofstream ra("/sys/class/bdi/" + bdi + "/read_ahead_kb");
  ra << kb << "\n";
  if (!ra) log::debug("could not raise readahead of {} (bdi {})", rp, bdi);
}

}  // namespace ptcfs::fs
