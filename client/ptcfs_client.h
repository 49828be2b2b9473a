/* libptcfs_client, C interface (for ctypes and other languages): read a file of a ptcfs
 * mount without FUSE, through the node's direct socket. The C++ interface and the full
 * contract are in client/direct_client.h.
 *
 * Ownership: ptcfs_open returns a handle the caller must give to ptcfs_close. Every pointer
 * obtained from a handle is valid until ptcfs_close; while the handle is open the daemon
 * keeps the file's version (a repartition does not take its bytes away). Mappings are private
 * and copy-on-write: writing through a pointer changes this process's copy only. An open handle
 * holds one descriptor for its socket and one per mapped file (ptcfs_mapping_count).
 * Thread-safety: after ptcfs_open, every function but ptcfs_close may be called from many
 * threads at once on the same handle.
 * Errors: functions that can fail take `err` (a buffer of `errlen` bytes, may be NULL) and
 * write a message there; the message starts with the error's code ("not_found: ...",
 * "unavailable: ..." when there is no direct socket: read through the mount instead). */
#ifndef PTCFS_CLIENT_H
#define PTCFS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ptcfs_file ptcfs_file;

/* Opens `path` through `socket` (NULL or "": $PTCFS_DIRECT_SOCKET, else the path the mount
 * shows in its hidden file MNT/.ptcfs-direct). NULL on error. */
ptcfs_file* ptcfs_open(const char* path, const char* socket, char* err, size_t errlen);
void ptcfs_close(ptcfs_file* f);

uint64_t ptcfs_size(const ptcfs_file* f);
/* The version of the step or dataset the file belongs to (0: none). */
uint64_t ptcfs_version(const ptcfs_file* f);
/* The file's bytes as spans, in order; span i: *data (NULL: *len zero bytes) and *len. Every
 * piece of every row: a slice a repartition left strided has a span per piece of each row (the
 * first call lists them; ptcfs_locate and ptcfs_read_many work on the map's rows directly). */
size_t ptcfs_span_count(const ptcfs_file* f);
int ptcfs_span(const ptcfs_file* f, size_t i, const void** data, uint64_t* len);
/* A pointer to bytes [off, off + len) when they lie in one mapped span (zero-copy), else NULL. */
const void* ptcfs_contiguous(const ptcfs_file* f, uint64_t off, uint64_t len);
/* Copies bytes [off, off + len) into dst. 0, or -1 with a message in err. */
int ptcfs_read(const ptcfs_file* f, uint64_t off, uint64_t len, void* dst, char* err, size_t errlen);

/* Many ranges in one call (a shard's tensors: one call per file, not per tensor). */

/* The files that hold the bytes, each mapped whole: mapping i at *data (NULL for an empty file),
 * *len bytes. Pointers into mapping i stay valid until ptcfs_close. -1 past the last. */
size_t ptcfs_mapping_count(const ptcfs_file* f);
int ptcfs_mapping(const ptcfs_file* f, size_t i, const void** data, uint64_t* len);
/* The read-only descriptor of the file mapped as mapping i (its bytes by pread), open until
 * ptcfs_close: do not close it. -1 past the last. */
int ptcfs_mapping_fd(const ptcfs_file* f, size_t i);
/* Where each range [off[k], off[k] + len[k]), k < n, lies: when one mapped span holds it,
 * mapping[k] is the index of its mapping and at[k] its offset there (zero-copy); else mapping[k]
 * is -1 (an empty range, zeros, or bytes over several spans: copy them with ptcfs_read_many).
 * 0, or -1 with a message in err (out_of_range: a range past the end; nothing is written). */
int ptcfs_locate(const ptcfs_file* f, size_t n, const uint64_t* off, const uint64_t* len, int64_t* mapping,
                 uint64_t* at, char* err, size_t errlen);
/* Copies each range [off[k], off[k] + len[k]), k < n, into dst[k], as ptcfs_read of each. Where
 * the destinations follow one another (each less than 4 KiB past the last's end: one buffer) and
 * come to 4 MiB or more, their pages, gaps included, are populated 2 MiB at a time ahead of the copy
 * (MADV_POPULATE_WRITE), as for one large ptcfs_read. 0, or -1 with a message in err (out_of_range:
 * a range past the end, checked before anything is copied). */
int ptcfs_read_many(const ptcfs_file* f, size_t n, const uint64_t* off, const uint64_t* len, void* const* dst,
                    char* err, size_t errlen);

/* GPU memory (docs/ARCHITECTURE.md "Path of a GPU load"). In a build without CUDA, or on a
 * machine without a driver or a GPU, both fail with "unavailable: ..." saying which. */

