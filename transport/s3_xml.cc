#include "transport/s3_xml.h"

#include <charconv>
#include <memory>

namespace ptcfs::transport {

namespace {

constexpr size_t kMaxDepth = 16;

struct Node {
  std::string name;
  std::string text;
  std::vector<Node> children;

  const Node* child(std::string_view n) const {
    for (const Node& c : children)
      if (c.name == n) return &c;
    return nullptr;
  }
};

class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Result<Node> document() {
    skip_prolog();
    Node root;
    PTC_RETURN_IF_ERROR(element(root, 0));
    skip_misc();
    if (i_ != s_.size()) return bad("content after the root element");
    return root;
  }

 private:
  Status bad(const std::string& what) const {
    return corrupt("S3 reply: malformed XML at byte " + std::to_string(i_) + ": " + what);
  }
  bool starts(std::string_view p) const { return s_.substr(i_, p.size()) == p; }
  void skip_space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\r' || s_[i_] == '\n')) ++i_;
  }
  // Comments and processing instructions between elements.
  bool skip_one_misc() {
    if (starts("<?")) {
      const size_t e = s_.find("?>", i_);
      i_ = e == std::string_view::npos ? s_.size() : e + 2;
      return true;
    }
    if (starts("<!--")) {
      const size_t e = s_.find("-->", i_);
      i_ = e == std::string_view::npos ? s_.size() : e + 3;
      return true;
    }
    return false;
  }
  void skip_misc() {
    do skip_space();
    while (skip_one_misc());
  }
  void skip_prolog() { skip_misc(); }

  Result<std::string> name() {
    const size_t b = i_;
    while (i_ < s_.size() && s_[i_] != '>' && s_[i_] != '/' && s_[i_] != ' ' && s_[i_] != '\t' && s_[i_] != '\r' &&
           s_[i_] != '\n')
      ++i_;
    if (i_ == b) return bad("an element without a name");
    std::string_view n = s_.substr(b, i_ - b);
    if (const size_t colon = n.find(':'); colon != std::string_view::npos) n.remove_prefix(colon + 1);
    return std::string(n);
  }

  Status element(Node& out, size_t depth) {
    if (depth > kMaxDepth) return bad("nested deeper than " + std::to_string(kMaxDepth));
    if (starts("<!")) return bad("a DOCTYPE or CDATA outside an element (not accepted)");
    if (!starts("<")) return bad("expected an element");
    ++i_;
    PTC_ASSIGN_OR_RETURN(out.name, name());
    // Attributes are skipped (quoted values may hold '>').
    while (i_ < s_.size() && s_[i_] != '>' && !starts("/>")) {
      if (s_[i_] == '"' || s_[i_] == '\'') {
        const size_t e = s_.find(s_[i_], i_ + 1);
        if (e == std::string_view::npos) return bad("an unterminated attribute value");
        i_ = e + 1;
      } else {
        ++i_;
      }
    }
    if (i_ >= s_.size()) return bad("an unterminated start tag <" + out.name + ">");
    if (starts("/>")) {
      i_ += 2;
      return Status::ok();
    }
    ++i_;  // '>'
    std::string raw;
    while (true) {
      if (i_ >= s_.size()) return bad("no end tag </" + out.name + ">");
      if (starts("</")) {
        i_ += 2;
        PTC_ASSIGN_OR_RETURN(const std::string end, name());
        skip_space();
        if (end != out.name || i_ >= s_.size() || s_[i_] != '>') return bad("</" + end + "> closes <" + out.name + ">");
        ++i_;
        PTC_ASSIGN_OR_RETURN(std::string text, xml_unescape(raw));
        out.text += text;
        return Status::ok();
      }
      if (starts("<![CDATA[")) {
        const size_t e = s_.find("]]>", i_);
        if (e == std::string_view::npos) return bad("an unterminated CDATA section");
        PTC_ASSIGN_OR_RETURN(std::string text, xml_unescape(raw));
        out.text += text;
        raw.clear();
        out.text.append(s_.substr(i_ + 9, e - i_ - 9));
        i_ = e + 3;
        continue;
      }
      if (skip_one_misc()) continue;
      if (starts("<")) {
        Node c;
        PTC_RETURN_IF_ERROR(element(c, depth + 1));
        out.children.push_back(std::move(c));
        continue;
      }
      raw.push_back(s_[i_++]);
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

Result<Node> parse_root(std::string_view xml, std::string_view root) {
  PTC_ASSIGN_OR_RETURN(Node n, Parser(xml).document());
  if (n.name != root) return corrupt("S3 reply: expected <" + std::string(root) + ">, got <" + n.name + ">");
  return n;
}

Result<std::string> text_of(const Node& parent, std::string_view name) {
  const Node* c = parent.child(name);
  if (!c) return corrupt("S3 reply: <" + parent.name + "> has no <" + std::string(name) + ">");
  return c->text;
}

std::string text_or(const Node& parent, std::string_view name) {
  const Node* c = parent.child(name);
  return c ? c->text : std::string();
}

template <typename T>
Result<T> number_of(const Node& parent, std::string_view name) {
  PTC_ASSIGN_OR_RETURN(const std::string t, text_of(parent, name));
  T v{};
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec != std::errc() || p != t.data() + t.size() || t.empty())
    return corrupt("S3 reply: <" + std::string(name) + "> is not a number: '" + t + "'");
  return v;
}

Result<bool> bool_of(const Node& parent, std::string_view name) {
  const std::string t = text_or(parent, name);
  if (t.empty() || t == "false") return false;
  if (t == "true") return true;
  return corrupt("S3 reply: <" + std::string(name) + "> is neither true nor false: '" + t + "'");
}

std::string unquote(std::string e) {
  if (e.size() >= 2 && e.front() == '"' && e.back() == '"') return e.substr(1, e.size() - 2);
  return e;
}

void append_utf8(std::string& out, uint32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace

Result<std::string> xml_unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '&') {
      out.push_back(text[i]);
      continue;
    }
    const size_t semi = text.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) return corrupt("S3 reply: an unterminated entity in XML text");
    const std::string_view ent = text.substr(i + 1, semi - i - 1);
    if (ent == "amp") {
      out.push_back('&');
    } else if (ent == "lt") {
      out.push_back('<');
    } else if (ent == "gt") {
      out.push_back('>');
    } else if (ent == "quot") {
      out.push_back('"');
    } else if (ent == "apos") {
      out.push_back('\'');
    } else if (ent.size() >= 2 && ent[0] == '#') {
      const bool hex = ent[1] == 'x' || ent[1] == 'X';
      const std::string_view digits = ent.substr(hex ? 2 : 1);
      uint32_t c = 0;
      auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), c, hex ? 16 : 10);
      if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || c == 0 || c > 0x10FFFF ||
          (c >= 0xD800 && c <= 0xDFFF))
        return corrupt("S3 reply: a bad character reference &" + std::string(ent) + ";");
      append_utf8(out, c);
    } else {
      return corrupt("S3 reply: an unknown entity &" + std::string(ent) + ";");
    }
    i = semi;
  }
  return out;
}

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

