// Writes Python pickles (protocol 2) of the few shapes ptcfs emits for PyTorch readers: the
// data.pkl of a torch.save archive and DCP's .metadata (ptc/formats/torch_archive.h,
// ptc/formats/dcp_metadata.h). Only opcodes that any pickle reader of protocol 2 or later
// understands; no memo (nothing is shared).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ptcfs::formats {

class PickleWriter {
 public:
  PickleWriter() { out_ += "\x80\x02"; }  // PROTO 2

  void global(std::string_view module, std::string_view name);  // GLOBAL 'module\nname\n'
  void str(std::string_view s);                                 // BINUNICODE
  void integer(int64_t v);                                      // BININT1/2, BININT, LONG1
  void none() { out_ += 'N'; }
  void boolean(bool v) { out_ += v ? '\x88' : '\x89'; }
  void mark() { out_ += '('; }
  void tuple() { out_ += 't'; }  // the items since the mark
  void empty_tuple() { out_ += ')'; }
  void empty_list() { out_ += ']'; }
  void empty_dict() { out_ += '}'; }
  void appends() { out_ += 'e'; }    // to the list below the mark
  void setitems() { out_ += 'u'; }   // key, value pairs since the mark into the dict below it
  void reduce() { out_ += 'R'; }     // callable(args)
  void newobj() { out_ += '\x81'; }  // cls.__new__(cls, *args)
  void build() { out_ += 'b'; }      // __setstate__ or __dict__.update
  void persid() { out_ += 'Q'; }     // BINPERSID
  // A tuple of integers.
  template <class Ints>
  void int_tuple(const Ints& v) {
    mark();
    for (auto x : v) integer(static_cast<int64_t>(x));
    tuple();
  }
  // An object made with cls() and given `state` by the caller: global, empty_tuple, newobj.
  void new_object(std::string_view module, std::string_view name) {
    global(module, name);
    empty_tuple();
    newobj();
  }
  std::string finish() {
    out_ += '.';  // STOP
    return std::move(out_);
  }

 private:
  std::string out_;
};

}  // namespace ptcfs::formats
