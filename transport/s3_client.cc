#include "transport/s3_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace ptcfs::transport {

namespace {

constexpr size_t kMaxErrorBody = 64 << 10;
constexpr size_t kPoolSize = 16;

std::string trim(std::string s) {
  const auto sp = [](unsigned char c) { return std::isspace(c) != 0; };
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), sp));
  s.erase(std::find_if_not(s.rbegin(), s.rend(), sp).base(), s.end());
  return s;
}

uint64_t jitter() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return rng();
}

bool ieq_prefix(const char* s, size_t n, std::string_view p) {
  if (n < p.size()) return false;
  for (size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != p[i]) return false;
  return true;
}

Code code_for(long status, std::string_view s3_code) {
  if (status == 404 || s3_code == "NoSuchKey" || s3_code == "NoSuchBucket" || s3_code == "NoSuchUpload")
    return Code::kNotFound;
  if (status == 403 || status == 401) return Code::kPermissionDenied;
  if (status == 416) return Code::kOutOfRange;
  if (status == 409) return Code::kFailedPrecondition;
  if (status >= 400 && status < 500) return Code::kInvalidArgument;
  return Code::kUnavailable;
}

}  // namespace

struct S3Client::Request {
  std::string method = "GET";
  std::string rel;
  S3Query query;
  const S3Body* body = nullptr;
  std::string post;  // a POST's body (the multipart completion)
  std::string range;
  // Where a 2xx reply's body goes: a string (at most max_out) or a buffer of exactly buf_len.
  std::string* out = nullptr;
  uint64_t max_out = 0;
  char* buf = nullptr;
  size_t buf_len = 0;
  // Per attempt.
  size_t got = 0;
  uint64_t sent = 0;
  bool overflow = false;
  long status = 0;
  std::string etag, error_body;
  uint64_t content_length = 0;
  bool bucket_level = false;  // the bucket itself (creation, listing): no key, no prefix
  void* handle = nullptr;
};

namespace {

size_t on_read(char* dst, size_t size, size_t n, void* p) {
  auto* r = static_cast<S3Client::Request*>(p);
  const S3Body& b = *r->body;
  const uint64_t left = b.size() - r->sent;
  const size_t want = static_cast<size_t>(std::min<uint64_t>(left, size * n));
  if (want == 0) return 0;
  if (b.fd >= 0) {
    const ssize_t got = ::pread(b.fd, dst, want, static_cast<off_t>(b.offset + r->sent));
    if (got <= 0) return CURL_READFUNC_ABORT;
    r->sent += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }
  std::memcpy(dst, b.mem.data() + r->sent, want);
  r->sent += want;
  return want;
}

size_t on_write(char* src, size_t size, size_t n, void* p) {
  auto* r = static_cast<S3Client::Request*>(p);
  const size_t len = size * n;
  long status = 0;
  curl_easy_getinfo(static_cast<CURL*>(r->handle), CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status >= 300) {
    r->error_body.append(src, std::min(len, kMaxErrorBody - std::min(kMaxErrorBody, r->error_body.size())));
    return len;
  }
  if (r->buf) {
    if (r->got + len > r->buf_len) {
      r->overflow = true;
      return 0;
    }
    std::memcpy(r->buf + r->got, src, len);
  } else if (r->out) {
    if (r->out->size() + len > r->max_out) {
      r->overflow = true;
      return 0;
    }
    r->out->append(src, len);
  }
  r->got += len;
  return len;
}

size_t on_header(char* line, size_t size, size_t n, void* p) {
  auto* r = static_cast<S3Client::Request*>(p);
  const size_t len = size * n;
  if (ieq_prefix(line, len, "etag:")) {
    std::string v = trim(std::string(line + 5, len - 5));
    if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
    r->etag = v;
  }
  return len;
}

}  // namespace

