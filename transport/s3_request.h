// The pure parts of an S3 request (docs/OPERATIONS.md "The S3 tier"): the endpoint and the
// s3:// locations users give, object keys under the configured prefix, the request URL
// (path-style, the query sorted and encoded as SigV4's canonical form wants it, since libcurl
// signs the URL as written), and which failures are tried again and after how long.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::transport {

// http(s)://host[:port], nothing after it (a trailing '/' is dropped).
struct S3Endpoint {
  std::string scheme;  // "http" or "https"
  std::string host;
  int port = 0;  // the scheme's default when not given
  std::string url() const;
};
Result<S3Endpoint> parse_s3_endpoint(std::string_view url);

// s3://bucket[/prefix]: the prefix without leading '/', ending in '/' unless empty.
struct S3Location {
  std::string bucket;
  std::string prefix;
};
Result<S3Location> parse_s3_url(std::string_view url);
// Bucket names as S3 accepts them: 3-63 of [a-z0-9.-], starting and ending with a letter or digit.
Status check_bucket_name(std::string_view bucket);
// A prefix made canonical: no leading '/', a trailing '/' added unless empty; no "." or ".."
// segment, no empty segment, no control character.
Result<std::string> canonical_prefix(std::string_view prefix);

// RFC 3986 unreserved characters kept, everything else %XX (upper case); '/' kept when asked.
std::string uri_encode(std::string_view s, bool keep_slash);

using S3Query = std::vector<std::pair<std::string, std::string>>;
// endpoint/bucket/key?query: the key encoded (its '/' kept), the query sorted by name then value,
// each side encoded, every parameter with '=' (so "uploads" is sent as "uploads=").
std::string s3_url(const S3Endpoint& endpoint, std::string_view bucket, std::string_view key, S3Query query = {});

// Whether a failed request is worth trying again: no reply at all (connect, timeout, reset),
// 500, 502, 503 (SlowDown), 504, 429, and 400/403 only for RequestTimeout / RequestTimeTooSkewed.
bool s3_retryable(long http_status, std::string_view error_code);
// How long to wait before attempt `attempt` (1 = the first retry): exponential from `base`,
// capped at `cap`, with full jitter from `random` (any 64-bit value).
std::chrono::milliseconds s3_backoff(int attempt, std::chrono::milliseconds base, std::chrono::milliseconds cap,
                                     uint64_t random);

}  // namespace ptcfs::transport
