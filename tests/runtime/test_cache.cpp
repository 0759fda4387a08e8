// The disk cache: entries, damage, eviction, and whole programs sharing one cache folder.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "runtime/disk_cache.h"
#include "runtime/log.h"
#include "tests/runtime/probe_util.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;
using test::entry_files;
using test::finish_probe;
using test::ProbeRun;
using test::run_probe;
using test::start_probe;

// ---- the DiskCache class ---------------------------------------------------------------------

DiskCache make_cache(const std::string& dir, uint64_t max_bytes = uint64_t{1} << 30) {
  DiskCache::Config c;
  c.dir = dir;
  c.max_bytes = max_bytes;
  return DiskCache(c);
}

std::vector<char> blob_of(size_t n, char fill) {
  return std::vector<char>(n, fill);
}

// Entries keyed by a material text, as the runtime keys them by canonical IR and target.
Status put(DiskCache& cache, const std::string& material, std::vector<char> blob,
           const std::string& kind = "cpu") {
  return cache.store(kind, strong_hash(material), material, R"({"kernel":"k"})", blob);
}
std::optional<DiskCache::Entry> get(DiskCache& cache, const std::string& material,
                                    const std::string& kind = "cpu") {
  return cache.load(kind, strong_hash(material), material);
}
std::vector<DiskCache::Listing> listing(const DiskCache& cache, bool verify) {
  auto l = cache.list(verify);
  INFO((l ? std::string() : l.error().message));
  REQUIRE(l);
  return *l;
}

TEST_CASE("entries round-trip and are named by their content hash", "[runtime][cache]") {
  test::TempDir dir;
  DiskCache cache = make_cache(dir.path());
  const Hash128 key = strong_hash("kernel text");
  CHECK(key == strong_hash("kernel text"));
  CHECK_FALSE(key == strong_hash("kernel text "));
  CHECK(key.hex().size() == 32);
  CHECK_FALSE(get(cache, "kernel text"));
  KILN_REQUIRE_OK(put(cache, "kernel text", blob_of(1000, 'x')));
  auto e = get(cache, "kernel text");
  REQUIRE(e);
  CHECK(e->meta == R"({"kernel":"k"})");
  CHECK(e->blob == blob_of(1000, 'x'));
  CHECK_FALSE(get(cache, "kernel text", "cuda"));  // kinds are separate
  const auto all = listing(cache, true);
  REQUIRE(all.size() == 1);
  CHECK_THAT(all[0].path, Contains(key.hex()));
  CHECK(all[0].kind == "cpu");
  CHECK(all[0].problem.empty());
  CHECK(cache.total_bytes() == all[0].bytes);
  auto cleared = cache.clear();
  KILN_REQUIRE_OK(cleared);
  CHECK(cleared->entries == 1);
  CHECK(listing(cache, false).empty());
}

TEST_CASE("damaged entries are reported once, removed, and miss", "[runtime][cache]") {
  test::TempDir dir;
  DiskCache cache = make_cache(dir.path());
  std::vector<std::string> warnings;
  set_log_handler([&](std::string_view m) { warnings.emplace_back(m); });
  struct Damage {
    const char* name;
    std::function<void(const std::string&)> apply;
  };
  auto write_at = [](const std::string& p, std::streamoff at, std::string_view bytes) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(at);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  };
  const std::vector<Damage> damages = {
      {"flipped byte", [&](const std::string& p) { write_at(p, 100, "\x7f"); }},
      {"truncated", [](const std::string& p) { fs::resize_file(p, fs::file_size(p) - 10); }},
      {"header only", [](const std::string& p) { fs::resize_file(p, 20); }},
      {"other format version", [&](const std::string& p) { write_at(p, 8, "\x63"); }},
  };
  for (const Damage& d : damages) {
    INFO(d.name);
    warnings.clear();
    KILN_REQUIRE_OK(put(cache, d.name, blob_of(500, 'y')));
    const auto before = listing(cache, true);
    REQUIRE(before.size() == 1);
    d.apply(before[0].path);
    CHECK_FALSE(listing(cache, true)[0].problem.empty());  // verify sees it
    CHECK(listing(cache, true)[0].ours);
    CHECK_FALSE(get(cache, d.name));
    CHECK_FALSE(fs::exists(before[0].path));
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0],
               Contains("damaged") && Contains(strong_hash(d.name).hex()) && Contains("removed"));
    // Stored again, it loads again.
    KILN_REQUIRE_OK(put(cache, d.name, blob_of(500, 'y')));
    CHECK(get(cache, d.name));
    KILN_REQUIRE_OK(cache.clear());
  }
  set_log_handler({});
}

