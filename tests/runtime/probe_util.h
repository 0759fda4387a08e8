// Whole programs sharing a cache folder: cache_probe (tests/runtime/cache_probe.cpp) started
// with an environment of its own, its counters read from what it prints.
#pragma once

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/runtime/runtime_test_util.h"
#include "tests/test_util.h"

extern char** environ;

namespace kiln::test {

struct ProbeRun {
  int status = -1;
  std::string out, err;
  std::map<std::string, int> counters;       // NAME=NUMBER words: compiles, disk_hits, ...
  std::map<std::string, std::string> words;  // every NAME=VALUE word
};

// Starts cache_probe with extra environment variables (and arguments); returns its pid.
inline pid_t start_probe(const std::map<std::string, std::string>& env, const std::string& out,
                         const std::string& err, std::vector<std::string> args = {}) {
  std::vector<std::string> vars;
  for (char** e = environ; *e; ++e) {
    const std::string v = *e;
    const std::string name = v.substr(0, v.find('='));
    if (!env.count(name) && name.rfind("KILN_", 0) != 0) vars.push_back(v);
  }
  for (const auto& [k, v] : env) vars.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& v : vars) envp.push_back(v.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::string exe = KILN_CACHE_PROBE;
  std::vector<char*> argv{exe.data()};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return pid;
}

inline ProbeRun finish_probe(pid_t pid, const std::string& out, const std::string& err) {
  ProbeRun r;
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  std::istringstream in(r.out);
  std::string item;
  while (in >> item) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) continue;
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    r.words[name] = value;
    if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos)
      r.counters[name] = std::stoi(value);
  }
  return r;
}

inline ProbeRun run_probe(const TempDir& scratch, const std::map<std::string, std::string>& env,
                          std::vector<std::string> args = {}) {
  const std::string out = scratch.path() + "/out", err = scratch.path() + "/err";
  ProbeRun r = finish_probe(start_probe(env, out, err, std::move(args)), out, err);
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.status == 0);
  return r;
}

inline std::vector<std::string> entry_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); ++it)
    if (it->is_regular_file()) out.push_back(it->path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace kiln::test
