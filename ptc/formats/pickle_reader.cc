#include "ptc/formats/pickle_reader.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "ptc/base/endian.h"

namespace ptcfs::formats {
namespace {

// Every opcode of pickletools, for messages; the ones read are handled in PickleMachine::step.
// clang-format off
constexpr std::pair<uint8_t, const char*> kOpcodeNames[] = {
    {'(', "MARK"}, {'.', "STOP"}, {'0', "POP"}, {'1', "POP_MARK"}, {'2', "DUP"}, {'F', "FLOAT"}, {'I', "INT"},
    {'J', "BININT"}, {'K', "BININT1"}, {'L', "LONG"}, {'M', "BININT2"}, {'N', "NONE"}, {'P', "PERSID"},
    {'Q', "BINPERSID"}, {'R', "REDUCE"}, {'S', "STRING"}, {'T', "BINSTRING"}, {'U', "SHORT_BINSTRING"},
    {'V', "UNICODE"}, {'X', "BINUNICODE"}, {'a', "APPEND"}, {'b', "BUILD"}, {'c', "GLOBAL"}, {'d', "DICT"},
    {'}', "EMPTY_DICT"}, {'e', "APPENDS"}, {'g', "GET"}, {'h', "BINGET"}, {'i', "INST"}, {'j', "LONG_BINGET"},
    {'l', "LIST"}, {']', "EMPTY_LIST"}, {'o', "OBJ"}, {'p', "PUT"}, {'q', "BINPUT"}, {'r', "LONG_BINPUT"},
    {'s', "SETITEM"}, {'t', "TUPLE"}, {')', "EMPTY_TUPLE"}, {'u', "SETITEMS"}, {'G', "BINFLOAT"}, {'B', "BINBYTES"},
    {'C', "SHORT_BINBYTES"}, {0x80, "PROTO"}, {0x81, "NEWOBJ"}, {0x82, "EXT1"}, {0x83, "EXT2"}, {0x84, "EXT4"},
    {0x85, "TUPLE1"}, {0x86, "TUPLE2"}, {0x87, "TUPLE3"}, {0x88, "NEWTRUE"}, {0x89, "NEWFALSE"}, {0x8a, "LONG1"},
    {0x8b, "LONG4"}, {0x8c, "SHORT_BINUNICODE"}, {0x8d, "BINUNICODE8"}, {0x8e, "BINBYTES8"}, {0x8f, "EMPTY_SET"},
    {0x90, "ADDITEMS"}, {0x91, "FROZENSET"}, {0x92, "NEWOBJ_EX"}, {0x93, "STACK_GLOBAL"}, {0x94, "MEMOIZE"},
    {0x95, "FRAME"}, {0x96, "BYTEARRAY8"}, {0x97, "NEXT_BUFFER"}, {0x98, "READONLY_BUFFER"}};
// clang-format on

const char* opcode_name(uint8_t op) {
  for (const auto& [code, name] : kOpcodeNames) {
    if (code == op) return name;
  }
  return nullptr;
}

std::string hex_byte(uint8_t b) {
  static const char* d = "0123456789abcdef";
  return std::string("0x") + d[b >> 4] + d[b & 15];
}

// Strict UTF-8: shortest forms, code points up to U+10FFFF, no surrogates. Python pickles str
// with "surrogatepass", so a str holding a lone surrogate is refused here: the names read end up
// in JSON, which cannot hold one.
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n = 0;
    uint32_t cp = 0, min = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 1, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i - 1 < n) return false;
    for (size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n + 1;
  }
  return true;
}

// A decimal integer as INT, LONG, PUT and GET write it: an optional sign, then digits.
bool parse_decimal(std::string_view s, int64_t& out) {
  bool neg = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    neg = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  const uint64_t limit = neg ? uint64_t{1} << 63 : (uint64_t{1} << 63) - 1;
  if (v > limit) return false;
  out = neg ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

}  // namespace

class PickleMachine {
 public:
  PickleMachine(std::string_view in, const PickleLimits& limits) : in_(in), limits_(limits) {}

