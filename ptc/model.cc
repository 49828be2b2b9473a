#include "ptc/model.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "ptc/base/json_util.h"

namespace ptcfs::ptc {

using nlohmann::json;

std::string Parallelism::to_string() const {
  return "tp=" + std::to_string(tp) + ",pp=" + std::to_string(pp) + ",dp=" + std::to_string(dp);
}

Result<Parallelism> parse_parallelism(std::string_view text) {
  Parallelism par;
  std::set<std::string> seen;
  const std::string whole(text);
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    const std::string_view item = text.substr(pos, comma - pos);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos)
      return invalid("parallelism '" + whole + "': expected key=value items like tp=4,pp=2,dp=1");
    const std::string key(item.substr(0, eq));
    const std::string val(item.substr(eq + 1));
    int* slot = key == "tp" ? &par.tp : key == "pp" ? &par.pp : key == "dp" ? &par.dp : nullptr;
    if (!slot) return invalid("parallelism '" + whole + "': unknown key '" + key + "' (expected tp, pp, dp)");
    if (!seen.insert(key).second) return invalid("parallelism '" + whole + "': '" + key + "' given twice");
    if (val.empty() || val.size() > 6 || !std::all_of(val.begin(), val.end(), ::isdigit))
      return invalid("parallelism '" + whole + "': " + key + " must be a positive integer");
    *slot = std::stoi(val);
    if (*slot < 1) return invalid("parallelism '" + whole + "': " + key + " must be at least 1");
    pos = comma + 1;
  }
  if (seen.size() != 3) return invalid("parallelism '" + whole + "': tp, pp and dp are all required");
  return par;
}

const TensorSpec* Ptc::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorSpec& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

Status validate_tensor_name(std::string_view name) {
  const std::string quoted = "tensor name '" + std::string(name) + "'";
  if (name.empty()) return invalid("empty tensor name");
  if (name.size() > 4096) return invalid(quoted + " is longer than 4096 bytes");
  if (name.find('\0') != std::string_view::npos) return invalid(quoted + " contains a NUL byte");
  size_t pos = 0;
  while (true) {
    const size_t slash = name.find('/', pos);
    const auto comp = name.substr(pos, slash == std::string_view::npos ? std::string_view::npos : slash - pos);
    if (comp.empty()) return invalid(quoted + " has an empty path component");
    if (comp == "." || comp == "..") return invalid(quoted + " has a '" + std::string(comp) + "' path component");
    if (comp.size() > 250) return invalid(quoted + " has a path component longer than 250 bytes");
    if (slash == std::string_view::npos) break;
    pos = slash + 1;
  }
  return Status::ok();
}

Status validate_tensor_names(const std::vector<TensorSpec>& tensors) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const std::string& n = tensors[i].name;
    if (n == "__metadata__") return invalid("tensor name '__metadata__' is reserved by safetensors (the header's key)");
    const std::string folder = n + ".npy/";
    auto it = std::lower_bound(tensors.begin(), tensors.end(), folder,
                               [](const TensorSpec& t, const std::string& f) { return t.name < f; });
    if (it != tensors.end() && it->name.compare(0, folder.size(), folder) == 0)
      return invalid("tensor names '" + n + "' and '" + it->name + "' clash: '" + n + "' is shown as the file " + n +
                     ".npy, which '" + it->name + "' needs as a folder");
  }
  return Status::ok();
}

Status validate_id(std::string_view what, std::string_view id) {
  const std::string q = std::string(what) + " name '" + std::string(id) + "'";
  if (id.empty()) return invalid("empty " + std::string(what) + " name");
  if (id.size() > 128) return invalid(q + " is longer than 128 bytes");
  if (id[0] == '.') return invalid(q + " must not start with '.'");
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-'))
      return invalid(q + " may hold only letters, digits, '_', '.' and '-'");
  return Status::ok();
}

