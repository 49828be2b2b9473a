#include "daemon/store/checksum.h"

#include <xxhash.h>

namespace ptcfs {

uint64_t xxh3_of(const void* data, size_t len) { return XXH3_64bits(data, len); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(const void* data, size_t len) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, len);
}
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }

}  // namespace ptcfs