Result<S3Credentials> load_s3_credentials(const std::string& file, const std::string& profile) {
  S3Credentials c;
  if (file.empty()) {
    auto env = [](const char* n) {
      const char* v = std::getenv(n);
      return v ? std::string(v) : std::string();
    };
    c.access_key = env("AWS_ACCESS_KEY_ID");
    c.secret_key = env("AWS_SECRET_ACCESS_KEY");
    c.session_token = env("AWS_SESSION_TOKEN");
    if (c.access_key.empty() != c.secret_key.empty())
      return invalid("S3 credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set together");
    return c;
  }
  std::ifstream in(file);
  if (!in) return error(Code::kIo, "S3 credentials file " + file + ": cannot be read: " + std::strerror(errno));
  std::string line, section;
  bool found = false;
  for (int no = 1; std::getline(in, line); ++no) {
    line = trim(line);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      if (line.back() != ']')
        return invalid("S3 credentials file " + file + ":" + std::to_string(no) + ": a bad section");
      section = trim(line.substr(1, line.size() - 2));
      if (section.rfind("profile ", 0) == 0) section = trim(section.substr(8));
      found = found || section == profile;
      continue;
    }
    const size_t eq = line.find('=');
    if (eq == std::string::npos)
      return invalid("S3 credentials file " + file + ":" + std::to_string(no) + ": expected key = value");
    if (section != profile) continue;
    const std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
    if (k == "aws_access_key_id") c.access_key = v;
    if (k == "aws_secret_access_key") c.secret_key = v;
    if (k == "aws_session_token") c.session_token = v;
  }
  if (!found) return invalid("S3 credentials file " + file + ": no [" + profile + "] section");
  if (c.access_key.empty() || c.secret_key.empty())
    return invalid("S3 credentials file " + file + ": [" + profile +
                   "] needs both aws_access_key_id and aws_secret_access_key");
  return c;
}

S3Options S3Access::options(const S3Location& at) const {
  S3Options o;
  o.endpoint = endpoint;
  o.region = region;
  o.credentials = credentials;
  o.ca_file = ca_file;
  o.bucket = at.bucket;
  o.prefix = at.prefix;
  return o;
}

Result<std::optional<S3Access>> resolve_s3_access(const std::string& endpoint, const std::string& region,
                                                  const std::string& credentials_file, const std::string& ca_file) {
  auto env = [](const char* n) {
    const char* v = std::getenv(n);
    return v ? std::string(v) : std::string();
  };
  std::string url = endpoint;
  for (const char* v : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"})
    if (url.empty()) url = env(v);
  if (url.empty()) {
    if (!credentials_file.empty() || !ca_file.empty())
      return invalid("--s3-credentials and --s3-ca-file need --s3-endpoint (or AWS_ENDPOINT_URL)");
    return std::optional<S3Access>();
  }
  S3Access a;
  PTC_ASSIGN_OR_RETURN(a.endpoint, parse_s3_endpoint(url));
  a.region = region;
  for (const char* v : {"AWS_REGION", "AWS_DEFAULT_REGION"})
    if (a.region.empty()) a.region = env(v);
  if (a.region.empty()) a.region = "us-east-1";
  if (a.region.find(':') != std::string::npos) return invalid("S3 region '" + a.region + "' has a ':'");
  PTC_ASSIGN_OR_RETURN(a.credentials, load_s3_credentials(credentials_file));
  if (!ca_file.empty() && ::access(ca_file.c_str(), R_OK) != 0)
    return invalid("--s3-ca-file " + ca_file + ": cannot be read");
  if (!ca_file.empty() && a.endpoint.scheme != "https")
    return invalid("--s3-ca-file is for an https endpoint, not " + a.endpoint.url());
  a.ca_file = ca_file;
  return std::optional<S3Access>(std::move(a));
}

Result<std::unique_ptr<S3Client>> S3Client::make(S3Options o) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (init != CURLE_OK) return internal(std::string("libcurl: ") + curl_easy_strerror(init));
  PTC_RETURN_IF_ERROR(check_bucket_name(o.bucket));
  PTC_ASSIGN_OR_RETURN(o.prefix, canonical_prefix(o.prefix));
  if (o.attempts < 1) return invalid("S3: attempts must be at least 1");
  if (o.region.empty() || o.region.find(':') != std::string::npos) return invalid("S3: bad region '" + o.region + "'");
  if (!o.ca_file.empty() && ::access(o.ca_file.c_str(), R_OK) != 0)
    return invalid("S3: the CA file " + o.ca_file + " cannot be read");
  std::unique_ptr<S3Client> c(new S3Client(std::move(o)));
  c->sigv4_ = "aws:amz:" + c->o_.region + ":s3";
  return c;
}