  Result<PickleTree> run() {
    while (!stopped_) {
      if (pos_ >= in_.size()) return corrupt("pickle: truncated: no STOP after byte " + std::to_string(in_.size()));
      op_at_ = pos_;
      const auto op = static_cast<uint8_t>(in_[pos_++]);
      PTC_RETURN_IF_ERROR(step(op));
    }
    if (pos_ != in_.size()) {
      return corrupt("pickle: " + std::to_string(in_.size() - pos_) + " bytes after STOP at byte " +
                     std::to_string(op_at_));
    }
    if (stack_.size() != 1 || !marks_.empty()) {
      return fail(Code::kCorrupt, "STOP leaves " + std::to_string(stack_.size()) + " values and " +
                                      std::to_string(marks_.size()) + " marks on the stack, not one value");
    }
    tree_.root_ = stack_[0];
    return std::move(tree_);
  }

 private:
  Status fail(Code code, const std::string& what) const {
    return error(code, "pickle: " + what + " at byte " + std::to_string(op_at_));
  }
  Status truncated(const char* what, uint64_t n) const {
    return fail(Code::kCorrupt, std::string("truncated: ") + what + " needs " + std::to_string(n) + " bytes, " +
                                    std::to_string(in_.size() - pos_) + " left");
  }

  Result<std::string_view> take(uint64_t n, const char* what) {
    if (n > in_.size() - pos_) return truncated(what, n);
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <class T>
  Result<T> take_le(const char* what) {
    PTC_ASSIGN_OR_RETURN(const std::string_view b, take(sizeof(T), what));
    return load_le<T>(b.data());
  }
  // A text argument: the bytes up to the next newline, which is consumed.
  Result<std::string_view> line(const char* what) {
    const size_t nl = in_.find('\n', pos_);
    if (nl == std::string_view::npos)
      return fail(Code::kCorrupt, std::string("truncated: ") + what + " has no newline");
    const std::string_view s = in_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }

  size_t fence() const { return marks_.empty() ? 0 : marks_.back(); }
  Status push(PickleId id) {
    if (stack_.size() + marks_.size() >= limits_.max_stack) {
      return fail(Code::kResourceExhausted, "stack deeper than " + std::to_string(limits_.max_stack));
    }
    stack_.push_back(id);
    return Status::ok();
  }
  Result<PickleId> top() const {
    if (stack_.size() <= fence()) return fail(Code::kCorrupt, "stack underflow");
    return stack_.back();
  }
  Result<PickleId> pop() {
    PTC_ASSIGN_OR_RETURN(const PickleId id, top());
    stack_.pop_back();
    return id;
  }
  // The values above the last MARK, which is removed.
  Result<std::vector<PickleId>> pop_mark() {
    if (marks_.empty()) return fail(Code::kCorrupt, "no MARK on the stack");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PickleId> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }

  PickleValue& at(PickleId id) { return tree_.values_[id]; }

  // Adds `child` inside `parent`: seals the child, deepens the parent.
  Status adopt(PickleId parent, PickleId child) {
    if (parent == child) return fail(Code::kCorrupt, "a value put inside itself (a recursive structure)");
    sealed_[child] = 1;
    PickleValue& p = at(parent);
    p.depth = std::max(p.depth, at(child).depth + 1);
    if (p.depth > limits_.max_depth) {
      return fail(Code::kResourceExhausted, "values nested deeper than " + std::to_string(limits_.max_depth));
    }
    return Status::ok();
  }
  // Checks that `id` may still change (it is inside no other value).
  Status mutable_value(PickleId id, PickleKind kind, const char* op) {
    if (at(id).kind != kind) {
      return fail(Code::kCorrupt, std::string(op) + " on a " + tree_.describe(id));
    }
    if (sealed_[id]) {
      return fail(Code::kCorrupt, std::string(op) + " changes a value already inside another (a recursive structure)");
    }
    return Status::ok();
  }

  // Makes a value whose children are v.items (and an object's parts), and pushes it.
  Status make(PickleValue v) {
    if (tree_.values_.size() >= limits_.max_values) {
      return fail(Code::kResourceExhausted, "more than " + std::to_string(limits_.max_values) + " values");
    }
    const auto id = static_cast<PickleId>(tree_.values_.size());
    std::vector<PickleId> children = v.items;
    for (PickleId c : {v.callable, v.args, v.kwargs, v.state}) {
      if (c != kNoPickleValue) children.push_back(c);
    }
    tree_.values_.push_back(std::move(v));
    sealed_.push_back(0);
    for (PickleId c : children) PTC_RETURN_IF_ERROR(adopt(id, c));
    return push(id);
  }
  Status make_scalar(PickleKind kind, int64_t integer) {
    PickleValue v;
    v.kind = kind;
    v.integer = integer;
    return make(std::move(v));
  }
  Status make_text(PickleKind kind, std::string_view s) {
    if (kind == PickleKind::kStr && !valid_utf8(s)) return fail(Code::kCorrupt, "str is not UTF-8");
    PickleValue v;
    v.kind = kind;
    v.text = s;
    return make(std::move(v));
  }
  Status make_seq(PickleKind kind, std::vector<PickleId> items) {
    PickleValue v;
    v.kind = kind;
    v.items = std::move(items);
    return make(std::move(v));
  }
  Status make_global(std::string_view module, std::string_view name) {
    if (module.empty() || name.empty() || !valid_utf8(module) || !valid_utf8(name)) {
      return fail(Code::kCorrupt, "a global's module or name is empty or not UTF-8");
    }
    PickleValue v;
    v.kind = PickleKind::kGlobal;
    v.text = module;
    v.name = name;
    return make(std::move(v));
  }
  Status make_object(bool newobj, PickleId callable, PickleId args, PickleId kwargs) {
    if (at(args).kind != PickleKind::kTuple) return fail(Code::kCorrupt, "arguments are a " + tree_.describe(args));
    if (kwargs != kNoPickleValue && at(kwargs).kind != PickleKind::kDict) {
      return fail(Code::kCorrupt, "keyword arguments are a " + tree_.describe(kwargs));
    }
    PickleValue v;
    v.kind = PickleKind::kObject;
    v.newobj = newobj;
    v.callable = callable;
    v.args = args;
    v.kwargs = kwargs;
    return make(std::move(v));
  }

  Status memo_put(uint64_t index) {
    PTC_ASSIGN_OR_RETURN(const PickleId id, top());
    if (index > 0xFFFFFFFFu) return fail(Code::kCorrupt, "memo index " + std::to_string(index) + " too large");
    if (memo_.size() >= limits_.max_memo && !memo_.count(static_cast<uint32_t>(index))) {
      return fail(Code::kResourceExhausted, "more than " + std::to_string(limits_.max_memo) + " memo entries");
    }
    memo_[static_cast<uint32_t>(index)] = id;
    return Status::ok();
  }
  Status memo_get(uint64_t index) {
    const auto it = index > 0xFFFFFFFFu ? memo_.end() : memo_.find(static_cast<uint32_t>(index));
    if (it == memo_.end()) return fail(Code::kCorrupt, "memo index " + std::to_string(index) + " was never stored");
    return push(it->second);
  }

  Status int_bytes(std::string_view b) {
    if (b.size() > 8) {
      return fail(Code::kInvalidArgument, "an integer of " + std::to_string(b.size()) + " bytes is wider than 64 bits");
    }
    uint64_t v = 0;
    for (size_t i = 0; i < b.size(); ++i) v |= uint64_t{static_cast<unsigned char>(b[i])} << (8 * i);
    if (!b.empty() && b.size() < 8 && (static_cast<unsigned char>(b.back()) & 0x80))
      v |= ~uint64_t{0} << (8 * b.size());
    return make_scalar(PickleKind::kInt, static_cast<int64_t>(v));
  }
  Status int_text(std::string_view s, bool long_form) {
    if (!long_form && (s == "00" || s == "01")) return make_scalar(PickleKind::kBool, s == "01");
    if (long_form && !s.empty() && s.back() == 'L') s.remove_suffix(1);
    int64_t v = 0;
    if (!parse_decimal(s, v)) return fail(Code::kInvalidArgument, "integer text is not a 64-bit decimal");
    return make_scalar(PickleKind::kInt, v);
  }
  Status sized_text(PickleKind kind, uint64_t n, const char* what) {
    PTC_ASSIGN_OR_RETURN(const std::string_view s, take(n, what));
    return make_text(kind, s);
  }

  Status append_items(PickleId list, const std::vector<PickleId>& items, const char* op) {
    PTC_RETURN_IF_ERROR(mutable_value(list, PickleKind::kList, op));
    for (PickleId x : items) {
      PTC_RETURN_IF_ERROR(adopt(list, x));
      at(list).items.push_back(x);
    }
    return Status::ok();
  }
  Status set_items(PickleId dict, const std::vector<PickleId>& kv, const char* op) {
    PTC_RETURN_IF_ERROR(mutable_value(dict, PickleKind::kDict, op));
    if (kv.size() % 2) return fail(Code::kCorrupt, std::string(op) + " with an odd number of keys and values");
    for (PickleId x : kv) {
      PTC_RETURN_IF_ERROR(adopt(dict, x));
      at(dict).items.push_back(x);
    }
    return Status::ok();
  }
  // APPENDS, SETITEMS, ADDITEMS: the values above the mark into the value below it.
  template <class F>
  Status into_below_mark(F&& f) {
    PTC_ASSIGN_OR_RETURN(std::vector<PickleId> items, pop_mark());
    PTC_ASSIGN_OR_RETURN(const PickleId target, top());
    return f(target, items);
  }

  Status step(uint8_t op);

  std::string_view in_;
  PickleLimits limits_;
  size_t pos_ = 0, op_at_ = 0;
  bool stopped_ = false;
  PickleTree tree_;
  std::vector<uint8_t> sealed_;  // per value: inside another, may not change
  std::vector<PickleId> stack_;
  std::vector<size_t> marks_;  // stack sizes at each MARK
  std::unordered_map<uint32_t, PickleId> memo_;
};

Status PickleMachine::step(uint8_t op) {
  using K = PickleKind;
  switch (op) {
    case 0x80: {  // PROTO
      PTC_ASSIGN_OR_RETURN(const auto v, take_le<uint8_t>("PROTO"));
      if (v > 5) return fail(Code::kInvalidArgument, "pickle protocol " + std::to_string(v) + " is not supported");
      return Status::ok();
    }
    case 0x95: {  // FRAME: only a hint for buffering; the frame must lie in the input
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint64_t>("FRAME"));
      if (n > in_.size() - pos_) return truncated("FRAME", n);
      return Status::ok();
    }
    case '.':
      stopped_ = true;
      return Status::ok();
    case '(':
      if (stack_.size() + marks_.size() >= limits_.max_stack) {
        return fail(Code::kResourceExhausted, "stack deeper than " + std::to_string(limits_.max_stack));
      }
      marks_.push_back(stack_.size());
      return Status::ok();
    case '0':  // POP: a value, or the MARK when nothing is above it (as CPython's unpickler does)
      if (!marks_.empty() && stack_.size() == marks_.back()) {
        marks_.pop_back();
        return Status::ok();
      }
      return pop().status();
    case '1':  // POP_MARK
      return pop_mark().status();
    case '2': {  // DUP
      PTC_ASSIGN_OR_RETURN(const PickleId id, top());
      return push(id);
    }
    case 0x94:  // MEMOIZE
      return memo_put(memo_.size());
    case 'q': {
      PTC_ASSIGN_OR_RETURN(const auto i, take_le<uint8_t>("BINPUT"));
      return memo_put(i);
    }
    case 'r': {
      PTC_ASSIGN_OR_RETURN(const auto i, take_le<uint32_t>("LONG_BINPUT"));
      return memo_put(i);
    }
    case 'p':
    case 'g': {
      PTC_ASSIGN_OR_RETURN(const std::string_view s, line(op == 'p' ? "PUT" : "GET"));
      int64_t i = 0;
      if (!parse_decimal(s, i) || i < 0) return fail(Code::kCorrupt, "memo index is not a decimal");
      return op == 'p' ? memo_put(static_cast<uint64_t>(i)) : memo_get(static_cast<uint64_t>(i));
    }
    case 'h': {
      PTC_ASSIGN_OR_RETURN(const auto i, take_le<uint8_t>("BINGET"));
      return memo_get(i);
    }
    case 'j': {
      PTC_ASSIGN_OR_RETURN(const auto i, take_le<uint32_t>("LONG_BINGET"));
      return memo_get(i);
    }

    case 'N':
      return make_scalar(K::kNone, 0);
    case 0x88:
    case 0x89:
      return make_scalar(K::kBool, op == 0x88);
    case 'K': {
      PTC_ASSIGN_OR_RETURN(const auto v, take_le<uint8_t>("BININT1"));
      return make_scalar(K::kInt, v);
    }
    case 'M': {
      PTC_ASSIGN_OR_RETURN(const auto v, take_le<uint16_t>("BININT2"));
      return make_scalar(K::kInt, v);
    }
    case 'J': {
      PTC_ASSIGN_OR_RETURN(const auto v, take_le<int32_t>("BININT"));
      return make_scalar(K::kInt, v);
    }
    case 0x8a: {  // LONG1
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint8_t>("LONG1"));
      PTC_ASSIGN_OR_RETURN(const std::string_view b, take(n, "LONG1"));
      return int_bytes(b);
    }
    case 0x8b: {  // LONG4
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<int32_t>("LONG4"));
      if (n < 0) return fail(Code::kCorrupt, "LONG4 of negative length");
      PTC_ASSIGN_OR_RETURN(const std::string_view b, take(static_cast<uint64_t>(n), "LONG4"));
      return int_bytes(b);
    }
    case 'I':
    case 'L': {
      PTC_ASSIGN_OR_RETURN(const std::string_view s, line(op == 'I' ? "INT" : "LONG"));
      return int_text(s, op == 'L');
    }
    case 'G': {  // BINFLOAT: big-endian IEEE 754 double
      PTC_ASSIGN_OR_RETURN(const std::string_view b, take(8, "BINFLOAT"));
      uint64_t bits = 0;
      for (char c : b) bits = (bits << 8) | static_cast<unsigned char>(c);
      PickleValue v;
      v.kind = K::kFloat;
      std::memcpy(&v.real, &bits, sizeof bits);
      return make(std::move(v));
    }

    case 'X': {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint32_t>("BINUNICODE"));
      return sized_text(K::kStr, n, "BINUNICODE");
    }
    case 0x8c: {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint8_t>("SHORT_BINUNICODE"));
      return sized_text(K::kStr, n, "SHORT_BINUNICODE");
    }
    case 0x8d: {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint64_t>("BINUNICODE8"));
      return sized_text(K::kStr, n, "BINUNICODE8");
    }
    case 'T': {  // BINSTRING, SHORT_BINSTRING: Python 2 str, read as str (pickle's encoding="ASCII")
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<int32_t>("BINSTRING"));
      if (n < 0) return fail(Code::kCorrupt, "BINSTRING of negative length");
      return sized_text(K::kStr, static_cast<uint64_t>(n), "BINSTRING");
    }
    case 'U': {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint8_t>("SHORT_BINSTRING"));
      return sized_text(K::kStr, n, "SHORT_BINSTRING");
    }
    case 'B': {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint32_t>("BINBYTES"));
      return sized_text(K::kBytes, n, "BINBYTES");
    }
    case 'C': {
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint8_t>("SHORT_BINBYTES"));
      return sized_text(K::kBytes, n, "SHORT_BINBYTES");
    }
    case 0x8e:
    case 0x96: {  // BINBYTES8, BYTEARRAY8
      PTC_ASSIGN_OR_RETURN(const auto n, take_le<uint64_t>(opcode_name(op)));
      return sized_text(K::kBytes, n, opcode_name(op));
    }

    case ')':
      return make_seq(K::kTuple, {});
    case 0x85:
    case 0x86:
    case 0x87: {  // TUPLE1..3
      const size_t n = op - 0x84u;
      std::vector<PickleId> items(n);
      for (size_t i = n; i-- > 0;) {
        PTC_ASSIGN_OR_RETURN(items[i], pop());
      }
      return make_seq(K::kTuple, std::move(items));
    }
    case 't':
    case 'l':
    case 0x91: {  // TUPLE, LIST, FROZENSET
      PTC_ASSIGN_OR_RETURN(std::vector<PickleId> items, pop_mark());
      return make_seq(op == 't' ? K::kTuple : K::kList, std::move(items));
    }
    case ']':
    case 0x8f:  // EMPTY_LIST, EMPTY_SET
      return make_seq(K::kList, {});
    case '}':
      return make_seq(K::kDict, {});
    case 'd': {
      PTC_ASSIGN_OR_RETURN(std::vector<PickleId> items, pop_mark());
      if (items.size() % 2) return fail(Code::kCorrupt, "DICT with an odd number of keys and values");
      return make_seq(K::kDict, std::move(items));
    }
    case 'a': {
      PTC_ASSIGN_OR_RETURN(const PickleId x, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId list, top());
      return append_items(list, {x}, "APPEND");
    }
    case 'e':
    case 0x90:  // APPENDS, ADDITEMS
      return into_below_mark([&](PickleId list, const std::vector<PickleId>& items) {
        return append_items(list, items, opcode_name(op));
      });
    case 's': {
      PTC_ASSIGN_OR_RETURN(const PickleId value, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId key, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId dict, top());
      return set_items(dict, {key, value}, "SETITEM");
    }
    case 'u':
      return into_below_mark(
          [&](PickleId dict, const std::vector<PickleId>& kv) { return set_items(dict, kv, "SETITEMS"); });

    case 'c': {
      PTC_ASSIGN_OR_RETURN(const std::string_view module, line("GLOBAL"));
      PTC_ASSIGN_OR_RETURN(const std::string_view name, line("GLOBAL"));
      return make_global(module, name);
    }
    case 0x93: {  // STACK_GLOBAL
      PTC_ASSIGN_OR_RETURN(const PickleId name, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId module, pop());
      if (at(module).kind != K::kStr || at(name).kind != K::kStr) {
        return fail(Code::kCorrupt, "STACK_GLOBAL of a " + tree_.describe(module) + " and a " + tree_.describe(name));
      }
      return make_global(at(module).text, at(name).text);
    }
    case 'R': {
      PTC_ASSIGN_OR_RETURN(const PickleId args, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId callable, pop());
      return make_object(false, callable, args, kNoPickleValue);
    }
    case 0x81: {
      PTC_ASSIGN_OR_RETURN(const PickleId args, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId cls, pop());
      return make_object(true, cls, args, kNoPickleValue);
    }
    case 0x92: {
      PTC_ASSIGN_OR_RETURN(const PickleId kwargs, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId args, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId cls, pop());
      return make_object(true, cls, args, kwargs);
    }
    case 'b': {  // BUILD: once per object
      PTC_ASSIGN_OR_RETURN(const PickleId state, pop());
      PTC_ASSIGN_OR_RETURN(const PickleId obj, top());
      PTC_RETURN_IF_ERROR(mutable_value(obj, K::kObject, "BUILD"));
      if (at(obj).state != kNoPickleValue) return fail(Code::kCorrupt, "a second BUILD of one object");
      PTC_RETURN_IF_ERROR(adopt(obj, state));
      at(obj).state = state;
      return Status::ok();
    }
    case 'Q': {
      PTC_ASSIGN_OR_RETURN(const PickleId pid, pop());
      return make_seq(K::kPersistentId, {pid});
    }
    case 'P': {
      PTC_ASSIGN_OR_RETURN(const std::string_view s, line("PERSID"));
      PTC_RETURN_IF_ERROR(make_text(K::kStr, s));
      PTC_ASSIGN_OR_RETURN(const PickleId pid, pop());
      return make_seq(K::kPersistentId, {pid});
    }
  }
  const char* name = opcode_name(op);
  if (!name) return fail(Code::kCorrupt, "unknown opcode " + hex_byte(op));
  return fail(Code::kInvalidArgument, std::string("opcode ") + name + " (" + hex_byte(op) + ") is not supported");
}

