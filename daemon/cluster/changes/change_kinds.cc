#include "daemon/cluster/changes/change_kinds.h"

#include "ptc/base/json_util.h"

namespace ptcfs {

namespace {

// The kind named `kind`, read from `j` by its own reader.
template <size_t I = 0>
Result<AnyChange> read_kind(const std::string& kind, const nlohmann::json& j, const std::string& w) {
  if constexpr (I == std::variant_size_v<AnyChange>) {
    return invalid(w + ": unknown kind '" + kind + "'");
  } else {
    using Kind = std::variant_alternative_t<I, AnyChange>;
    if (kind != Kind::kKind) return read_kind<I + 1>(kind, j, w);
    PTC_ASSIGN_OR_RETURN(Kind c, Kind::read(j, w));
    return AnyChange(std::move(c));
  }
}

}  // namespace

const char* kind_of(const AnyChange& c) {
  return std::visit([](const auto& k) { return std::decay_t<decltype(k)>::kKind; }, c);
}

std::string record_key(const AnyChange& c) {
  return std::visit([](const auto& k) { return k.record_key(); }, c);
}

std::string datasets_of(const AnyChange& c) {
  return std::visit([](const auto& k) { return k.datasets_of(); }, c);
}

std::optional<std::pair<std::string, std::string>> saved_step(const AnyChange& c) {
  return std::visit(
      [](const auto& k) -> std::optional<std::pair<std::string, std::string>> {
        if constexpr (requires { k.saved_step(); })
          return k.saved_step();
        else
          return std::nullopt;
      },
      c);
}

nlohmann::json to_json(const PrepareRequest& r) {
  nlohmann::json j = {{"op", "peer.prepare"}, {"tx", r.tx}, {"kind", kind_of(r.change)}};
  if (!r.coordinator.empty()) j["coordinator"] = r.coordinator;
  if (r.lease != 0) j["lease"] = r.lease;
  std::visit([&](const auto& k) { k.write(j); }, r.change);
  return j;
}

Result<PrepareRequest> prepare_request_from_json(const nlohmann::json& j) {
  const std::string w = "peer.prepare";
  PrepareRequest r;
  PTC_ASSIGN_OR_RETURN(r.tx, member_string(j, "tx", w));
  if (r.tx.empty()) return invalid("peer.prepare has an empty 'tx'");
  PTC_ASSIGN_OR_RETURN(r.coordinator, member_string_or(j, "coordinator", "", w));
  if (auto it = j.find("lease"); it != j.end()) {
    if (!it->is_number_integer()) return invalid("peer.prepare: 'lease' must be an integer");
    r.lease = it->get<int64_t>();
  }
  PTC_ASSIGN_OR_RETURN(const std::string kind, member_string(j, "kind", w));
  PTC_ASSIGN_OR_RETURN(r.change, read_kind(kind, j, w));
  return r;
}

}  // namespace ptcfs