S3Client::~S3Client() {
  for (void* h : pool_) curl_easy_cleanup(static_cast<CURL*>(h));
}

S3Client::Counters& S3Client::totals() {
  static Counters all;
  return all;
}

std::string S3Client::where(std::string_view rel) const {
  return "s3://" + o_.bucket + "/" + o_.prefix + std::string(rel);
}

void* S3Client::take_handle() {
  {
    std::lock_guard lock(pool_mu_);
    if (!pool_.empty()) {
      void* h = pool_.back();
      pool_.pop_back();
      return h;
    }
  }
  return curl_easy_init();
}

void S3Client::give_handle(void* h) {
  std::lock_guard lock(pool_mu_);
  if (pool_.size() < kPoolSize) {
    pool_.push_back(h);
    return;
  }
  curl_easy_cleanup(static_cast<CURL*>(h));
}

Status S3Client::run(Request& r) {
  const std::string key = r.bucket_level ? std::string() : o_.prefix + r.rel;
  const std::string url = s3_url(o_.endpoint, o_.bucket, key, r.query);
  const std::string what = "S3 " + r.method + " " + (r.bucket_level ? "s3://" + o_.bucket : where(r.rel));
  CURL* h = static_cast<CURL*>(take_handle());
  if (!h) return internal(what + ": libcurl could not make a handle");
  struct Give {
    S3Client* c;
    CURL* h;
    ~Give() { c->give_handle(h); }
  } give{this, h};
  r.handle = h;
  std::string last;
  for (int attempt = 1;; ++attempt) {
    r.got = 0;
    r.sent = 0;
    r.overflow = false;
    r.status = 0;
    r.etag.clear();
    r.error_body.clear();
    if (r.out) r.out->clear();
    curl_easy_reset(h);
    char errbuf[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(o_.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, static_cast<long>(o_.stall_timeout.count()));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &r);
    if (!o_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, o_.ca_file.c_str());
    // No "Expect:" header to turn 100-continue off: libcurl's SigV4 would sign the empty header and
    // the server would not match it. Waiting for a 100 is cut short instead.
    curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS, 0L);
    curl_slist* headers = nullptr;
    if (!o_.credentials.anonymous()) {
      curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4_.c_str());
      curl_easy_setopt(h, CURLOPT_USERNAME, o_.credentials.access_key.c_str());
      curl_easy_setopt(h, CURLOPT_PASSWORD, o_.credentials.secret_key.c_str());
      headers = curl_slist_append(headers, "x-amz-content-sha256:UNSIGNED-PAYLOAD");
      if (!o_.credentials.session_token.empty())
        headers = curl_slist_append(headers, ("x-amz-security-token:" + o_.credentials.session_token).c_str());
    }
    if (!r.range.empty()) headers = curl_slist_append(headers, ("Range: " + r.range).c_str());
    if (r.method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      static const S3Body kEmpty;
      if (!r.body) r.body = &kEmpty;
      curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(h, CURLOPT_READDATA, &r);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body->size()));
    } else if (r.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, r.post.c_str());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.post.size()));
      if (!r.post.empty()) headers = curl_slist_append(headers, "Content-Type: application/xml");
    } else if (r.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (r.method == "DELETE") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    counters_.requests.fetch_add(1, std::memory_order_relaxed);
    totals().requests.fetch_add(1, std::memory_order_relaxed);
    const CURLcode rc = curl_easy_perform(h);
    curl_slist_free_all(headers);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r.status);
    curl_off_t length = -1;
    if (curl_easy_getinfo(h, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length) == CURLE_OK && length >= 0)
      r.content_length = static_cast<uint64_t>(length);
    S3Error e;
    if (rc == CURLE_OK && r.status >= 200 && r.status < 300) {
      if (r.buf && r.got != r.buf_len)
        return corrupt(what + " (" + r.range + "): " + std::to_string(r.got) + " bytes came, " +
                       std::to_string(r.buf_len) + " were asked for");
      counters_.bytes_sent.fetch_add(r.sent, std::memory_order_relaxed);
      counters_.bytes_received.fetch_add(r.got, std::memory_order_relaxed);
      totals().bytes_sent.fetch_add(r.sent, std::memory_order_relaxed);
      totals().bytes_received.fetch_add(r.got, std::memory_order_relaxed);
      return Status::ok();
    }
    if (r.overflow)
      return r.buf ? corrupt(what + ": the reply is longer than the " + std::to_string(r.buf_len) + " bytes asked for")
                   : error(Code::kResourceExhausted,
                           what + ": the object is larger than " + std::to_string(r.max_out) + " bytes");
    if (rc != CURLE_OK) {
      last = std::string(curl_easy_strerror(rc)) + (errbuf[0] ? std::string(": ") + errbuf : std::string());
      // Trying again will not help: the endpoint's certificate, the CA file, the URL.
      if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE || rc == CURLE_SSL_CERTPROBLEM ||
          rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_URL_MALFORMAT)
        return error(Code::kPermissionDenied, what + ": " + last);
      r.status = 0;
    } else {
      e = parse_s3_error(r.error_body);
      last =
          std::to_string(r.status) + (e.code.empty() ? "" : " " + e.code) + (e.message.empty() ? "" : ": " + e.message);
    }
    if (!s3_retryable(r.status, e.code)) return error(code_for(r.status, e.code), what + ": " + last);
    if (attempt >= o_.attempts)
      return error(Code::kUnavailable, what + ": " + last + " (gave up after " + std::to_string(attempt) + " tries)");
    counters_.retries.fetch_add(1, std::memory_order_relaxed);
    totals().retries.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(s3_backoff(attempt, o_.backoff_base, o_.backoff_cap, jitter()));
  }
}

