// The XML of S3's replies that the S3 client reads, and the one body it writes (docs/OPERATIONS.md
// "The S3 tier"): a page of ListObjectsV2, an InitiateMultipartUpload result, a page of ListParts,
// an error, and the CompleteMultipartUpload request. Pure: a small scanner for these flat documents
// (elements and text, the five entities and numeric references; no attributes read, no DTDs),
// which refuses anything else with kCorrupt naming what it expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::transport {

struct S3Object {
  std::string key;  // the whole key, prefix included
  uint64_t size = 0;
  std::string etag;  // as S3 sends it, quotes removed
  bool operator==(const S3Object&) const = default;
};

struct S3ListPage {
  std::vector<S3Object> objects;
  bool truncated = false;
  std::string next_token;  // NextContinuationToken, when truncated
};

struct S3Part {
  int number = 0;
  uint64_t size = 0;
  std::string etag;
  bool operator==(const S3Part&) const = default;
};

struct S3PartsPage {
  std::vector<S3Part> parts;
  bool truncated = false;
  int next_marker = 0;  // NextPartNumberMarker, when truncated
};

struct S3Error {
  std::string code;  // e.g. NoSuchKey, SlowDown, AccessDenied ("" when the body is not an S3 error)
  std::string message;
};

// Text with &amp; &lt; &gt; &quot; &apos; and &#N; / &#xN; replaced; kCorrupt on a malformed one.
Result<std::string> xml_unescape(std::string_view text);
// Text made safe inside an element.
std::string xml_escape(std::string_view text);

Result<S3ListPage> parse_list_objects(std::string_view xml);
Result<std::string> parse_upload_id(std::string_view xml);
Result<S3PartsPage> parse_list_parts(std::string_view xml);
// Never fails: a body that is not an S3 error gives empty fields.
S3Error parse_s3_error(std::string_view xml);
// The CompleteMultipartUpload body of `parts` (in part order).
std::string complete_multipart_xml(const std::vector<S3Part>& parts);

}  // namespace ptcfs::transport
