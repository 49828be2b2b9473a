// Reads Python pickles (protocols 2 to 5) into a tree of values without running anything:
// the reading side of ptc/formats/pickle_writer.h, for what stock PyTorch writes
// (docs/DCP-ON-DISK.md §2, §3: DCP's .metadata and the data.pkl of a torch.save archive).
//
// The reader is a pickle machine that builds values instead of calling: GLOBAL and
// STACK_GLOBAL give a kGlobal {module, name}; REDUCE, NEWOBJ and NEWOBJ_EX give a kObject
// {callable, args, kwargs} and BUILD sets its state; BINPERSID and PERSID give a
// kPersistentId. What an object means is the caller's to decide (ptc/formats/dcp_reader.h,
// ptc/formats/torch_item.h), from an allow list of globals. Sets are read as lists.
//
// Values live in one arena and refer to each other by PickleId; the memo shares them as
// Python does. A value that is already inside another may not be changed afterwards (an
// APPEND, SETITEM or BUILD on it is refused): pickle.dump writes such changes only for
// recursive structures, so the tree has no cycle and every value's depth is exact.
//
// Refused, with the byte offset: opcodes not read (INST, OBJ, EXT*, NEXT_BUFFER,
// READONLY_BUFFER, the protocol 0 text forms STRING, UNICODE and FLOAT) as kInvalidArgument
// naming the opcode; an integer wider than 64 bits as kInvalidArgument; truncated or malformed
// input (bad lengths, stack underflow, a bad memo index, a str that is not strict UTF-8, a lone
// surrogate included, anything after STOP) as kCorrupt; input past PickleLimits as
// kResourceExhausted. The tree takes about 140 bytes per value (at most one value per input
// byte, and PickleLimits::max_values).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptc/base/status.h"

namespace ptcfs::formats {

enum class PickleKind : uint8_t {
  kNone,
  kBool,
  kInt,
  kFloat,
  kStr,
  kBytes,
  kTuple,
  kList,  // also a set or frozenset
  kDict,
  kGlobal,
  kObject,
  kPersistentId,
};

using PickleId = uint32_t;
inline constexpr PickleId kNoPickleValue = 0xFFFFFFFFu;

struct PickleValue {
  PickleKind kind = PickleKind::kNone;
  int64_t integer = 0;          // kInt; kBool: 0 or 1
  double real = 0;              // kFloat
  std::string text;             // kStr (UTF-8), kBytes; kGlobal: the module
  std::string name;             // kGlobal: the name
  std::vector<PickleId> items;  // kTuple, kList: the elements; kDict: key, value, key, value, ... in
                                // insertion order (a repeated key keeps both); kPersistentId: the id
  // kObject: made by REDUCE (callable(*args)) or NEWOBJ / NEWOBJ_EX (cls.__new__(cls, *args,
  // **kwargs)); args is a kTuple, kwargs a kDict or kNoPickleValue, state what BUILD gave
  // or kNoPickleValue.
  bool newobj = false;
  PickleId callable = kNoPickleValue, args = kNoPickleValue, kwargs = kNoPickleValue, state = kNoPickleValue;
  uint32_t depth = 1;  // 1 + the deepest value inside
};

struct PickleLimits {
  size_t max_values = size_t{16} << 20;  // values made, in all
  size_t max_stack = size_t{1} << 20;    // values and marks on the stack
  size_t max_memo = size_t{16} << 20;    // memo entries
  uint32_t max_depth = 256;              // nesting of values
};

class PickleTree {
 public:
  PickleId root() const { return root_; }
  const PickleValue& operator[](PickleId id) const { return values_[id]; }
  size_t size() const { return values_.size(); }

  // True for a kGlobal of that module and name.
  bool is_global(PickleId id, std::string_view module, std::string_view name) const;
  // A short description for error messages, at most ~80 bytes: "str 'abc'", "int 7",
  // "global torch.Size", "object of global torch.Size", "tuple of 3", ...
  std::string describe(PickleId id) const;
  // The kDict's value of the kStr key `key` (the last one if repeated), or kNoPickleValue.
  PickleId dict_get(PickleId dict, std::string_view key) const;

 private:
  friend class PickleMachine;
  std::vector<PickleValue> values_;
  PickleId root_ = kNoPickleValue;
};

// The value a pickle holds: all of `data` must be one pickle ending in STOP, with exactly the
// one value on the stack and no open MARK.
Result<PickleTree> read_pickle(std::string_view data, const PickleLimits& limits = {});

}  // namespace ptcfs::formats
