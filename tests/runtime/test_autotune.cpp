// The autotuner: the fastest candidate wins, failures are ruled out, fast mode measures the
// short list, a key is measured once per process; and across programs (cache_probe tune, which
// calls kiln::lib::matmul): a second program measures nothing, a damaged tuning is reported and
// measured again, programs tuning one key at once agree, KILN_AUTOTUNE=off measures nothing.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include "runtime/autotune.h"
#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tests/runtime/probe_util.h"
#include "tests/runtime/runtime_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;

// A request whose candidate i takes `ms[i]` milliseconds (negative: fails), counting its runs.
TuneRequest sleeper(const std::string& key, std::vector<int> ms, std::vector<int>& runs) {
  TuneRequest r;
  r.op = "test_sleeper";
  r.key = key;
  runs.assign(ms.size(), 0);
  for (size_t i = 0; i < ms.size(); ++i) r.candidates.push_back("c" + std::to_string(i));
  r.run = [ms, &runs](size_t i) -> Status {
    ++runs[i];
    if (ms[i] < 0) return Error(ErrorKind::InvalidArgument, "this candidate does not run");
    std::this_thread::sleep_for(std::chrono::milliseconds(ms[i]));
    return {};
  };
  return r;
}

TEST_CASE("the tuner picks the fastest candidate once per key and rules out failures",
          "[runtime][autotune]") {
  test::TempDir cache;
  DiskCache::set_global({true, cache.path(), uint64_t{1} << 30});
  auto rt = Runtime::open("cpu");
  REQUIRE(rt.ok());
  set_autotune_mode(AutotuneMode::Full);
  std::vector<int> runs;
  const TuneRequest r = sleeper("k1", {12, -1, 2, 8}, runs);
  const AutotuneStats before = autotune_stats();
  TuneOutcome out = autotune(*rt, r);
  CHECK(out.source == TuneOutcome::Source::Measured);
  CHECK(out.index == 2);
  CHECK(out.ms[1] < 0);  // failed: ruled out
  CHECK(runs[1] == 1);   // not retried after its warm-up failed
  CHECK(runs[0] == 6);   // a warm-up and five rounds in full mode
  CHECK(autotune_stats().measured == before.measured + 1);
  // The same key again: from memory, nothing run.
  out = autotune(*rt, r);
  CHECK(out.source == TuneOutcome::Source::Memory);
  CHECK(out.index == 2);
  CHECK(runs[0] == 6);
  // Fast mode measures the first `fast` candidates only; a full tuning serves it.
  set_autotune_mode(AutotuneMode::Fast);
  CHECK(autotune(*rt, r).index == 2);
  std::vector<int> runs2;
  TuneRequest shortlist = sleeper("k2", {9, 6, 1, 1}, runs2);
  shortlist.fast = 2;
  out = autotune(*rt, shortlist);
  CHECK(out.index == 1);
  CHECK(runs2[2] == 0);
  CHECK(runs2[3] == 0);
  // Off: the first candidate, nothing run.
  set_autotune_mode(AutotuneMode::Off);
  std::vector<int> runs3;
  CHECK(autotune(*rt, sleeper("k3", {5, 1}, runs3)).index == 0);
  CHECK(runs3 == std::vector<int>{0, 0});
  set_autotune_mode(std::nullopt);
  DiskCache::set_global(DiskCache::config_from_env());
}

TEST_CASE("KILN_AUTOTUNE is off, fast or full", "[runtime][autotune]") {
  CHECK(parse_autotune_mode("off") == AutotuneMode::Off);
  CHECK(parse_autotune_mode("fast") == AutotuneMode::Fast);
  CHECK(parse_autotune_mode("full") == AutotuneMode::Full);
  CHECK_FALSE(parse_autotune_mode("on").has_value());
  const char* was = std::getenv("KILN_AUTOTUNE");
  const std::string saved = was ? was : "";
  ::setenv("KILN_AUTOTUNE", "full", 1);
  CHECK(autotune_mode() == AutotuneMode::Full);
  set_autotune_mode(AutotuneMode::Off);  // a program's own choice wins over the environment
  CHECK(autotune_mode() == AutotuneMode::Off);
  set_autotune_mode(std::nullopt);
  if (was)
    ::setenv("KILN_AUTOTUNE", saved.c_str(), 1);
  else
    ::unsetenv("KILN_AUTOTUNE");
}

