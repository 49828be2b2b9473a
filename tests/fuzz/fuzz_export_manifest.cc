// ptcfs-export.json as an S3 object holds it (anyone with write access to the bucket wrote it).
#include "ptc/formats/export_manifest.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = ptcfs::formats::parse_export_manifest(ptcfs::fuzz::view(data, size), "s3://b/p/ptcfs-export.json");
  if (m) {
    // What parses writes back as itself.
    auto again = ptcfs::formats::parse_export_manifest(ptcfs::formats::export_manifest_text(*m), "again");
    if (!again || again->files != m->files || again->version != m->version) __builtin_trap();
  }
  return 0;
}