Status S3Client::create_bucket() {
  Request r;
  r.method = "PUT";
  r.bucket_level = true;
  Status st = run(r);
  if (!st && st.message().find("BucketAlreadyOwnedByYou") != std::string::npos) return Status::ok();
  return st;
}

Status S3Client::put(std::string_view rel, const S3Body& body) {
  Request r;
  r.method = "PUT";
  r.rel = std::string(rel);
  r.body = &body;
  return run(r);
}

Result<std::string> S3Client::get(std::string_view rel, uint64_t max_bytes) {
  Request r;
  r.rel = std::string(rel);
  std::string out;
  r.out = &out;
  r.max_out = max_bytes;
  PTC_RETURN_IF_ERROR(run(r));
  return out;
}

Status S3Client::get_range(std::string_view rel, uint64_t off, void* buf, size_t len) {
  if (len == 0) return Status::ok();
  Request r;
  r.rel = std::string(rel);
  r.range = "bytes=" + std::to_string(off) + "-" + std::to_string(off + len - 1);
  r.buf = static_cast<char*>(buf);
  r.buf_len = len;
  return run(r);
}

Result<std::optional<S3Object>> S3Client::head(std::string_view rel) {
  Request r;
  r.method = "HEAD";
  r.rel = std::string(rel);
  Status st = run(r);
  if (!st && st.code() == Code::kNotFound) return std::optional<S3Object>();
  PTC_RETURN_IF_ERROR(st);
  S3Object o;
  o.key = std::string(rel);
  o.size = r.content_length;
  o.etag = r.etag;
  return std::optional<S3Object>(std::move(o));
}