/* How a ptcfs_read_device went: host bytes staged up (gaps of gathered windows included), zeros
 * filled on the device, chunks copied straight to the destination or gathered by the kernel; and
 * where the time went (ns): planning, copying into pinned staging, waiting for the device, in all. */
typedef struct ptcfs_device_stats {
  uint64_t staged_bytes, zero_bytes, chunks, direct_chunks, gathered_chunks;
  uint64_t plan_ns, stage_ns, wait_ns, total_ns;
} ptcfs_device_stats;

/* 0 when this process can copy into GPU memory, else -1 with why in err. */
int ptcfs_gpu_available(char* err, size_t errlen);
/* Copies bytes [off, off + len) of the file to `dst`, device memory (cudaMalloc, or a CUDA
 * tensor's data pointer), ordered on `stream` (a cudaStream_t; NULL: the default stream), through
 * pinned staging; pieces a repartition left strided are gathered on the device. Returns when the
 * bytes are there. `stats` may be NULL. 0, or -1 with a message in err. Calls for one GPU run
 * one at a time. */
int ptcfs_read_device(const ptcfs_file* f, uint64_t off, uint64_t len, void* dst, void* stream,
                      ptcfs_device_stats* stats, char* err, size_t errlen);

/* Live resharding (docs/ARCHITECTURE.md "Live resharding", docs/PYTHON.md "Live resharding (`ptcfs.live`)"): the plan
 * that moves a running job's slices from parallel config `from` to `to` ("tp=2,pp=2,dp=1"), rank to
 * rank, for the PTC in `ptc_json` (ptc.json's text). Pure: no daemon, no mount. Returns the plan as
 * JSON text (ptc/live_plan.h: "moves", "ranks", "bytes_min"), NUL-terminated, which the caller
 * gives to ptcfs_free; NULL with a message in err ("invalid_argument: ..." for a config that does
 * not fit the PTC or a malformed ptc.json). */
char* ptcfs_live_plan(const char* ptc_json, const char* from, const char* to, char* err, size_t errlen);
/* Frees what ptcfs_live_plan returned (NULL: nothing). */
void ptcfs_free(void* p);

/* Live resharding between GPUs over NCCL (docs/ARCHITECTURE.md "Live resharding"). NCCL is loaded
 * at the first call ($PTCFS_NCCL_LIBRARY, else libnccl.so.2: a process that imported torch with
 * CUDA holds it already); without it, a GPU or a build with NCCL, calls fail with "unavailable:
 * ..." saying which. */

typedef struct ptcfs_nccl ptcfs_nccl;
#define PTCFS_NCCL_ID_BYTES 128
/* One operation of a round: send `bytes` at `data` (device memory of the communicator's GPU) to
 * rank `peer` (send != 0), or receive them from it. */
typedef struct ptcfs_p2p_op {
  int peer;
  int send;
  void* data;
  uint64_t bytes;
} ptcfs_p2p_op;

/* NCCL's version code (22809 for 2.28.9), or -1 with why in err. */
int ptcfs_nccl_version(char* err, size_t errlen);
/* Writes a fresh unique id (PTCFS_NCCL_ID_BYTES bytes) to `id`: one rank makes it, the others get
 * it from that rank (any channel) and all open with it. 0, or -1 with a message in err. */
int ptcfs_nccl_unique_id(unsigned char* id, char* err, size_t errlen);
/* Joins communicator `id` as `rank` of `nranks` on GPU `device`; returns once every rank has joined.
 * NULL with a message in err. Give it to ptcfs_nccl_close. */
ptcfs_nccl* ptcfs_nccl_open(int rank, int nranks, const unsigned char* id, int device, char* err, size_t errlen);
/* One round: posts the n operations as one NCCL group on `stream` (a cudaStream_t; NULL: the default
 * stream) and returns when all are done. Each pair of ranks must list the messages between them in
 * the same order; a rank may send to itself (its sends and receives to itself pair up in order).
 * timeout_ms 0: no limit; past it ("deadline_exceeded: ...") or when NCCL reports the round failed
 * ("io: ...") the communicator is aborted, and every later round fails ("failed_precondition: ...").
 * 0, or -1 with a message in err. One round at a time per communicator. */
int ptcfs_nccl_exchange(ptcfs_nccl* c, const ptcfs_p2p_op* ops, size_t n, void* stream, uint64_t timeout_ms, char* err,
                        size_t errlen);
void ptcfs_nccl_close(ptcfs_nccl* c);

#ifdef __cplusplus
}
#endif

#endif