namespace {

Result<Parallelism> parse_par_json(const json& j, const std::string& where) {
  PTC_RETURN_IF_ERROR(check_members(j, {"tp", "pp", "dp"}, where));
  Parallelism par;
  for (auto [key, slot] : {std::pair{"tp", &par.tp}, {"pp", &par.pp}, {"dp", &par.dp}}) {
    if (!j.contains(key)) return invalid(where + ": missing '" + key + "'");
    PTC_ASSIGN_OR_RETURN(*slot, get_int(j[key], where + "." + key, 1, 1 << 20));
  }
  return par;
}

Result<Placement> parse_placement(const json& t, int num_layers, const std::string& where) {
  Placement pl;
  if (t.contains("layer") && t.contains("stage")) return invalid(where + ": give either 'layer' or 'stage', not both");
  if (t.contains("layer")) {
    if (num_layers < 1) return invalid(where + ": 'layer' given but num_layers is 0");
    PTC_ASSIGN_OR_RETURN(int64_t l, get_int(t["layer"], where + ": layer", 0, num_layers - 1));
    pl.kind = Placement::Kind::kLayer;
    pl.layer = static_cast<int>(l);
    return pl;
  }
  if (!t.contains("stage")) return pl;  // default: first stage
  const json& s = t["stage"];
  if (s.is_string()) {
    const auto v = s.get<std::string>();
    if (v == "first")
      pl.kind = Placement::Kind::kFirst;
    else if (v == "last")
      pl.kind = Placement::Kind::kLast;
    else if (v == "all")
      pl.kind = Placement::Kind::kAll;
    else
      return invalid(where + ": stage '" + v + "' (expected \"first\", \"last\", \"all\" or a list of indices)");
    return pl;
  }
  if (!s.is_array() || s.empty())
    return invalid(where + ": stage must be \"first\", \"last\", \"all\" or a non-empty list of indices");
  pl.kind = Placement::Kind::kList;
  for (size_t i = 0; i < s.size(); ++i) {
    PTC_ASSIGN_OR_RETURN(int64_t v, get_int(s[i], where + ": stage[" + std::to_string(i) + "]", 0, 1 << 20));
    pl.stages.push_back(static_cast<int>(v));
  }
  std::sort(pl.stages.begin(), pl.stages.end());
  if (std::adjacent_find(pl.stages.begin(), pl.stages.end()) != pl.stages.end())
    return invalid(where + ": stage list repeats an index");
  return pl;
}

Result<TensorSpec> parse_tensor(const std::string& name, const json& t, int num_layers, const std::string& file) {
  const std::string where = file + ": tensor '" + name + "'";
  PTC_RETURN_IF_ERROR(validate_tensor_name(name).with_context(file));
  PTC_RETURN_IF_ERROR(
      check_members(t, {"dtype", "shape", "tp_dim", "parts", "pad_to", "heads", "layer", "stage"}, where));
  TensorSpec spec;
  spec.name = name;
  if (!t.contains("dtype")) return invalid(where + ": missing 'dtype'");
  PTC_ASSIGN_OR_RETURN(auto dt, get_string(t["dtype"], where + ": dtype"));
  auto dtype = parse_dtype(dt);
  if (!dtype) return dtype.status().with_context(where);
  spec.dtype = *dtype;
  if (!t.contains("shape") || !t["shape"].is_array()) return invalid(where + ": 'shape' must be a list of integers");
  const json& sh = t["shape"];
  if (sh.size() > 16) return invalid(where + ": more than 16 dimensions");
  for (size_t i = 0; i < sh.size(); ++i) {
    PTC_ASSIGN_OR_RETURN(int64_t d, get_int(sh[i], where + ": shape[" + std::to_string(i) + "]", 0, int64_t{1} << 48));
    spec.shape.push_back(d);
  }
  if (t.contains("tp_dim")) {
    if (spec.shape.empty()) return invalid(where + ": a scalar cannot have a tp_dim");
    PTC_ASSIGN_OR_RETURN(int64_t k,
                         get_int(t["tp_dim"], where + ": tp_dim", 0, static_cast<int64_t>(spec.shape.size()) - 1));
    spec.tp_dim = static_cast<int>(k);
  }
  if (t.contains("parts")) {
    PTC_ASSIGN_OR_RETURN(int64_t n, get_int(t["parts"], where + ": parts", 1, 1 << 16));
    spec.parts = static_cast<int>(n);
    if (!spec.tp_dim) return invalid(where + ": 'parts' needs a 'tp_dim'");
    if (spec.shape[*spec.tp_dim] % spec.parts != 0)
      return invalid(where + ": shape[" + std::to_string(*spec.tp_dim) +
                     "] = " + std::to_string(spec.shape[*spec.tp_dim]) + " is not divisible into " +
                     std::to_string(spec.parts) + " parts");
  }
  if (t.contains("pad_to")) {
    PTC_ASSIGN_OR_RETURN(spec.pad_to, get_int(t["pad_to"], where + ": pad_to", 1, int64_t{1} << 32));
    if (!spec.tp_dim) return invalid(where + ": 'pad_to' needs a 'tp_dim'");
    if (spec.parts > 1) return invalid(where + ": 'pad_to' and 'parts' cannot be combined");
  }
  if (t.contains("heads")) {
    PTC_ASSIGN_OR_RETURN(spec.heads, get_int(t["heads"], where + ": heads", 1, 1 << 20));
    if (!spec.tp_dim) return invalid(where + ": 'heads' needs a 'tp_dim'");
    // Padding rows belong to no head: a padded dimension is a vocabulary, not heads.
    if (spec.pad_to > 0) return invalid(where + ": 'heads' and 'pad_to' cannot be combined");
    const int64_t part = spec.shape[*spec.tp_dim] / spec.parts;
    if (part % spec.heads != 0)
      return invalid(where + ": " + (spec.parts > 1 ? "each part of shape[" : "shape[") + std::to_string(*spec.tp_dim) +
                     "] (" + std::to_string(part) + ") is not " + std::to_string(spec.heads) + " equal heads");
  }
  PTC_ASSIGN_OR_RETURN(spec.placement, parse_placement(t, num_layers, where));
  return spec;
}

}  // namespace

