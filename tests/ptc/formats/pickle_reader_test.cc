// The bounded pickle reader (ptc/formats/pickle_reader.h): pickles Python wrote, what
// PickleWriter writes, and what it refuses.
#include "ptc/formats/pickle_reader.h"

#include <catch2/catch.hpp>

#include <string>

#include "ptc/formats/pickle_writer.h"

using namespace ptcfs;
using namespace ptcfs::formats;
using namespace std::string_literals;

namespace {

const PickleValue& item(const PickleTree& t, PickleId id, size_t i) { return t[t[id].items.at(i)]; }

// The message of a refusal, checking its code.
std::string refusal(const std::string& pickle, Code code, const PickleLimits& limits = {}) {
  const auto r = read_pickle(pickle, limits);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().code() == code);
  return r.status().message();
}

}  // namespace

TEST_CASE("a protocol 4 pickle of Python values reads as its tree, shared values shared", "[dcp_reader]") {
  // pickle.dumps({'a': [1, -2, 300, 70000, -(2**40), 2.5, None, True, False],
  //               'b': (b'xy', 'café'), 's': (shared, shared)}, protocol=4), shared = [1, 2]
  const std::string p =
      "\x80\x04\x95\x53\x00\x00\x00\x00\x00\x00\x00\x7d\x94\x28\x8c\x01\x61\x94\x5d\x94\x28\x4b\x01\x4a\xfe\xff\xff"
      "\xff\x4d\x2c\x01\x4a\x70\x11\x01\x00\x8a\x06\x00\x00\x00\x00\x00\xff\x47\x40\x04\x00\x00\x00\x00\x00\x00\x4e"
      "\x88\x89\x65\x8c\x01\x62\x94\x43\x02\x78\x79\x94\x8c\x05\x63\x61\x66\xc3\xa9\x94\x86\x94\x8c\x01\x73\x94\x5d"
      "\x94\x28\x4b\x01\x4b\x02\x65\x68\x08\x86\x94\x75\x2e"s;
  REQUIRE(p.size() == 94);
  const auto r = read_pickle(p);
  REQUIRE(r.is_ok());
  const PickleTree& t = *r;
  const PickleValue& d = t[t.root()];
  REQUIRE(d.kind == PickleKind::kDict);
  REQUIRE(d.items.size() == 6);
  CHECK(item(t, t.root(), 0).text == "a");
  const PickleId a = t.dict_get(t.root(), "a");
  REQUIRE(t[a].kind == PickleKind::kList);
  REQUIRE(t[a].items.size() == 9);
  CHECK(item(t, a, 0).integer == 1);
  CHECK(item(t, a, 1).integer == -2);
  CHECK(item(t, a, 2).integer == 300);
  CHECK(item(t, a, 3).integer == 70000);
  CHECK(item(t, a, 4).integer == -(int64_t{1} << 40));
  CHECK(item(t, a, 5).kind == PickleKind::kFloat);
  CHECK(item(t, a, 5).real == 2.5);
  CHECK(item(t, a, 6).kind == PickleKind::kNone);
  CHECK(item(t, a, 7).kind == PickleKind::kBool);
  CHECK(item(t, a, 7).integer == 1);
  CHECK(item(t, a, 8).integer == 0);
  const PickleId b = t.dict_get(t.root(), "b");
  REQUIRE(t[b].kind == PickleKind::kTuple);
  CHECK(item(t, b, 0).kind == PickleKind::kBytes);
  CHECK(item(t, b, 0).text == "xy");
  CHECK(item(t, b, 1).kind == PickleKind::kStr);
  CHECK(item(t, b, 1).text == "caf\xc3\xa9");
  const PickleId s = t.dict_get(t.root(), "s");
  REQUIRE(t[s].items.size() == 2);
  CHECK(t[s].items[0] == t[s].items[1]);  // one list, through the memo
  CHECK(item(t, s, 0).items.size() == 2);
  CHECK(t.dict_get(t.root(), "missing") == kNoPickleValue);
  CHECK(t[t.root()].depth == 4);  // dict, tuple, list, int
}

TEST_CASE("protocol 5 bytearrays, sets and the widest 64-bit integers read", "[dcp_reader]") {
  // pickle.dumps((bytearray(b'ab'), frozenset([3]), {4}, 2**63-1, -2**63), protocol=5)
  const std::string p =
      "\x80\x05\x95\x2f\x00\x00\x00\x00\x00\x00\x00\x28\x96\x02\x00\x00\x00\x00\x00\x00\x00\x61\x62\x94\x28\x4b\x03"
      "\x91\x94\x8f\x94\x28\x4b\x04\x90\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f\x8a\x08\x00\x00\x00\x00\x00\x00\x00"
      "\x80\x74\x94\x2e"s;
  const auto r = read_pickle(p);
  REQUIRE(r.is_ok());
  const PickleTree& t = *r;
  REQUIRE(t[t.root()].items.size() == 5);
  CHECK(item(t, t.root(), 0).kind == PickleKind::kBytes);
  CHECK(item(t, t.root(), 0).text == "ab");
  CHECK(item(t, t.root(), 1).kind == PickleKind::kList);
  CHECK(t[item(t, t.root(), 1).items.at(0)].integer == 3);
  CHECK(t[item(t, t.root(), 2).items.at(0)].integer == 4);
  CHECK(item(t, t.root(), 3).integer == INT64_MAX);
  CHECK(item(t, t.root(), 4).integer == INT64_MIN);
}

