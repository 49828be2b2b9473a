// The direct data path's wire format on the node's Unix socket (docs/FORMATS.md "Direct
// socket"). A client names a file of the mount; the daemon answers with the file's map (its
// bytes as spans of files it passes along, or zeros) and the descriptors (SCM_RIGHTS), and
// holds the file's version until the client closes the connection.
//
// A message is a 16-byte header ("PTCD", then the JSON length, the binary length and the
// number of descriptors, u32 little-endian each) carrying the first descriptors, one more
// byte per further batch of descriptors, then the JSON and the binary part. Used by the
// daemon (daemon/direct/) and by libptcfs_client (client/direct_client.h); it depends on
// nothing but libc and ptc/base/status.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::transport::direct {

// A run of the file's bytes: `len` bytes at `off` of descriptor `src` (an index into the
// message's descriptors), or zeros (src == kZeros).
struct Span {
  int32_t src = 0;
  uint64_t off = 0;
  uint64_t len = 0;
};
inline constexpr int32_t kZeros = -1;
inline constexpr size_t kSpanBytes = 24;

struct Message {
  std::string json;
  std::string binary;
  std::vector<int> fds;  // owned by the receiver: close them
};

struct Limits {
  size_t max_json = 1 << 20;
  size_t max_binary = size_t{1} << 30;
  size_t max_fds = 1 << 16;
};

// Sends one message; the descriptors are duplicated into the receiver (this side keeps its own).
Status send_message(int sock, const std::string& json, const std::string& binary, const std::vector<int>& fds);
// Receives one message. kUnavailable when the peer closed the connection before a header
// (a clean end), kInvalidArgument for a malformed one; descriptors received are closed on
// error.
Result<Message> recv_message(int sock, const Limits& limits = {});

std::string encode_spans(const std::vector<Span>& spans);
Result<std::vector<Span>> decode_spans(const std::string& binary, size_t nfds);

// Map version 2 (asked for with "map": 2 in an open, answered with "map": 2 by a daemon that
// knows it): the file's bytes as runs of rows, so that a slice a repartition left strided is one
// run per tensor rather than one span per piece of every row. Run i is `rows` rows, each the run's
// pieces in order; piece j of row r is `len` bytes at `off + r * stride` of descriptor `src`, or
// zeros (src == kZeros). A version 1 span is a run of one row of one piece.
struct Piece {
  int32_t src = 0;
  uint64_t off = 0, len = 0, stride = 0;
};

class RunMap {
 public:
  struct Run {
    uint64_t rows = 1;
    uint32_t first = 0, count = 0;  // pieces()[first, first + count)
  };
  // One row of one piece: appended to the last run when that is one row of one piece that it
  // continues (same descriptor, next offset; zeros after zeros).
  void add(int32_t src, uint64_t off, uint64_t len);
  // `rows` rows of `pieces` (empty pieces left out; nothing for no bytes). A run that is one
  // piece of one row, or whose rows lie back to back in one descriptor, is added as add() of it.
  void add_rows(uint64_t rows, const std::vector<Piece>& pieces);

  const std::vector<Run>& runs() const { return runs_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  uint64_t size() const { return size_; }
  // Every piece of every row, in order, adjacent ones merged: the version 1 map.
  std::vector<Span> spans() const;

 private:
  friend Result<RunMap> decode_runs(const std::string& binary, size_t nfds);
  std::vector<Run> runs_;
  std::vector<Piece> pieces_;
  uint64_t size_ = 0;
};

// Version 2's binary part: per run, u64 rows, u32 pieces, u32 zero, then per piece i32 src, u32
// zero, u64 off, u64 len, u64 stride (little-endian).
inline constexpr size_t kRunBytes = 16, kPieceBytes = 32;
std::string encode_runs(const RunMap& map);
// kInvalidArgument for a map cut short, a run of no rows or pieces, a descriptor out of range, or
// offsets or a size that overflow 64 bits.
Result<RunMap> decode_runs(const std::string& binary, size_t nfds);

// Binds (server) or connects (client) a Unix stream socket at `path`, also when the path is
// longer than sockaddr_un allows (through /proc/self/fd/ of its directory). Close-on-exec.
Result<int> listen_unix(const std::string& path, int backlog = 64);
Result<int> connect_unix(const std::string& path);

}  // namespace ptcfs::transport::direct
