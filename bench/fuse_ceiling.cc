// The machine's FUSE ceiling for reads: a minimal libfuse3 low-level server that serves one
// file, `data`, from a mapping of a file with fuse_reply_buf, and nothing else. The mount
// bench (bench/bench_mount.py) reads it beside ptcfs and tmpfs in the same run, so the first
// read row can say how far ptcfs is from what FUSE itself allows here (docs/BENCHMARKS.md).
//
// Usage: ptcfs_fuse_ceiling FILE MOUNTPOINT [THREADS]  (THREADS 0: the single-threaded loop;
// default 16, as ptcfsd). It mounts in the foreground and serves until unmounted or signalled.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* g_data = nullptr;
off_t g_size = 0;
constexpr fuse_ino_t kFile = 2;
constexpr char kName[] = "data";

void fill(fuse_ino_t ino, struct stat& st) {
  st = {};
  st.st_ino = ino;
  if (ino == FUSE_ROOT_ID) {
    st.st_mode = S_IFDIR | 0555;
    st.st_nlink = 2;
  } else {
    st.st_mode = S_IFREG | 0444;
    st.st_nlink = 1;
    st.st_size = g_size;
  }
}

void op_init(void*, fuse_conn_info* conn) {
  conn->max_write = 1 << 20;  // libfuse derives max_pages (1 MiB reads) from it, as ptcfsd
  conn->max_readahead = 1 << 20;
  conn->want |= FUSE_CAP_ASYNC_READ;
}

void op_lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (parent != FUSE_ROOT_ID || std::strcmp(name, kName) != 0) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  fuse_entry_param e{};
  e.ino = kFile;
  e.attr_timeout = e.entry_timeout = 3600;
  fill(kFile, e.attr);
  fuse_reply_entry(req, &e);
}

void op_getattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  if (ino != FUSE_ROOT_ID && ino != kFile) {
    fuse_reply_err(req, ENOENT);
    return;
  }
  struct stat st;
  fill(ino, st);
  fuse_reply_attr(req, &st, 3600);
}

void op_open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (ino != kFile) {
    fuse_reply_err(req, EISDIR);
    return;
  }
  fi->keep_cache = 1;
  fuse_reply_open(req, fi);
}

void op_read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info*) {
  if (off >= g_size) {
    fuse_reply_buf(req, nullptr, 0);
    return;
  }
  fuse_reply_buf(req, g_data + off, std::min<size_t>(size, static_cast<size_t>(g_size - off)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE MOUNTPOINT [THREADS]\n", argv[0]);
    return 2;
  }
  const unsigned threads = argc > 3 ? static_cast<unsigned>(std::atoi(argv[3])) : 16;
  const int fd = ::open(argv[1], O_RDONLY);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || st.st_size == 0) {
    std::fprintf(stderr, "%s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  g_size = st.st_size;
  g_data = static_cast<const char*>(::mmap(nullptr, static_cast<size_t>(g_size), PROT_READ, MAP_SHARED, fd, 0));
  if (g_data == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  fuse_lowlevel_ops ops{};
  ops.init = op_init;
  ops.lookup = op_lookup;
  ops.getattr = op_getattr;
  ops.open = op_open;
  ops.read = op_read;
  std::string o = "ro,fsname=ptcfs_ceiling";
  char a0[] = "ptcfs_fuse_ceiling", a1[] = "-o";
  char* args[] = {a0, a1, o.data()};
  fuse_args fargs = FUSE_ARGS_INIT(3, args);
  fuse_session* se = fuse_session_new(&fargs, &ops, sizeof ops, nullptr);
  if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[2]) != 0) return 1;
  int rc = 0;
  if (threads == 0) {
    rc = fuse_session_loop(se);
  } else {
    fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, threads);
    fuse_loop_cfg_set_idle_threads(cfg, 4);
    rc = fuse_session_loop_mt(se, cfg);
    fuse_loop_cfg_destroy(cfg);
  }
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return rc < 0 ? 1 : 0;
}
