// Mutual authentication with a shared secret (the cluster secret), challenge-response, the
// secret never on the wire:
//
//   server -> client  hello   {"auth": "hmac-sha256", "nonce": Ns}
//   client -> server  auth    {"nonce": Nc, "proof": HMAC(secret, "ptcfs-client" 0 Ns Nc)}
//   server -> client  auth_ok {"proof": HMAC(secret, "ptcfs-server" 0 Nc Ns)}
//
// Nonces are 32 random bytes, hex in JSON; HMAC is HMAC-SHA256, compared in constant time.
// A server without a secret says {"auth": "none"} and serves at once.
#pragma once

#include <string>

#include "ptc/base/status.h"

namespace ptcfs::transport {

// The secret from a file: its bytes without trailing whitespace; at least 16 bytes.
Result<std::string> read_secret_file(const std::string& path);

// 32 random bytes, hex.
std::string make_nonce();

enum class Role { kClient, kServer };
// The proof that `role` knows the secret, for its own nonce and the peer's (both hex).
std::string auth_proof(const std::string& secret, Role role, const std::string& own_nonce,
                       const std::string& peer_nonce);
// Constant-time comparison of a received proof with the expected one.
bool proof_matches(const std::string& got, const std::string& want);

}  // namespace ptcfs::transport
