#include "cli/python_cmd.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ptcfs::cli {

int exec_python(const Globals& g, const std::vector<std::string>& args, bool with_daemon) {
  const char* env = std::getenv("PTCFS_PYTHON");
  const std::string py = env && *env ? env : "python3";
  std::vector<std::string> words = {py, "-m", "ptcfs"};
  words.insert(words.end(), args.begin(), args.end());
  if (with_daemon) {
    words.insert(words.end(), {"--daemon", g.daemon});
    if (!g.secret_file.empty()) words.insert(words.end(), {"--secret-file", g.secret_file});
  }
  if (g.json) words.push_back("--json");
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  ::execvp(py.c_str(), argv.data());
  return fail(unavailable("cannot run " + py + " (" + std::strerror(errno) +
                          "): this command needs the ptcfs Python package with torch 2.x; install it "
                          "(pip install <repo>, docs/PYTHON.md) or set PTCFS_PYTHON to an interpreter "
                          "that has it"));
}

}  // namespace ptcfs::cli
