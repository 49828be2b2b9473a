#include "cli/client.h"

#include <cstdio>
#include <iostream>

#include "transport/auth.h"

namespace ptcfs::cli {

int fail(const ptc::Status& s) {
  std::fprintf(stderr, "ptcfs: error: %s\n", s.message().c_str());
  return 1;
}

ptc::Result<nlohmann::json> call(const Globals& g, const nlohmann::json& req, const transport::ProgressSink& progress) {
  std::string secret;
  if (!g.secret_file.empty()) {
    PTC_ASSIGN_OR_RETURN(secret, transport::read_secret_file(g.secret_file));
  }
  PTC_ASSIGN_OR_RETURN(auto client, transport::RpcClient::connect(g.daemon, secret));
  return client->call(req, progress);
}

int print_json(const nlohmann::json& j) {
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace ptcfs::cli
