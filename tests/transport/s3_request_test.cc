// The pure rules of S3 requests (transport/s3_request.h).
#include "transport/s3_request.h"

#include <catch2/catch.hpp>

using namespace ptcfs;
using namespace ptcfs::transport;

TEST_CASE("endpoints: scheme, host, port; anything after the port is refused", "[s3]") {
  auto e = parse_s3_endpoint("http://127.0.0.1:8333/");
  REQUIRE(e);
  CHECK(e->scheme == "http");
  CHECK(e->host == "127.0.0.1");
  CHECK(e->port == 8333);
  CHECK(e->url() == "http://127.0.0.1:8333");
  e = parse_s3_endpoint("https://s3.example.com");
  REQUIRE(e);
  CHECK(e->port == 443);
  CHECK(e->url() == "https://s3.example.com");
  for (const char* bad : {"ftp://h", "h:1", "http://h:0", "http://h:70000", "http://h:x", "http://h/bucket",
                          "http://user@h", "http://"}) {
    INFO(bad);
    CHECK(parse_s3_endpoint(bad).status().code() == Code::kInvalidArgument);
  }
}

TEST_CASE("s3:// locations and bucket names", "[s3]") {
  auto l = parse_s3_url("s3://ckpt-1/runs//a/");
  CHECK_FALSE(l);  // an empty segment
  l = parse_s3_url("s3://ckpt-1/runs/a/");
  REQUIRE(l);
  CHECK(l->bucket == "ckpt-1");
  CHECK(l->prefix == "runs/a/");
  l = parse_s3_url("s3://ckpt");
  REQUIRE(l);
  CHECK(l->prefix.empty());
  for (const char* bad :
       {"s3://AB/x", "s3://ab/x", "s3://-ab/x", "s3://a..b/x", "s3://ok/../x", "ok/x", "s3://ok/a/./b"}) {
    INFO(bad);
    CHECK_FALSE(parse_s3_url(bad));
  }
  CHECK(canonical_prefix("/a/b").value() == "a/b/");
  CHECK(canonical_prefix("").value().empty());
  CHECK_FALSE(canonical_prefix("a/\x01"));
}

TEST_CASE("URLs: the key encoded with its slashes, the query sorted and encoded, '=' always", "[s3]") {
  const S3Endpoint e{"http", "127.0.0.1", 8333};
  CHECK(uri_encode("a b/c+d~_.-", true) == "a%20b/c%2Bd~_.-");
  CHECK(uri_encode("a/b", false) == "a%2Fb");
  CHECK(s3_url(e, "ckpt", "p/a b.bin") == "http://127.0.0.1:8333/ckpt/p/a%20b.bin");
  CHECK(s3_url(e, "ckpt", "k", {{"uploads", ""}}) == "http://127.0.0.1:8333/ckpt/k?uploads=");
  CHECK(s3_url(e, "ckpt", "", {{"prefix", "a b/"}, {"list-type", "2"}, {"continuation-token", "x=/+"}}) ==
        "http://127.0.0.1:8333/ckpt?continuation-token=x%3D%2F%2B&list-type=2&prefix=a%20b%2F");
  CHECK(s3_url(e, "ckpt", "k", {{"uploadId", "u"}, {"partNumber", "10"}}) ==
        "http://127.0.0.1:8333/ckpt/k?partNumber=10&uploadId=u");
}

TEST_CASE("what is tried again, and the backoff's bounds", "[s3]") {
  CHECK(s3_retryable(0, ""));
  CHECK(s3_retryable(503, "SlowDown"));
  CHECK(s3_retryable(500, ""));
  CHECK(s3_retryable(429, ""));
  CHECK(s3_retryable(400, "RequestTimeout"));
  CHECK_FALSE(s3_retryable(403, "AccessDenied"));
  CHECK_FALSE(s3_retryable(404, "NoSuchKey"));
  CHECK_FALSE(s3_retryable(400, "InvalidArgument"));
  using std::chrono::milliseconds;
  CHECK(s3_backoff(1, milliseconds(200), milliseconds(5000), 0) == milliseconds(0));
  CHECK(s3_backoff(1, milliseconds(200), milliseconds(5000), ~uint64_t{0}) <= milliseconds(200));
  CHECK(s3_backoff(3, milliseconds(200), milliseconds(5000), 801) == milliseconds(0));  // 801 % 801
  CHECK(s3_backoff(3, milliseconds(200), milliseconds(5000), 799) == milliseconds(799));
  for (uint64_t r : {0ull, 12345ull, ~0ull})
    CHECK(s3_backoff(30, milliseconds(200), milliseconds(5000), r) <= milliseconds(5000));
}
