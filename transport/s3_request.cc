#include "transport/s3_request.h"

#include <algorithm>
#include <charconv>

namespace ptcfs::transport {

std::string S3Endpoint::url() const {
  const bool default_port = (scheme == "http" && port == 80) || (scheme == "https" && port == 443);
  return scheme + "://" + host + (default_port ? "" : ":" + std::to_string(port));
}

Result<S3Endpoint> parse_s3_endpoint(std::string_view url) {
  const std::string what = "S3 endpoint '" + std::string(url) + "'";
  S3Endpoint e;
  std::string_view rest;
  if (url.substr(0, 7) == "http://") {
    e.scheme = "http";
    e.port = 80;
    rest = url.substr(7);
  } else if (url.substr(0, 8) == "https://") {
    e.scheme = "https";
    e.port = 443;
    rest = url.substr(8);
  } else {
    return invalid(what + ": must start with http:// or https://");
  }
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.find_first_of("/?#@ ") != std::string_view::npos)
    return invalid(what + ": give the host and port only (the bucket and prefix are separate settings)");
  std::string_view host = rest;
  if (const size_t colon = rest.rfind(':');
      colon != std::string_view::npos && rest.find(']') == std::string_view::npos) {
    host = rest.substr(0, colon);
    const std::string_view p = rest.substr(colon + 1);
    int port = 0;
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (p.empty() || ec != std::errc() || end != p.data() + p.size() || port < 1 || port > 65535)
      return invalid(what + ": bad port '" + std::string(p) + "'");
    e.port = port;
  }
  if (host.empty()) return invalid(what + ": no host");
  e.host = std::string(host);
  return e;
}

Status check_bucket_name(std::string_view b) {
  const std::string what = "S3 bucket '" + std::string(b) + "'";
  if (b.size() < 3 || b.size() > 63) return invalid(what + ": a bucket name has 3 to 63 characters");
  for (char c : b)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
      return invalid(what + ": only lower-case letters, digits, '.' and '-'");
  auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!alnum(b.front()) || !alnum(b.back())) return invalid(what + ": must start and end with a letter or digit");
  if (b.find("..") != std::string_view::npos) return invalid(what + ": no two '.' in a row");
  return Status::ok();
}

Result<std::string> canonical_prefix(std::string_view p) {
  const std::string what = "S3 prefix '" + std::string(p) + "'";
  while (!p.empty() && p.front() == '/') p.remove_prefix(1);
  while (!p.empty() && p.back() == '/') p.remove_suffix(1);
  if (p.empty()) return std::string();
  if (p.size() > 512) return invalid(what + ": longer than 512 bytes");
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string_view::npos) end = p.size();
    const std::string_view seg = p.substr(start, end - start);
    if (seg.empty() || seg == "." || seg == "..") return invalid(what + ": an empty, '.' or '..' segment");
    start = end + 1;
  }
  for (unsigned char c : p)
    if (c < 0x20 || c == 0x7f) return invalid(what + ": a control character");
  return std::string(p) + "/";
}

Result<S3Location> parse_s3_url(std::string_view url) {
  if (url.substr(0, 5) != "s3://") return invalid("'" + std::string(url) + "' is not an s3://bucket/prefix URL");
  std::string_view rest = url.substr(5);
  const size_t slash = rest.find('/');
  S3Location l;
  l.bucket = std::string(rest.substr(0, slash));
  PTC_RETURN_IF_ERROR(check_bucket_name(l.bucket), std::string(url));
  if (slash != std::string_view::npos) {
    PTC_ASSIGN_OR_RETURN(l.prefix, canonical_prefix(rest.substr(slash + 1)), std::string(url));
  }
  return l;
}

std::string uri_encode(std::string_view s, bool keep_slash) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    const bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
                            c == '_' || c == '.' || c == '~';
    if (unreserved || (keep_slash && c == '/')) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::string s3_url(const S3Endpoint& endpoint, std::string_view bucket, std::string_view key, S3Query query) {
  std::string out = endpoint.url() + "/" + std::string(bucket);
  if (!key.empty()) out += "/" + uri_encode(key, true);
  std::sort(query.begin(), query.end());
  for (size_t i = 0; i < query.size(); ++i)
    out += (i == 0 ? "?" : "&") + uri_encode(query[i].first, false) + "=" + uri_encode(query[i].second, false);
  return out;
}

bool s3_retryable(long http_status, std::string_view code) {
  if (http_status == 0) return true;  // no reply
  if (http_status == 429 || http_status == 500 || http_status == 502 || http_status == 503 || http_status == 504)
    return true;
  return code == "RequestTimeout" || code == "RequestTimeTooSkewed" || code == "SlowDown" || code == "InternalError" ||
         code == "ServiceUnavailable";
}

std::chrono::milliseconds s3_backoff(int attempt, std::chrono::milliseconds base, std::chrono::milliseconds cap,
                                     uint64_t random) {
  const int shift = std::clamp(attempt - 1, 0, 20);
  const int64_t ceiling = std::min<int64_t>(cap.count(), base.count() << shift);
  if (ceiling <= 0) return std::chrono::milliseconds(0);
  return std::chrono::milliseconds(static_cast<int64_t>(random % static_cast<uint64_t>(ceiling + 1)));
}

}  // namespace ptcfs::transport