Result<std::vector<S3Object>> S3Client::list(std::string_view rel_prefix) {
  std::vector<S3Object> all;
  std::string token;
  const std::string full = o_.prefix + std::string(rel_prefix);
  for (int page = 0;; ++page) {
    Request r;
    r.bucket_level = true;
    r.query = {{"list-type", "2"}, {"prefix", full}};
    if (!token.empty()) r.query.emplace_back("continuation-token", token);
    std::string out;
    r.out = &out;
    r.max_out = 64 << 20;
    PTC_RETURN_IF_ERROR(run(r));
    PTC_ASSIGN_OR_RETURN(S3ListPage p, parse_list_objects(out), "listing " + where(rel_prefix));
    for (S3Object& o : p.objects) {
      if (o.key.compare(0, o_.prefix.size(), o_.prefix) != 0)
        return corrupt("listing " + where(rel_prefix) + ": the server returned '" + o.key + "', outside the prefix");
      o.key.erase(0, o_.prefix.size());
      all.push_back(std::move(o));
    }
    if (!p.truncated) return all;
    if (p.next_token == token) return corrupt("listing " + where(rel_prefix) + ": the same page twice");
    token = p.next_token;
  }
}

Status S3Client::remove(std::string_view rel) {
  Request r;
  r.method = "DELETE";
  r.rel = std::string(rel);
  Status st = run(r);
  if (!st && st.code() == Code::kNotFound) return Status::ok();
  return st;
}

Result<std::string> S3Client::start_multipart(std::string_view rel) {
  Request r;
  r.method = "POST";
  r.rel = std::string(rel);
  r.query = {{"uploads", ""}};
  std::string out;
  r.out = &out;
  r.max_out = 1 << 20;
  PTC_RETURN_IF_ERROR(run(r));
  return parse_upload_id(out);
}

Result<std::string> S3Client::put_part(std::string_view rel, const std::string& upload_id, int number,
                                       const S3Body& body) {
  if (number < 1 || number > 10000) return invalid("S3 part numbers are 1 to 10000, not " + std::to_string(number));
  Request r;
  r.method = "PUT";
  r.rel = std::string(rel);
  r.query = {{"partNumber", std::to_string(number)}, {"uploadId", upload_id}};
  r.body = &body;
  PTC_RETURN_IF_ERROR(run(r));
  if (r.etag.empty())
    return corrupt("S3 PUT " + where(rel) + " part " + std::to_string(number) + ": no ETag came back");
  return r.etag;
}

Result<std::vector<S3Part>> S3Client::list_parts(std::string_view rel, const std::string& upload_id) {
  std::vector<S3Part> all;
  int marker = 0;
  while (true) {
    Request r;
    r.rel = std::string(rel);
    r.query = {{"uploadId", upload_id}};
    if (marker > 0) r.query.emplace_back("part-number-marker", std::to_string(marker));
    std::string out;
    r.out = &out;
    r.max_out = 16 << 20;
    PTC_RETURN_IF_ERROR(run(r));
    PTC_ASSIGN_OR_RETURN(S3PartsPage p, parse_list_parts(out), "listing the parts of " + where(rel));
    all.insert(all.end(), p.parts.begin(), p.parts.end());
    if (!p.truncated) return all;
    if (p.next_marker <= marker) return corrupt("listing the parts of " + where(rel) + ": the marker went back");
    marker = p.next_marker;
  }
}

Status S3Client::complete_multipart(std::string_view rel, const std::string& upload_id,
                                    const std::vector<S3Part>& parts) {
  Request r;
  r.method = "POST";
  r.rel = std::string(rel);
  r.query = {{"uploadId", upload_id}};
  r.post = complete_multipart_xml(parts);
  std::string out;
  r.out = &out;
  r.max_out = 1 << 20;
  PTC_RETURN_IF_ERROR(run(r));
  // S3 may answer 200 with an error in the body when the completion failed late.
  if (const S3Error e = parse_s3_error(out); !e.code.empty())
    return error(s3_retryable(500, e.code) ? Code::kUnavailable : Code::kFailedPrecondition,
                 "S3 completing " + where(rel) + ": " + e.code + ": " + e.message);
  return Status::ok();
}

Status S3Client::abort_multipart(std::string_view rel, const std::string& upload_id) {
  Request r;
  r.method = "DELETE";
  r.rel = std::string(rel);
  r.query = {{"uploadId", upload_id}};
  Status st = run(r);
  if (!st && st.code() == Code::kNotFound) return Status::ok();
  return st;
}

}  // namespace ptcfs::transport
