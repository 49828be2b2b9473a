// Challenge-response proofs: bound to the secret, the role and both nonces.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <set>

#include "transport/auth.h"
#include "transport/frame.h"

using namespace ptcfs;
using namespace ptcfs::transport;

TEST_CASE("a proof depends on the secret, the role and both nonces", "[auth]") {
  const std::string s = "0123456789abcdef-secret", a = make_nonce(), b = make_nonce();
  REQUIRE(a.size() == 64);
  REQUIRE(a != b);
  const std::string p = auth_proof(s, Role::kClient, a, b);
  CHECK(p.size() == 64);  // HMAC-SHA256, hex
  CHECK(p == auth_proof(s, Role::kClient, a, b));
  const std::set<std::string> others = {auth_proof(s, Role::kServer, a, b), auth_proof(s, Role::kClient, b, a),
                                        auth_proof(s + "x", Role::kClient, a, b),
                                        auth_proof(s, Role::kClient, a, make_nonce())};
  CHECK(others.size() == 4);
  CHECK(others.count(p) == 0);
  CHECK(proof_matches(p, auth_proof(s, Role::kClient, a, b)));
  CHECK_FALSE(proof_matches(p, p.substr(1)));
  CHECK_FALSE(proof_matches(p, auth_proof(s, Role::kServer, a, b)));
}

TEST_CASE("a proof is HMAC-SHA256 of the role label and the nonces, as Python computes it", "[auth]") {
  // HMAC-SHA256(key="0123456789abcdef", msg="ptcfs-client\0" + "ab" + "cd"), computed with Python's hmac.
  const std::string got = auth_proof("0123456789abcdef", Role::kClient, "cd", "ab");
  CHECK(got == "ba73e5ec04926a623e77f455c47415a46276231a8006c800c0a82f5f2ec1db71");
}

TEST_CASE("the secret file is trimmed and must hold at least 16 bytes", "[auth]") {
  const std::string path = "/tmp/ptcfs-auth-test-secret";
  std::ofstream(path) << "a secret of 24 bytes....\n\n";
  auto s = read_secret_file(path);
  REQUIRE(s);
  CHECK(*s == "a secret of 24 bytes....");
  std::ofstream(path) << "short\n";
  auto bad = read_secret_file(path);
  REQUIRE_FALSE(bad);
  CHECK(bad.status().message().find("at least 16 bytes") != std::string::npos);
  std::remove(path.c_str());
  CHECK(read_secret_file(path).status().code() == Code::kNotFound);
}

TEST_CASE("frame headers round-trip and refuse bad magic, versions, types and sizes", "[frame]") {
  FrameHeader h;
  h.type = FrameType::kAuthOk;
  h.length = 1234;
  h.request_id = 99;
  const auto b = encode_header(h);
  auto d = decode_header(b.data(), 2000);
  REQUIRE(d);
  CHECK(d->type == FrameType::kAuthOk);
  CHECK(d->length == 1234);
  CHECK(d->request_id == 99);
  CHECK(decode_header(b.data(), 1233).status().code() == Code::kResourceExhausted);
  auto bad = b;
  bad[0] = 'X';
  CHECK(decode_header(bad.data(), 2000).status().message().find("bad magic") != std::string::npos);
  bad = b;
  bad[4] = 2;
  CHECK(decode_header(bad.data(), 2000).status().message().find("version 2 not supported") != std::string::npos);
  bad = b;
  bad[6] = 9;  // 8 is kKeepalive, the last
  CHECK(decode_header(bad.data(), 2000).status().message().find("unknown frame type 9") != std::string::npos);
}
