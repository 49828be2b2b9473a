// An S3 client over libcurl (docs/OPERATIONS.md "The S3 tier"): requests are signed by libcurl's
// own AWS SigV4 (CURLOPT_AWS_SIGV4), path-style, with the keys under one bucket and prefix. Every
// call retries what is worth retrying (s3_request.h: no reply, 5xx, 429, SlowDown) with capped,
// jittered backoff, and gives up after `attempts` tries with kUnavailable naming the last reason.
// A request that moves no byte for `stall_timeout` fails and is tried again, so a stopped server
// costs a bounded wait, not a hang. Credentials never appear in an error or a log line.
//
// Keys passed to the methods are relative to the configured prefix; the client never reads or
// writes outside it.
//
// Thread-safety: every method may be called from any thread at once (each call takes a libcurl
// handle of its own from a small pool, which keeps connections alive between calls).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"
#include "transport/s3_request.h"
#include "transport/s3_xml.h"

namespace ptcfs::transport {

struct S3Credentials {
  std::string access_key, secret_key, session_token;
  bool anonymous() const { return access_key.empty(); }
};

// From `file` in the AWS shared-credentials format (a [profile] section with aws_access_key_id,
// aws_secret_access_key and optionally aws_session_token), or with no file from the environment
// (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN). Neither: anonymous requests.
// Errors name the file and the line, never a secret.
Result<S3Credentials> load_s3_credentials(const std::string& file, const std::string& profile = "default");

struct S3Options {
  S3Endpoint endpoint;
  std::string bucket;
  std::string prefix;  // canonical_prefix()'s form: "" or ending in '/'
  std::string region = "us-east-1";
  S3Credentials credentials;
  std::string ca_file;  // https: the CA bundle the endpoint's certificate is checked against ("": the system's)
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::seconds stall_timeout{20};
  int attempts = 6;  // per call, the first included
  std::chrono::milliseconds backoff_base{200};
  std::chrono::milliseconds backoff_cap{5000};
};

// How a process reaches S3, for any bucket and prefix: the endpoint, region, credentials and CA
// file (the daemon's and the CLI's --s3-* flags).
struct S3Access {
  S3Endpoint endpoint;
  std::string region = "us-east-1";
  S3Credentials credentials;
  std::string ca_file;
  S3Options options(const S3Location& at) const;
};

// From the flags, each falling back to the environment as AWS's own tools read it: the endpoint
// to AWS_ENDPOINT_URL_S3 then AWS_ENDPOINT_URL, the region to AWS_REGION then AWS_DEFAULT_REGION
// then us-east-1, the credentials to load_s3_credentials. No endpoint anywhere: nullopt (no S3).
Result<std::optional<S3Access>> resolve_s3_access(const std::string& endpoint, const std::string& region,
                                                  const std::string& credentials_file, const std::string& ca_file);

// Bytes to send: memory, or a range of an open file (read with pread, so a blob is sent as it is).
struct S3Body {
  std::string_view mem;
  int fd = -1;
  uint64_t offset = 0, length = 0;
  static S3Body of(std::string_view m) { return S3Body{m, -1, 0, m.size()}; }
  static S3Body file(int fd, uint64_t off, uint64_t len) { return S3Body{{}, fd, off, len}; }
  uint64_t size() const { return fd >= 0 ? length : mem.size(); }
};

class S3Client {
 public:
  static Result<std::unique_ptr<S3Client>> make(S3Options options);
  ~S3Client();
  S3Client(const S3Client&) = delete;
  S3Client& operator=(const S3Client&) = delete;

  const S3Options& options() const { return o_; }
  // s3://bucket/prefix<rel>, for messages.
  std::string where(std::string_view rel) const;

  // Makes the bucket (ok if this account has it already).
  Status create_bucket();
  Status put(std::string_view rel, const S3Body& body);
  // The whole object (at most `max_bytes`, else kResourceExhausted).
  Result<std::string> get(std::string_view rel, uint64_t max_bytes = uint64_t{1} << 30);
  // Exactly `len` bytes of the object from `off` into `buf` (one ranged GET); a shorter object is
  // kCorrupt.
  Status get_range(std::string_view rel, uint64_t off, void* buf, size_t len);
  // The object's size and ETag, or nullopt when there is none.
  Result<std::optional<S3Object>> head(std::string_view rel);
  // Every object whose key starts with prefix<rel_prefix>, keys made relative to the prefix.
  Result<std::vector<S3Object>> list(std::string_view rel_prefix);
  // Removes the object (ok when there is none).
  Status remove(std::string_view rel);

  // Multipart upload: parts of 5 MiB or more but the last, numbered from 1.
  Result<std::string> start_multipart(std::string_view rel);
  Result<std::string> put_part(std::string_view rel, const std::string& upload_id, int number, const S3Body& body);
  // The parts uploaded so far (to resume an upload).
  Result<std::vector<S3Part>> list_parts(std::string_view rel, const std::string& upload_id);
  Status complete_multipart(std::string_view rel, const std::string& upload_id, const std::vector<S3Part>& parts);
  Status abort_multipart(std::string_view rel, const std::string& upload_id);

  struct Counters {
    std::atomic<uint64_t> requests{0}, retries{0}, bytes_sent{0}, bytes_received{0};
  };
  const Counters& counters() const { return counters_; }
  // Every client's of this process together (`ptcfs status`: what the daemon moved to and from S3).
  static Counters& totals();

  struct Request;  // s3_client.cc

 private:
  explicit S3Client(S3Options o) : o_(std::move(o)) {}
  Status run(Request& r);
  void* take_handle();
  void give_handle(void* h);

  const S3Options o_;
  std::string userpwd_, sigv4_;
  std::mutex pool_mu_;  // guards pool_
  std::vector<void*> pool_;
  Counters counters_;
};

}  // namespace ptcfs::transport