TEST_CASE("past its cap the cache evicts the least recently used entries", "[runtime][cache]") {
  test::TempDir dir;
  DiskCache cache = make_cache(dir.path(), 10 * 1100);  // room for about 10 entries of ~1 KB
  auto material = [](int i) { return "entry " + std::to_string(i); };
  for (int i = 0; i < 8; ++i)
    KILN_REQUIRE_OK(put(cache, material(i), blob_of(1000, static_cast<char>('a' + i))));
  // Give the entries distinct ages: entry i was last used i minutes after entry 0.
  const auto base = fs::file_time_type::clock::now() - std::chrono::hours(1);
  for (const auto& l : listing(cache, false))
    for (int i = 0; i < 8; ++i)
      if (l.path.find(strong_hash(material(i)).hex()) != std::string::npos)
        fs::last_write_time(l.path, base + std::chrono::minutes(i));
  REQUIRE(get(cache, material(0)));  // entry 0 becomes the most recently used
  for (int i = 8; i < 12; ++i) KILN_REQUIRE_OK(put(cache, material(i), blob_of(1000, 'z')));
  CHECK(cache.total_bytes() <= 10 * 1100);
  CHECK(get(cache, material(0)));        // recently used: kept
  CHECK_FALSE(get(cache, material(1)));  // the oldest: evicted
  CHECK(get(cache, material(11)));       // the newest: kept
}

TEST_CASE("a cache that cannot be written is an error of store, not of the program",
          "[runtime][cache]") {
  test::TempDir dir;
  const std::string file = dir.path() + "/not-a-folder";
  std::ofstream(file) << "x";
  DiskCache cache = make_cache(file);
  auto st = put(cache, "k", blob_of(10, 'a'));
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().kind == ErrorKind::Io);
  CHECK_FALSE(get(cache, "k"));
}

TEST_CASE("the cache location follows the environment", "[runtime][cache]") {
  ::setenv("KILN_CACHE_DIR", "/tmp/kiln-a", 1);
  ::setenv("KILN_CACHE_MAX", "64M", 1);
  ::unsetenv("KILN_CACHE");
  auto c = DiskCache::config_from_env();
  CHECK(c.enabled);
  CHECK(c.dir == "/tmp/kiln-a");
  CHECK(c.max_bytes == (64u << 20));
  ::unsetenv("KILN_CACHE_DIR");
  ::setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  CHECK(DiskCache::config_from_env().dir == "/tmp/xdg/kiln");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "/tmp/home", 1);
  CHECK(DiskCache::config_from_env().dir == "/tmp/home/.cache/kiln");
  ::setenv("KILN_CACHE", "off", 1);
  CHECK_FALSE(DiskCache::config_from_env().enabled);
  ::unsetenv("KILN_CACHE");
  ::unsetenv("KILN_CACHE_MAX");
}

// ---- whole programs sharing a cache folder ---------------------------------------------------

TEST_CASE("a second program loads every kernel from the disk cache", "[runtime][cache][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()}};
  ProbeRun first = run_probe(scratch, env);
  CHECK(first.counters["compiles"] == 3);
  CHECK(first.counters["disk_hits"] == 0);
  CHECK(entry_files(cache.path()).size() == 3);
  ProbeRun second = run_probe(scratch, env);
  CHECK(second.counters["compiles"] == 0);
  CHECK(second.counters["disk_hits"] == 3);
  CHECK(second.err.empty());
}

// A pipeline's GPU code launches its producer's units beyond the kernel's own cube; the entry
// records that cube, and a second program still takes it (it once recompiled every time).
TEST_CASE("a second program loads a pipeline kernel from the disk cache",
          "[runtime][cache][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()}};
  ProbeRun first = run_probe(scratch, env, {"pipeline"});
  if (first.out.rfind("unavailable", 0) == 0) {
    WARN("skipped: " << first.out);
    return;
  }
  CHECK(first.counters["compiles"] == 1);
  ProbeRun second = run_probe(scratch, env, {"pipeline"});
  CHECK(second.counters["compiles"] == 0);
  CHECK(second.counters["disk_hits"] == 1);
  CHECK(second.err.empty());
}

