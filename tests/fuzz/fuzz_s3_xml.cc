// The XML of an S3 server's replies (transport/s3_xml.h): listings, multipart results, errors.
#include "tests/fuzz/fuzz_util.h"
#include "transport/s3_xml.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view xml = ptcfs::fuzz::view(data, size);
  if (auto p = ptcfs::transport::parse_list_objects(xml); p && p->truncated && p->next_token.empty()) __builtin_trap();
  (void)ptcfs::transport::parse_upload_id(xml);
  (void)ptcfs::transport::parse_list_parts(xml);
  (void)ptcfs::transport::parse_s3_error(xml);
  return 0;
}