#ifdef KILN_CACHE_PROBE

const std::vector<std::string> kTune{"tune"};

std::vector<std::string> tune_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const std::string& f : test::entry_files(dir))
    if (f.find("/tune/") != std::string::npos) out.push_back(f);
  return out;
}

TEST_CASE("a second program takes the tuning from the disk cache without measuring",
          "[runtime][autotune][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()},
                                               {"KILN_AUTOTUNE", "full"}};
  test::ProbeRun first = test::run_probe(scratch, env, kTune);
  CHECK(first.counters["measured"] == 1);
  CHECK(first.counters["runs"] > 0);
  CHECK(first.counters["memory_hits"] == 1);  // the program's second call
  CHECK(tune_entries(cache.path()).size() == 1);
  test::ProbeRun second = test::run_probe(scratch, env, kTune);
  CHECK(second.counters["measured"] == 0);
  CHECK(second.counters["runs"] == 0);
  CHECK(second.counters["disk_hits"] == 1);
  CHECK(second.words["winner"] == first.words["winner"]);
  CHECK(second.err.empty());
  // A fast-mode program takes the full tuning too.
  test::ProbeRun fast = test::run_probe(
      scratch, {{"KILN_CACHE_DIR", cache.path()}, {"KILN_AUTOTUNE", "fast"}}, kTune);
  CHECK(fast.counters["runs"] == 0);
  CHECK(fast.words["winner"] == first.words["winner"]);
}

TEST_CASE("a damaged tuning is reported, measured again and repaired",
          "[runtime][autotune][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()}};
  test::run_probe(scratch, env, kTune);
  const auto files = tune_entries(cache.path());
  REQUIRE(files.size() == 1);
  {  // the winner's text sits at the end of the entry
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) - 3));
    f.write("###", 3);
  }
  test::ProbeRun r = test::run_probe(scratch, env, kTune);
  CHECK(r.counters["measured"] == 1);
  CHECK_THAT(r.err, Contains("is damaged") && Contains("the candidates are measured again"));
  test::ProbeRun after = test::run_probe(scratch, env, kTune);
  CHECK(after.counters["measured"] == 0);
  CHECK(after.counters["disk_hits"] == 1);
  CHECK(after.err.empty());
}

TEST_CASE("programs tuning one key at once agree on one winner", "[runtime][autotune][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()},
                                               {"KILN_AUTOTUNE", "full"}};
  std::vector<pid_t> pids;
  for (int i = 0; i < 4; ++i)
    pids.push_back(test::start_probe(env, fmt::format("{}/out{}", scratch.path(), i),
                                     fmt::format("{}/err{}", scratch.path(), i), kTune));
  int measured = 0;
  std::set<std::string> winners;
  for (int i = 0; i < 4; ++i) {
    test::ProbeRun r =
        test::finish_probe(pids[static_cast<size_t>(i)], fmt::format("{}/out{}", scratch.path(), i),
                           fmt::format("{}/err{}", scratch.path(), i));
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    CHECK(r.status == 0);
    CHECK(r.err.empty());
    measured += r.counters["measured"];
    winners.insert(r.words["winner"]);
  }
  CHECK(measured == 1);  // the others waited and found its winner
  CHECK(winners.size() == 1);
  CHECK(tune_entries(cache.path()).size() == 1);
}

TEST_CASE("KILN_AUTOTUNE=off measures and stores nothing", "[runtime][autotune][process]") {
  test::TempDir cache, scratch;
  test::ProbeRun r =
      test::run_probe(scratch, {{"KILN_CACHE_DIR", cache.path()}, {"KILN_AUTOTUNE", "off"}}, kTune);
  CHECK(r.counters["runs"] == 0);
  CHECK(r.words["winner"] == "none");
  CHECK(tune_entries(cache.path()).empty());
  test::ProbeRun bad = test::run_probe(
      scratch, {{"KILN_CACHE_DIR", cache.path()}, {"KILN_AUTOTUNE", "maybe"}}, kTune);
  CHECK_THAT(bad.err, Contains("KILN_AUTOTUNE=maybe is not off, fast or full"));
  CHECK(bad.counters["measured"] == 1);
}

#endif

}  // namespace
}  // namespace kiln