Result<S3ListPage> parse_list_objects(std::string_view xml) {
  PTC_ASSIGN_OR_RETURN(const Node root, parse_root(xml, "ListBucketResult"));
  S3ListPage page;
  for (const Node& c : root.children) {
    if (c.name != "Contents") continue;
    S3Object o;
    PTC_ASSIGN_OR_RETURN(o.key, text_of(c, "Key"));
    PTC_ASSIGN_OR_RETURN(o.size, number_of<uint64_t>(c, "Size"));
    o.etag = unquote(text_or(c, "ETag"));
    page.objects.push_back(std::move(o));
  }
  PTC_ASSIGN_OR_RETURN(page.truncated, bool_of(root, "IsTruncated"));
  page.next_token = text_or(root, "NextContinuationToken");
  if (page.truncated && page.next_token.empty())
    return corrupt("S3 reply: a truncated listing without <NextContinuationToken>");
  return page;
}

Result<std::string> parse_upload_id(std::string_view xml) {
  PTC_ASSIGN_OR_RETURN(const Node root, parse_root(xml, "InitiateMultipartUploadResult"));
  PTC_ASSIGN_OR_RETURN(std::string id, text_of(root, "UploadId"));
  if (id.empty()) return corrupt("S3 reply: an empty <UploadId>");
  return id;
}

Result<S3PartsPage> parse_list_parts(std::string_view xml) {
  PTC_ASSIGN_OR_RETURN(const Node root, parse_root(xml, "ListPartsResult"));
  S3PartsPage page;
  for (const Node& c : root.children) {
    if (c.name != "Part") continue;
    S3Part p;
    PTC_ASSIGN_OR_RETURN(p.number, number_of<int>(c, "PartNumber"));
    PTC_ASSIGN_OR_RETURN(p.size, number_of<uint64_t>(c, "Size"));
    p.etag = unquote(text_or(c, "ETag"));
    page.parts.push_back(std::move(p));
  }
  PTC_ASSIGN_OR_RETURN(page.truncated, bool_of(root, "IsTruncated"));
  if (page.truncated) {
    PTC_ASSIGN_OR_RETURN(page.next_marker, number_of<int>(root, "NextPartNumberMarker"));
  }
  return page;
}

S3Error parse_s3_error(std::string_view xml) {
  auto root = parse_root(xml, "Error");
  if (!root) return {};
  return {text_or(*root, "Code"), text_or(*root, "Message")};
}

std::string complete_multipart_xml(const std::vector<S3Part>& parts) {
  std::string out = "<CompleteMultipartUpload>";
  for (const S3Part& p : parts)
    out += "<Part><PartNumber>" + std::to_string(p.number) + "</PartNumber><ETag>\"" + xml_escape(p.etag) +
           "\"</ETag></Part>";
  out += "</CompleteMultipartUpload>";
  return out;
}

}  // namespace ptcfs::transport