Result<Ptc> parse_ptc_json(std::string_view text, const std::string& file) {
  PTC_ASSIGN_OR_RETURN(json j, parse_json(text, file));
  PTC_RETURN_IF_ERROR(check_members(j, {"parallelism", "num_layers", "tensors", "hf_config"}, file));
  Ptc ptc;
  if (j.contains("hf_config")) {
    if (!j["hf_config"].is_object()) return invalid(file + ": 'hf_config' must be an object (a config.json)");
    ptc.hf_config = j["hf_config"].dump();
    if (ptc.hf_config.size() > kMaxHfConfig)
      return invalid(file + ": 'hf_config' is " + std::to_string(ptc.hf_config.size()) + " bytes of JSON; at most " +
                     std::to_string(kMaxHfConfig));
  }
  if (!j.contains("parallelism")) return invalid(file + ": missing 'parallelism'");
  PTC_ASSIGN_OR_RETURN(ptc.parallelism, parse_par_json(j["parallelism"], file + ": parallelism"));
  if (j.contains("num_layers")) {
    PTC_ASSIGN_OR_RETURN(int64_t n, get_int(j["num_layers"], file + ": num_layers", 0, 1 << 20));
    ptc.num_layers = static_cast<int>(n);
  }
  if (!j.contains("tensors") || !j["tensors"].is_object() || j["tensors"].empty())
    return invalid(file + ": 'tensors' must be a non-empty object");
  for (const auto& [name, t] : j["tensors"].items()) {
    PTC_ASSIGN_OR_RETURN(TensorSpec spec, parse_tensor(name, t, ptc.num_layers, file));
    ptc.tensors.push_back(std::move(spec));
  }
  // nlohmann's object is a sorted map, so tensors arrive sorted by name and unique.
  return ptc;
}