TEST_CASE("globals, calls, BUILD and persistent ids are values, not calls", "[dcp_reader]") {
  PickleWriter w;
  w.mark();
  w.global("os", "system");
  w.mark();
  w.str("rm -rf /");
  w.tuple();
  w.reduce();  // an object, nothing run
  w.new_object("m", "C");
  w.empty_dict();
  w.build();
  w.mark();
  w.str("storage");
  w.integer(5);
  w.tuple();
  w.persid();
  w.tuple();
  const auto r = read_pickle(w.finish());
  REQUIRE(r.is_ok());
  const PickleTree& t = *r;
  const PickleValue& call = item(t, t.root(), 0);
  REQUIRE(call.kind == PickleKind::kObject);
  CHECK_FALSE(call.newobj);
  CHECK(t.is_global(call.callable, "os", "system"));
  CHECK(t[t[call.args].items.at(0)].text == "rm -rf /");
  CHECK(call.state == kNoPickleValue);
  CHECK(t.describe(t.root()) == "tuple of 3");
  CHECK(t.describe(t[t.root()].items[0]) == "object of global 'os.system'");
  const PickleValue& obj = item(t, t.root(), 1);
  REQUIRE(obj.kind == PickleKind::kObject);
  CHECK(obj.newobj);
  CHECK(t.is_global(obj.callable, "m", "C"));
  CHECK(t[obj.args].kind == PickleKind::kTuple);
  CHECK(t[obj.state].kind == PickleKind::kDict);
  const PickleValue& pid = item(t, t.root(), 2);
  REQUIRE(pid.kind == PickleKind::kPersistentId);
  CHECK(t[t[pid.items.at(0)].items.at(1)].integer == 5);
}

TEST_CASE("STACK_GLOBAL, NEWOBJ_EX, DUP, POP, POP_MARK, text INT and memo by PUT/GET read", "[dcp_reader]") {
  // proto 4: 'mod' 'Cls' STACK_GLOBAL () {} NEWOBJ_EX; DUP POP; MARK 1 POP_MARK; INT 01 (True);
  // LONG 12L; PUT 7; GET 7; TUPLE of the five values
  const std::string p =
      "\x80\x04(\x8c\x03"
      "mod\x8c\x03"
      "Cls\x93)}\x92"
      "2"
      "0"
      "(K\x01"
      "1"
      "I01\n"
      "L12L\n"
      "p7\n"
      "g7\n"
      "t."s;
  const auto r = read_pickle(p);
  REQUIRE(r.is_ok());
  const PickleTree& t = *r;
  REQUIRE(t[t.root()].items.size() == 4);
  const PickleValue& obj = item(t, t.root(), 0);
  CHECK(obj.newobj);
  CHECK(t[obj.kwargs].kind == PickleKind::kDict);
  CHECK(t.is_global(obj.callable, "mod", "Cls"));
  CHECK(item(t, t.root(), 1).kind == PickleKind::kBool);
  CHECK(item(t, t.root(), 2).integer == 12);
  CHECK(t[t.root()].items[2] == t[t.root()].items[3]);
}

TEST_CASE("opcodes that run code or need buffers are refused naming the opcode and its byte", "[dcp_reader]") {
  CHECK(refusal("\x80\x02(imod\ncls\n."s, Code::kInvalidArgument) ==
        "pickle: opcode INST (0x69) is not supported at byte 3");
  CHECK(refusal("\x80\x02(o."s, Code::kInvalidArgument).find("OBJ (0x6f)") != std::string::npos);
  CHECK(refusal("\x80\x04\x82\x01."s, Code::kInvalidArgument).find("EXT1 (0x82) is not supported at byte 2") !=
        std::string::npos);
  CHECK(refusal("\x80\x05\x97."s, Code::kInvalidArgument).find("NEXT_BUFFER") != std::string::npos);
  CHECK(refusal("\x80\x05N\x98."s, Code::kInvalidArgument).find("READONLY_BUFFER") != std::string::npos);
  CHECK(refusal("S'abc'\n."s, Code::kInvalidArgument).find("STRING") != std::string::npos);
  CHECK(refusal("\x80\x02\xff."s, Code::kCorrupt) == "pickle: unknown opcode 0xff at byte 2");
  CHECK(refusal("\x80\x06N."s, Code::kInvalidArgument).find("protocol 6") != std::string::npos);
}