TEST_CASE("a corrupted cache entry is reported once and recompiled", "[runtime][cache][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()}};
  run_probe(scratch, env);
  const auto files = entry_files(cache.path());
  REQUIRE(files.size() == 3);
  {  // flip bytes in the middle of the object code of one entry, truncate another
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(files[0]) / 2));
    f.write("\xde\xad\xbe\xef", 4);
  }
  fs::resize_file(files[1], fs::file_size(files[1]) / 3);
  ProbeRun r = run_probe(scratch, env);
  CHECK(r.counters["compiles"] == 2);
  CHECK(r.counters["disk_hits"] == 1);
  CHECK_THAT(r.err, Contains("checksum mismatch") && Contains("truncated"));
  size_t reports = 0;
  for (size_t p = r.err.find("damaged"); p != std::string::npos; p = r.err.find("damaged", p + 1))
    ++reports;
  CHECK(reports == 2);
  ProbeRun after = run_probe(scratch, env);  // repaired: all hits, nothing to report
  CHECK(after.counters["disk_hits"] == 3);
  CHECK(after.err.empty());
}

TEST_CASE("several programs filling one cache at once all succeed", "[runtime][cache][process]") {
  test::TempDir cache, scratch;
  const std::map<std::string, std::string> env{{"KILN_CACHE_DIR", cache.path()}};
  for (int round = 0; round < 3; ++round) {
    KILN_REQUIRE_OK(DiskCache(DiskCache::Config{true, cache.path(), uint64_t{1} << 30}).clear());
    std::vector<pid_t> pids;
    for (int i = 0; i < 4; ++i)
      pids.push_back(start_probe(env, fmt::format("{}/out{}", scratch.path(), i),
                                 fmt::format("{}/err{}", scratch.path(), i)));
    for (int i = 0; i < 4; ++i) {
      ProbeRun r =
          finish_probe(pids[static_cast<size_t>(i)], fmt::format("{}/out{}", scratch.path(), i),
                       fmt::format("{}/err{}", scratch.path(), i));
      INFO("stderr: " << r.err);
      CHECK(r.status == 0);
      CHECK(r.counters["compiles"] + r.counters["disk_hits"] == 3);
      CHECK(r.err.empty());
    }
    // Exactly the three entries, all sound, no temporary files left.
    const auto files = entry_files(cache.path());
    CHECK(files.size() == 3);
    for (const auto& f : files) CHECK_THAT(f, Catch::EndsWith(".kc"));
    DiskCache view(DiskCache::Config{true, cache.path(), uint64_t{1} << 30});
    for (const auto& l : listing(view, true)) CHECK(l.problem.empty());
  }
}

TEST_CASE("KILN_CACHE=off writes nothing", "[runtime][cache][process]") {
  test::TempDir cache, scratch;
  ProbeRun r = run_probe(scratch, {{"KILN_CACHE_DIR", cache.path()}, {"KILN_CACHE", "off"}});
  CHECK(r.counters["compiles"] == 3);
  CHECK(entry_files(cache.path()).empty());
}

TEST_CASE("KILN_DUMP writes every stage of every new specialization, cached or not",
          "[runtime][cache][process]") {
  test::TempDir cache, scratch, dump1, dump2;
  for (const auto* d : {&dump1, &dump2}) {
    ProbeRun r = run_probe(scratch, {{"KILN_CACHE_DIR", cache.path()},
                                     {"KILN_DUMP", "ir,ir-opt,llvm,asm"},
                                     {"KILN_DUMP_DIR", d->path()}});
    CHECK(r.counters["disk_hits"] == (d == &dump1 ? 0 : 3));  // the second run compiles nothing
    const auto files = entry_files(d->path());
    CHECK(files.size() == 12);  // 3 kernels x 4 stages
    size_t axpy = 0;
    for (const auto& f : files)
      if (fs::path(f).filename().string().rfind("axpy-", 0) == 0) ++axpy;
    CHECK(axpy == 4);
    for (const auto& f : files) {
      const std::string text = test::read_file(f);
      if (f.find("axpy-") == std::string::npos) continue;
      if (Catch::endsWith(f, ".opt.kir"))
        CHECK_THAT(text, Contains("units"));
      else if (Catch::endsWith(f, ".kir"))
        CHECK_THAT(text, Contains("kernel @axpy"));
      if (Catch::endsWith(f, ".ll")) CHECK_THAT(text, Contains("define"));
      if (Catch::endsWith(f, ".s")) CHECK_THAT(text, Contains("axpy"));
    }
  }
  // The second run loaded from the disk cache and still dumped the same names.
  std::vector<std::string> a, b;
  for (const auto& f : entry_files(dump1.path())) a.push_back(fs::path(f).filename().string());
  for (const auto& f : entry_files(dump2.path())) b.push_back(fs::path(f).filename().string());
  CHECK(a == b);
}

}  // namespace
}  // namespace kiln
