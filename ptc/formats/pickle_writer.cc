#include "ptc/formats/pickle_writer.h"

#include "ptc/base/endian.h"

namespace ptcfs::formats {

void PickleWriter::global(std::string_view module, std::string_view name) {
  out_ += 'c';
  out_ += module;
  out_ += '\n';
  out_ += name;
  out_ += '\n';
}

void PickleWriter::str(std::string_view s) {
  char len[4];
  store_le<uint32_t>(len, static_cast<uint32_t>(s.size()));
  out_ += 'X';
  out_.append(len, 4);
  out_ += s;
}

void PickleWriter::integer(int64_t v) {
  char b[8];
  if (v >= 0 && v < 256) {
    out_ += 'K';
    out_ += static_cast<char>(v);
  } else if (v >= 0 && v < 65536) {
    store_le<uint16_t>(b, static_cast<uint16_t>(v));
    out_ += 'M';
    out_.append(b, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    store_le<int32_t>(b, static_cast<int32_t>(v));
    out_ += 'J';
    out_.append(b, 4);
  } else {  // LONG1: 8 bytes of two's complement, little-endian
    store_le<int64_t>(b, v);
    out_ += '\x8a';
    out_ += '\x08';
    out_.append(b, 8);
  }
}

}  // namespace ptcfs::formats