TEST_CASE("integers wider than 64 bits are refused", "[dcp_reader]") {
  CHECK(refusal("\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."s, Code::kInvalidArgument)
            .find("9 bytes is wider than 64 bits") != std::string::npos);
  CHECK(refusal("\x80\x02I99999999999999999999\n."s, Code::kInvalidArgument).find("64-bit") != std::string::npos);
  const auto r = read_pickle("\x80\x02\x8a\x02\x00\x80."s);  // LONG1 -32768
  REQUIRE(r.is_ok());
  CHECK((*r)[r->root()].integer == -32768);
}

TEST_CASE("a bad memo index, stack underflow, an odd dict and bytes after STOP are corrupt", "[dcp_reader]") {
  CHECK(refusal("\x80\x02h\x05."s, Code::kCorrupt) == "pickle: memo index 5 was never stored at byte 2");
  CHECK(refusal("\x80\x02j\xff\xff\xff\xff."s, Code::kCorrupt).find("memo index 4294967295") != std::string::npos);
  CHECK(refusal("\x80\x02q\x00."s, Code::kCorrupt).find("stack underflow") != std::string::npos);
  CHECK(refusal("\x80\x02"
                "a."s,
                Code::kCorrupt)
            .find("stack underflow at byte 2") != std::string::npos);
  CHECK(refusal("\x80\x02](a."s, Code::kCorrupt).find("stack underflow") != std::string::npos);  // not past MARK
  CHECK(refusal("\x80\x02(K\x01"
                "d."s,
                Code::kCorrupt)
            .find("odd number") != std::string::npos);
  CHECK(refusal("\x80\x02N.N"s, Code::kCorrupt).find("1 bytes after STOP") != std::string::npos);
  CHECK(refusal("\x80\x02NN."s, Code::kCorrupt).find("2 values") != std::string::npos);
  CHECK(refusal("\x80\x02(N."s, Code::kCorrupt).find("1 marks") != std::string::npos);
  CHECK(refusal("\x80\x02K\x01K\x02\x93."s, Code::kCorrupt).find("STACK_GLOBAL of a int 1") != std::string::npos);
  CHECK(refusal("\x80\x02K\x01K\x02R."s, Code::kCorrupt).find("arguments are a int 2") != std::string::npos);
  CHECK(refusal("\x80\x02K\x01}b."s, Code::kCorrupt).find("BUILD on a int 1") != std::string::npos);
  CHECK(refusal("\x80\x04\x8c\x02\xc3\x28."s, Code::kCorrupt).find("not UTF-8") != std::string::npos);
  CHECK(refusal("\x80\x04\x8c\x03\xed\xa0\x80."s, Code::kCorrupt).find("not UTF-8") != std::string::npos);
  CHECK(refusal("\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N."s, Code::kCorrupt).find("FRAME") != std::string::npos);
}

TEST_CASE("a recursive structure is refused, so the tree has no cycle", "[dcp_reader]") {
  // l = []; l.append(l)
  CHECK(refusal("\x80\x02]q\x00h\x00"
                "a."s,
                Code::kCorrupt)
            .find("inside itself") != std::string::npos);
  // l = []; d = {'l': l}; l.append(d): d is made with l inside, then l changes
  CHECK(refusal("\x80\x02]q\x00(}q\x01X\x01\x00\x00\x00lh\x00sh\x01"
                "e."s,
                Code::kCorrupt)
            .find("already inside another") != std::string::npos);
}

TEST_CASE("every prefix of a pickle is refused without a crash", "[dcp_reader]") {
  PickleWriter w;
  w.global("torch._utils", "_rebuild_tensor_v2");
  w.mark();
  w.str("storage");
  w.integer(int64_t{1} << 40);
  w.int_tuple(std::vector<int64_t>{2, 3});
  w.tuple();
  w.reduce();
  const std::string p = w.finish();
  REQUIRE(read_pickle(p).is_ok());
  for (size_t n = 0; n < p.size(); ++n) {
    const auto r = read_pickle(p.substr(0, n));
    CHECK_FALSE(r.is_ok());
  }
}

TEST_CASE("nesting, values, stack and memo are bounded", "[dcp_reader]") {
  std::string deep = "\x80\x02)";
  for (int i = 0; i < 300; ++i) deep += '\x85';  // TUPLE1 of TUPLE1 of ...
  deep += '.';
  CHECK(refusal(deep, Code::kResourceExhausted).find("nested deeper than 256") != std::string::npos);
  PickleLimits deeper;
  deeper.max_depth = 400;
  CHECK(read_pickle(deep, deeper).is_ok());

  PickleLimits small;
  small.max_values = 3;
  CHECK(refusal("\x80\x02(NNNNt."s, Code::kResourceExhausted, small).find("more than 3 values") != std::string::npos);
  small = {};
  small.max_stack = 4;
  CHECK(refusal("\x80\x02(((((."s, Code::kResourceExhausted, small).find("stack deeper than 4") != std::string::npos);
  small = {};
  small.max_memo = 2;
  CHECK(refusal("\x80\x04N\x94\x94\x94."s, Code::kResourceExhausted, small).find("memo") != std::string::npos);
}
