#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cctype>
#include <fstream>
#include <sstream>

namespace ptcfs::transport {
namespace {
std::string hex(const unsigned char* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = d[p[i] >> 4];
    out[2 * i + 1] = d[p[i] & 15];
  }
  return out;
}
}  // namespace

Result<std::string> read_secret_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return error(Code::kNotFound, "secret file " + path + ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  if (s.size() < 16) return invalid("secret file " + path + ": the secret must be at least 16 bytes");
  return s;
}

std::string make_nonce() {
  unsigned char b[32];
  if (RAND_bytes(b, sizeof b) != 1) std::abort();  // no randomness: nothing safe to do
  return hex(b, sizeof b);
}

std::string auth_proof(const std::string& secret, Role role, const std::string& own_nonce,
                       const std::string& peer_nonce) {
  std::string msg = role == Role::kClient ? "ptcfs-client" : "ptcfs-server";
  msg.push_back('\0');
  msg += peer_nonce + own_nonce;  // client: Ns Nc; server: Nc Ns
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), md, &len);
  return hex(md, len);
}

bool proof_matches(const std::string& got, const std::string& want) {
  return got.size() == want.size() && CRYPTO_memcmp(got.data(), want.data(), got.size()) == 0;
}

}  // namespace ptcfs::transport