nlohmann::json ptc_json(const Ptc& ptc) {
  json tensors = json::object();
  for (const auto& t : ptc.tensors) {
    json o;
    o["dtype"] = dtype_name(t.dtype);
    o["shape"] = t.shape;
    if (t.tp_dim) o["tp_dim"] = *t.tp_dim;
    if (t.parts > 1) o["parts"] = t.parts;
    if (t.pad_to > 0) o["pad_to"] = t.pad_to;
    if (t.heads > 0) o["heads"] = t.heads;
    switch (t.placement.kind) {
      case Placement::Kind::kFirst:
        o["stage"] = "first";
        break;
      case Placement::Kind::kLast:
        o["stage"] = "last";
        break;
      case Placement::Kind::kAll:
        o["stage"] = "all";
        break;
      case Placement::Kind::kList:
        o["stage"] = t.placement.stages;
        break;
      case Placement::Kind::kLayer:
        o["layer"] = t.placement.layer;
        break;
    }
    tensors[t.name] = std::move(o);
  }
  json j;
  j["parallelism"] = {{"tp", ptc.parallelism.tp}, {"pp", ptc.parallelism.pp}, {"dp", ptc.parallelism.dp}};
  j["num_layers"] = ptc.num_layers;
  j["tensors"] = std::move(tensors);
  if (!ptc.hf_config.empty()) j["hf_config"] = json::parse(ptc.hf_config);
  return j;
}

std::string ptc_json_text(const Ptc& ptc) {
  std::string out = "{";
  if (!ptc.hf_config.empty()) out += "\"hf_config\":" + ptc.hf_config + ",";  // compact and sorted already
  out += "\"num_layers\":";
  auto num = [&](int64_t v) {
    if (v < 0) {
      out += '-';
      append_json_u64(out, static_cast<uint64_t>(-(v + 1)) + 1);
    } else {
      append_json_u64(out, static_cast<uint64_t>(v));
    }
  };
  num(ptc.num_layers);
  out += ",\"parallelism\":{\"dp\":";
  num(ptc.parallelism.dp);
  out += ",\"pp\":";
  num(ptc.parallelism.pp);
  out += ",\"tp\":";
  num(ptc.parallelism.tp);
  out += "},\"tensors\":{";
  // Members in name order, as nlohmann writes an object.
  for (size_t i = 0; i < ptc.tensors.size(); ++i) {
    const TensorSpec& t = ptc.tensors[i];
    if (i > 0) out += ',';
    append_json_string(out, t.name);
    out += ":{\"dtype\":";
    append_json_string(out, dtype_name(t.dtype));
    if (t.heads > 0) {
      out += ",\"heads\":";
      num(t.heads);
    }
    if (t.placement.kind == Placement::Kind::kLayer) {
      out += ",\"layer\":";
      num(t.placement.layer);
    }
    if (t.pad_to > 0) {
      out += ",\"pad_to\":";
      num(t.pad_to);
    }
    if (t.parts > 1) {
      out += ",\"parts\":";
      num(t.parts);
    }
    out += ",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) out += ',';
      num(t.shape[d]);
    }
    out += ']';
    switch (t.placement.kind) {
      case Placement::Kind::kFirst:
        out += ",\"stage\":\"first\"";
        break;
      case Placement::Kind::kLast:
        out += ",\"stage\":\"last\"";
        break;
      case Placement::Kind::kAll:
        out += ",\"stage\":\"all\"";
        break;
      case Placement::Kind::kList:
        out += ",\"stage\":[";
        for (size_t s = 0; s < t.placement.stages.size(); ++s) {
          if (s > 0) out += ',';
          num(t.placement.stages[s]);
        }
        out += ']';
        break;
      case Placement::Kind::kLayer:
        break;
    }
    if (t.tp_dim) {
      out += ",\"tp_dim\":";
      num(*t.tp_dim);
    }
    out += '}';
  }
  out += "}}";
  return out;
}

std::string ptc_to_json(const Ptc& ptc) { return ptc_json(ptc).dump(2) + "\n"; }

}  // namespace ptcfs::ptc