bool PickleTree::is_global(PickleId id, std::string_view module, std::string_view name) const {
  const PickleValue& v = values_[id];
  return v.kind == PickleKind::kGlobal && v.text == module && v.name == name;
}

PickleId PickleTree::dict_get(PickleId dict, std::string_view key) const {
  const PickleValue& d = values_[dict];
  PickleId found = kNoPickleValue;
  if (d.kind != PickleKind::kDict) return found;
  for (size_t i = 0; i + 1 < d.items.size(); i += 2) {
    const PickleValue& k = values_[d.items[i]];
    if (k.kind == PickleKind::kStr && k.text == key) found = d.items[i + 1];
  }
  return found;
}

std::string PickleTree::describe(PickleId id) const {
  const auto quoted = [](std::string_view s) {
    return "'" + std::string(s.substr(0, 40)) + (s.size() > 40 ? "...'" : "'");
  };
  const PickleValue& v = values_[id];
  switch (v.kind) {
    case PickleKind::kNone:
      return "None";
    case PickleKind::kBool:
      return v.integer ? "True" : "False";
    case PickleKind::kInt:
      return "int " + std::to_string(v.integer);
    case PickleKind::kFloat:
      return "float";
    case PickleKind::kStr:
      return "str " + quoted(v.text);
    case PickleKind::kBytes:
      return "bytes of " + std::to_string(v.text.size());
    case PickleKind::kTuple:
      return "tuple of " + std::to_string(v.items.size());
    case PickleKind::kList:
      return "list of " + std::to_string(v.items.size());
    case PickleKind::kDict:
      return "dict of " + std::to_string(v.items.size() / 2);
    case PickleKind::kGlobal:
      return "global " + quoted(v.text + "." + v.name);
    case PickleKind::kObject: {
      const PickleValue& c = values_[v.callable];
      return c.kind == PickleKind::kGlobal ? "object of global " + quoted(c.text + "." + c.name) : "object";
    }
    case PickleKind::kPersistentId:
      return "persistent id";
  }
  return "value";
}

Result<PickleTree> read_pickle(std::string_view data, const PickleLimits& limits) {
  return PickleMachine(data, limits).run();
}

}  // namespace ptcfs::formats
