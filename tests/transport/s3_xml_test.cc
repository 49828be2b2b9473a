// The XML of S3's replies (transport/s3_xml.h), as S3 and SeaweedFS write them.
#include "transport/s3_xml.h"

#include <catch2/catch.hpp>

using namespace ptcfs;
using namespace ptcfs::transport;

TEST_CASE("a ListObjectsV2 page: keys unescaped, sizes, ETags without quotes, the next token", "[s3]") {
  const auto p = parse_list_objects(
      R"(<?xml version="1.0" encoding="UTF-8"?>)"
      R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>ckpt</Name><Prefix>a</Prefix>)"
      R"(<IsTruncated>true</IsTruncated><NextContinuationToken>tok&amp;1</NextContinuationToken>)"
      R"(<Contents><Key>a b/c+d&lt;1&gt;.txt</Key><ETag>&#34;b1946ac9&#34;</ETag><Size>6</Size></Contents>)"
      R"(<Contents><Key>a/&#x4e2d;</Key><ETag>"e2"</ETag><Size>18446744073709551615</Size></Contents>)"
      R"(</ListBucketResult>)");
  REQUIRE(p);
  REQUIRE(p->objects.size() == 2);
  CHECK(p->objects[0] == S3Object{"a b/c+d<1>.txt", 6, "b1946ac9"});
  CHECK(p->objects[1] == S3Object{"a/\xe4\xb8\xad", 18446744073709551615ull, "e2"});
  CHECK(p->truncated);
  CHECK(p->next_token == "tok&1");
}

TEST_CASE("an empty listing, and one that is not truncated", "[s3]") {
  const auto p = parse_list_objects("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  REQUIRE(p);
  CHECK(p->objects.empty());
  CHECK_FALSE(p->truncated);
}

TEST_CASE("malformed replies are kCorrupt, naming what is wrong", "[s3]") {
  struct Case {
    const char* xml;
    const char* says;
  } cases[] = {
      {"<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", "has no <Key>"},
      {"<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>", "not a number"},
      {"<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", "without <NextContinuationToken>"},
      {"<ListBucketResult><IsTruncated>yes</IsTruncated></ListBucketResult>", "neither true nor false"},
      {"<ListBucketResult><Contents></ListBucketResult>", "closes <Contents>"},
      {"<ListBucketResult>", "no end tag"},
      {"<Other/>", "expected <ListBucketResult>"},
      {"<ListBucketResult><Key>&bogus;</Key></ListBucketResult>", "unknown entity"},
      {"<ListBucketResult><Key>&#0;</Key></ListBucketResult>", "bad character reference"},
      {"<!DOCTYPE x [<!ENTITY a 'b'>]><ListBucketResult/>", "DOCTYPE"},
      {"<ListBucketResult/><extra/>", "after the root element"},
      {"", "expected an element"},
  };
  for (const auto& c : cases) {
    INFO(c.xml);
    const auto p = parse_list_objects(c.xml);
    REQUIRE_FALSE(p);
    CHECK(p.status().code() == Code::kCorrupt);
    CHECK_THAT(p.status().message(), Catch::Contains(c.says));
  }
}

TEST_CASE("nesting is bounded", "[s3]") {
  std::string deep = "<ListBucketResult>";
  for (int i = 0; i < 40; ++i) deep += "<a>";
  for (int i = 0; i < 40; ++i) deep += "</a>";
  deep += "</ListBucketResult>";
  const auto p = parse_list_objects(deep);
  REQUIRE_FALSE(p);
  CHECK_THAT(p.status().message(), Catch::Contains("nested deeper"));
}

TEST_CASE("multipart: the upload id, the parts listed, the completion body", "[s3]") {
  const auto id = parse_upload_id(
      "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key><UploadId>u-1_2</UploadId>"
      "</InitiateMultipartUploadResult>");
  REQUIRE(id);
  CHECK(*id == "u-1_2");
  CHECK_FALSE(parse_upload_id("<InitiateMultipartUploadResult><UploadId></UploadId></InitiateMultipartUploadResult>"));

  const auto parts = parse_list_parts(
      "<ListPartsResult><IsTruncated>true</IsTruncated><NextPartNumberMarker>2</NextPartNumberMarker>"
      "<Part><PartNumber>1</PartNumber><ETag>&quot;e1&quot;</ETag><Size>5242880</Size></Part>"
      "<Part><PartNumber>2</PartNumber><ETag>\"e2\"</ETag><Size>7</Size></Part></ListPartsResult>");
  REQUIRE(parts);
  CHECK(parts->parts == std::vector<S3Part>{{1, 5242880, "e1"}, {2, 7, "e2"}});
  CHECK(parts->truncated);
  CHECK(parts->next_marker == 2);

  CHECK(complete_multipart_xml({{1, 0, "e1"}, {2, 0, "a&b"}}) ==
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>\"e1\"</ETag></Part>"
        "<Part><PartNumber>2</PartNumber><ETag>\"a&amp;b\"</ETag></Part></CompleteMultipartUpload>");
}

TEST_CASE("an S3 error's code and message; anything else gives empty fields", "[s3]") {
  const S3Error e = parse_s3_error(
      R"(<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce</Message>)"
      R"(<Resource>/b/k</Resource></Error>)");
  CHECK(e.code == "SlowDown");
  CHECK(e.message == "Please reduce");
  CHECK(parse_s3_error("<html>busy</html>").code.empty());
  CHECK(parse_s3_error("").code.empty());
}
