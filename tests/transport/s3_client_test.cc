// The S3 client (transport/s3_client.h) against a real S3 server (SeaweedFS, s3_server.h), with
// its faults done for real: a stopped server, a killed one restarted, a reader's key, a wrong secret.
#include "transport/s3_client.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>

#include "s3_server.h"

using namespace ptcfs;
using namespace ptcfs::transport;
using ptcfs::testing::S3Server;

namespace {

std::unique_ptr<S3Client> client(const S3Options& o) {
  auto c = S3Client::make(o);
  REQUIRE(c);
  return std::move(c).value();
}

std::string random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

// A file holding `bytes`, removed at the end.
struct TempFile {
  std::string path;
  int fd = -1;
  explicit TempFile(const std::string& bytes) {
    char name[] = "/tmp/ptcfs-s3-body-XXXXXX";
    fd = ::mkstemp(name);
    path = name;
    REQUIRE(::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  }
  ~TempFile() {
    ::close(fd);
    ::unlink(path.c_str());
  }
};

}  // namespace

TEST_CASE("put, get, ranged get, head, list and remove, with awkward keys, only under the prefix", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto c = client(server.options("ckpt", "runs/a"));
  REQUIRE(c->create_bucket());
  REQUIRE(c->create_bucket());  // again: already ours
  auto outside = client(server.options("ckpt", "runs/ab"));

  const std::string body = random_bytes(100000, 1);
  const std::string keys[] = {"j/s/tp0-pp0.bin", "j/s/a b+c&d=e.bin", "j/s/\xe4\xb8\xad.json"};
  for (const auto& k : keys) REQUIRE(c->put(k, S3Body::of(body + k)));
  REQUIRE(outside->put("j/s/other.bin", S3Body::of("x")));

  for (const auto& k : keys) {
    auto got = c->get(k);
    REQUIRE(got);
    CHECK(*got == body + k);
  }
  std::string part(1000, '\0');
  REQUIRE(c->get_range(keys[1], 50000, part.data(), part.size()));
  CHECK(part == body.substr(50000, 1000));

  auto h = c->head(keys[0]);
  REQUIRE(h);
  REQUIRE(h->has_value());
  CHECK((*h)->size == body.size() + keys[0].size());
  CHECK_FALSE((*h)->etag.empty());
  auto none = c->head("j/s/missing");
  REQUIRE(none);
  CHECK_FALSE(none->has_value());

  auto listed = c->list("j/");
  REQUIRE(listed);
  std::vector<std::string> names;
  for (const auto& o : *listed) names.push_back(o.key);
  std::sort(names.begin(), names.end());
  std::vector<std::string> want(std::begin(keys), std::end(keys));
  std::sort(want.begin(), want.end());
  CHECK(names == want);  // not runs/ab/...

  auto missing = c->get("j/s/missing");
  REQUIRE_FALSE(missing);
  CHECK(missing.status().code() == Code::kNotFound);
  CHECK_THAT(missing.status().message(), Catch::Contains("s3://ckpt/runs/a/j/s/missing"));

  // Past the end: a range the object does not have is an error, never short data.
  Status past = c->get_range(keys[0], body.size() + 100, part.data(), part.size());
  CHECK_FALSE(past);

  REQUIRE(c->remove(keys[0]));
  REQUIRE(c->remove(keys[0]));  // none left: ok
  auto after = c->list("j/");
  REQUIRE(after);
  CHECK(after->size() == 2);
}

TEST_CASE("a listing longer than a page is read to its end", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto c = client(server.options("many"));
  REQUIRE(c->create_bucket());
  for (int i = 0; i < 1005; ++i) REQUIRE(c->put("k/" + std::to_string(i), S3Body::of(std::to_string(i))));
  auto all = c->list("k/");
  REQUIRE(all);
  CHECK(all->size() == 1005);
  CHECK(c->counters().requests.load() > 1005 + 1);  // more than one listing page
}

TEST_CASE("multipart from a file: parts listed, completed, read back; aborted leaves nothing", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto c = client(server.options("mparts", "p"));
  REQUIRE(c->create_bucket());
  const size_t part = 5 << 20;
  const std::string bytes = random_bytes(2 * part + 12345, 2);
  TempFile f(bytes);

  auto id = c->start_multipart("big.bin");
  REQUIRE(id);
  std::vector<S3Part> parts;
  for (int n = 1; n <= 3; ++n) {
    const uint64_t off = (n - 1) * part;
    const uint64_t len = std::min<uint64_t>(part, bytes.size() - off);
    auto etag = c->put_part("big.bin", *id, n, S3Body::file(f.fd, off, len));
    REQUIRE(etag);
    parts.push_back({n, len, *etag});
  }
  auto listed = c->list_parts("big.bin", *id);
  REQUIRE(listed);
  REQUIRE(listed->size() == 3);
  CHECK((*listed)[2].size == 12345);
  REQUIRE(c->complete_multipart("big.bin", *id, parts));
  auto got = c->get("big.bin");
  REQUIRE(got);
  CHECK(*got == bytes);
  std::string mid(100, '\0');
  REQUIRE(c->get_range("big.bin", part - 50, mid.data(), mid.size()));  // across two parts
  CHECK(mid == bytes.substr(part - 50, 100));

  auto id2 = c->start_multipart("dropped.bin");
  REQUIRE(id2);
  REQUIRE(c->put_part("dropped.bin", *id2, 1, S3Body::of(bytes.substr(0, part))));
  REQUIRE(c->abort_multipart("dropped.bin", *id2));
  auto h = c->head("dropped.bin");
  REQUIRE(h);
  CHECK_FALSE(h->has_value());
}

TEST_CASE("refusals are not tried again and never show the secret", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto writer = client(server.options("guarded"));
  REQUIRE(writer->create_bucket());
  REQUIRE(writer->put("k", S3Body::of("v")));

  S3Options ro = server.options("guarded");
  ro.credentials = {testing::kReaderKey, testing::kReaderSecret, ""};
  auto reader = client(ro);
  auto got = reader->get("k");
  REQUIRE(got);
  CHECK(*got == "v");
  Status put = reader->put("k2", S3Body::of("w"));
  REQUIRE_FALSE(put);
  CHECK(put.code() == Code::kPermissionDenied);
  CHECK_THAT(put.message(), Catch::Contains("AccessDenied"));
  CHECK(reader->counters().retries.load() == 0);

  S3Options wrong = server.options("guarded");
  wrong.credentials.secret_key = "not-the-secret-9f2c";
  auto bad = client(wrong);
  auto denied = bad->get("k");
  REQUIRE_FALSE(denied);
  CHECK(denied.status().code() == Code::kPermissionDenied);
  CHECK_THAT(denied.status().message(), !Catch::Contains("not-the-secret-9f2c"));
  CHECK_THAT(denied.status().message(), !Catch::Contains(testing::kSecretKey));
}

TEST_CASE("a stopped server costs a bounded wait, then kUnavailable; it answers again after SIGCONT", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto setup = client(server.options("stall"));  // a new bucket's first write may wait for its volumes
  REQUIRE(setup->create_bucket());
  REQUIRE(setup->put("k", S3Body::of("v")));
  S3Options o = server.options("stall");
  o.attempts = 2;
  o.stall_timeout = std::chrono::seconds(1);
  auto c = client(o);
  server.stop();
  const auto t0 = std::chrono::steady_clock::now();
  auto got = c->get("k");
  const auto waited = std::chrono::steady_clock::now() - t0;
  server.cont();
  REQUIRE_FALSE(got);
  CHECK(got.status().code() == Code::kUnavailable);
  CHECK_THAT(got.status().message(), Catch::Contains("gave up after 2 tries"));
  CHECK(waited < std::chrono::seconds(30));
  CHECK(c->counters().retries.load() == 1);
  auto again = c->get("k");
  REQUIRE(again);
  CHECK(*again == "v");
}

TEST_CASE("a server killed in a multipart upload: refused while down, the upload resumes after its restart", "[s3]") {
  S3Server server;
  REQUIRE(server.ready());
  auto c = client(server.options("resume"));
  REQUIRE(c->create_bucket());
  const size_t part = 5 << 20;
  const std::string bytes = random_bytes(2 * part + 7, 3);
  TempFile f(bytes);
  auto id = c->start_multipart("r.bin");
  REQUIRE(id);
  auto e1 = c->put_part("r.bin", *id, 1, S3Body::file(f.fd, 0, part));
  REQUIRE(e1);

  server.kill();
  S3Options once = server.options("resume");
  once.attempts = 2;
  auto down = client(once)->put_part("r.bin", *id, 2, S3Body::file(f.fd, part, part));
  REQUIRE_FALSE(down);
  CHECK(down.status().code() == Code::kUnavailable);
  REQUIRE(server.restart());

  // What was uploaded before the kill is still there; the rest follows and completes.
  auto listed = c->list_parts("r.bin", *id);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  CHECK((*listed)[0].number == 1);
  std::vector<S3Part> parts = *listed;
  for (int n = 2; n <= 3; ++n) {
    const uint64_t off = (n - 1) * part, len = std::min<uint64_t>(part, bytes.size() - off);
    auto etag = c->put_part("r.bin", *id, n, S3Body::file(f.fd, off, len));
    REQUIRE(etag);
    parts.push_back({n, len, *etag});
  }
  REQUIRE(c->complete_multipart("r.bin", *id, parts));
  auto got = c->get("r.bin");
  REQUIRE(got);
  CHECK(*got == bytes);
}

TEST_CASE("https with the endpoint's CA file; without it the certificate is refused, not retried", "[s3]") {
  S3Server server(/*tls=*/true);
  REQUIRE(server.ready());
  auto c = client(server.options("tls"));
  REQUIRE(c->create_bucket());
  REQUIRE(c->put("k", S3Body::of("secret bytes")));
  auto got = c->get("k");
  REQUIRE(got);
  CHECK(*got == "secret bytes");

  S3Options no_ca = server.options("tls");
  no_ca.ca_file.clear();
  auto untrusted = client(no_ca);
  auto refused = untrusted->get("k");
  REQUIRE_FALSE(refused);
  CHECK(refused.status().code() == Code::kPermissionDenied);
  CHECK(untrusted->counters().retries.load() == 0);
}

TEST_CASE("credentials: a shared-credentials file's profile, or the environment, or none", "[s3]") {
  char name[] = "/tmp/ptcfs-s3-cred-XXXXXX";
  const int fd = ::mkstemp(name);
  const std::string text =
      "# comment\n[default]\naws_access_key_id = AK1\naws_secret_access_key = SK1\n"
      "[profile ckpt]\naws_access_key_id=AK2\naws_secret_access_key=S/K2=\naws_session_token = T2\n";
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  auto d = load_s3_credentials(name);
  REQUIRE(d);
  CHECK(d->access_key == "AK1");
  CHECK(d->secret_key == "SK1");
  auto p = load_s3_credentials(name, "ckpt");
  REQUIRE(p);
  CHECK(p->secret_key == "S/K2=");
  CHECK(p->session_token == "T2");
  auto missing = load_s3_credentials(name, "other");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.status().message(), Catch::Contains("no [other] section"));
  CHECK_THAT(missing.status().message(), !Catch::Contains("SK1"));
  ::unlink(name);
  CHECK(load_s3_credentials("/nonexistent/creds").status().code() == Code::kIo);

  ::setenv("AWS_ACCESS_KEY_ID", "EAK", 1);
  ::setenv("AWS_SECRET_ACCESS_KEY", "ESK", 1);
  auto e = load_s3_credentials("");
  REQUIRE(e);
  CHECK(e->access_key == "EAK");
  ::unsetenv("AWS_SECRET_ACCESS_KEY");
  CHECK_FALSE(load_s3_credentials(""));
  ::unsetenv("AWS_ACCESS_KEY_ID");
  auto anon = load_s3_credentials("");
  REQUIRE(anon);
  CHECK(anon->anonymous());
}
