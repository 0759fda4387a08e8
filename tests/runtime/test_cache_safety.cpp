// What the disk cache must never do: delete, follow or run what is not its own (issue 9). Each
// case plants something in or around a cache folder and checks that it survives untouched.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/cache_entry.h"
#include "runtime/disk_cache.h"
#include "runtime/log.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Catch::Contains;

DiskCache cache_at(const std::string& dir, uint64_t max_bytes = uint64_t{1} << 30) {
  return DiskCache(DiskCache::Config{true, dir, max_bytes});
}
Status put(DiskCache& c, const std::string& material, size_t bytes = 100,
           const std::string& kind = "cpu") {
  return c.store(kind, strong_hash(material), material, R"({"kernel":"k"})",
                 std::vector<char>(bytes, 'b'));
}
std::optional<DiskCache::Entry> get(DiskCache& c, const std::string& material,
                                    const std::string& kind = "cpu") {
  return c.load(kind, strong_hash(material), material);
}
std::string entry_path(const std::string& dir, const std::string& material,
                       const std::string& kind = "cpu") {
  const std::string hex = strong_hash(material).hex();
  return fmt::format("{}/v2/{}/{}/{}.kc", dir, kind, hex.substr(0, 2), hex);
}
void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// Collects warnings for the scope.
struct Warnings {
  std::vector<std::string> seen;
  Warnings() {
    set_log_handler([this](std::string_view m) { seen.emplace_back(m); });
  }
  ~Warnings() { set_log_handler({}); }
  bool any(const std::string& part) const {
    for (const auto& w : seen)
      if (w.find(part) != std::string::npos) return true;
    return false;
  }
};

TEST_CASE("with no location there is no cache, and nothing is cleared",
          "[runtime][cache][safety]") {
  const std::string saved_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  for (const char* home : std::initializer_list<const char*>{"", nullptr}) {
    ::unsetenv("KILN_CACHE_DIR");
    ::unsetenv("XDG_CACHE_HOME");
    if (home)
      ::setenv("HOME", home, 1);
    else
      ::unsetenv("HOME");
    DiskCache::Config c = DiskCache::config_from_env();
    CHECK(c.dir.empty());
    CHECK_FALSE(c.enabled);
    test::TempDir cwd;
    write(cwd.path() + "/v1/precious.txt", "user data");
    write(cwd.path() + "/v1/cpu/ab/00112233445566778899aabbccddeeff.kc", "KILNCACH fake");
    const fs::path old = fs::current_path();
    fs::current_path(cwd.path());
    DiskCache cache(c);
    auto cleared = cache.clear();
    CHECK_FALSE(cleared);
    CHECK_FALSE(cache.list(true));
    CHECK(put(cache, "k").ok());  // off: a no-op, not a write to the working folder
    fs::current_path(old);
    CHECK(fs::exists(cwd.path() + "/v1/precious.txt"));
    CHECK(fs::exists(cwd.path() + "/v1/cpu/ab/00112233445566778899aabbccddeeff.kc"));
    CHECK_FALSE(fs::exists(cwd.path() + "/v2"));
  }
  ::setenv("HOME", saved_home.c_str(), 1);
}

TEST_CASE("clear removes kiln entries and nothing else", "[runtime][cache][safety]") {
  test::TempDir dir;
  DiskCache cache = cache_at(dir.path());
  KILN_REQUIRE_OK(put(cache, "one"));
  KILN_REQUIRE_OK(put(cache, "two", 100, "cuda"));
  const std::string d = dir.path();
  const std::vector<std::string> foreign = {
      d + "/v1/notes.txt",                                       // a project's own v1 folder
      d + "/v1/cpu/00/readme",                                   //
      d + "/v2/notes.txt",                                       //
      d + "/v2/cpu/zz/file.kc",                                  // not a shard name
      d + "/v2/cpu/ab/00112233445566778899aabbccddeeff.kc",      // named like one, no header
      d + "/v2/cpu/ab/00112233445566778899aabbccddeeff.kc.bak",  //
      d + "/v2/Other Dir/x",                                     //
      d + "/src/main.cpp",
  };
  for (const auto& f : foreign) write(f, "user data");
  // An entry of the old format is kiln's own: it goes.
  write(d + "/v1/cpu/12/123456789abcdef0123456789abcdef0.kc", "KILNCACH\x01 old entry");
  auto cleared = cache.clear();
  KILN_REQUIRE_OK(cleared);
  CHECK(cleared->entries == 3);
  CHECK(cleared->kept >= 3);
  for (const auto& f : foreign) {
    INFO(f);
    CHECK(test::read_file(f) == "user data");
  }
  CHECK_FALSE(fs::exists(entry_path(d, "one")));
  CHECK_FALSE(fs::exists(d + "/v1/cpu/12"));  // kiln's emptied folders go, others stay
  CHECK(fs::exists(d + "/v2/cpu/ab"));
}

TEST_CASE("no symbolic link below the cache folder is followed", "[runtime][cache][safety]") {
  test::TempDir dir, elsewhere;
  Warnings w;
  // A sound entry of this user's, outside the cache: a link to it must not be used or deleted.
  DiskCache other = cache_at(elsewhere.path());
  KILN_REQUIRE_OK(put(other, "k"));
  const std::string target = entry_path(elsewhere.path(), "k");
  const auto mtime = fs::last_write_time(target);
  const std::string d = dir.path();

  SECTION("the version folder is a link") {
    fs::create_directory_symlink(elsewhere.path() + "/v2", d + "/v2");
  }
  SECTION("a shard folder is a link") {
    fs::create_directories(d + "/v2/cpu");
    fs::create_directory_symlink(fs::path(target).parent_path(),
                                 d + "/v2/cpu/" + strong_hash("k").hex().substr(0, 2));
  }
  SECTION("an entry is a link") {
    fs::create_directories(fs::path(entry_path(d, "k")).parent_path());
    fs::create_symlink(target, entry_path(d, "k"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  DiskCache cache = cache_at(d, 1);  // a 1-byte cap: every store evicts
  CHECK_FALSE(get(cache, "k"));
  CHECK_FALSE(w.seen.empty());
  auto st = put(cache, "k");  // must not write through the link
  (void)st;
  (void)put(cache, "other material");
  auto verified = cache.list(true);
  REQUIRE(verified);
  bool reported = false;
  for (const auto& l : *verified) reported |= !l.ours && !l.problem.empty();
  CHECK(reported);
  for (const auto& l : *verified)
    if (!l.ours) CHECK_FALSE(cache.remove(l).ok());
  KILN_REQUIRE_OK(cache.clear());
  // The target is untouched: still there, same time stamp, still sound.
  REQUIRE(fs::exists(target));
  CHECK(fs::last_write_time(target) == mtime);
  CHECK(get(other, "k"));
}

TEST_CASE("an entry is run only for the key it records", "[runtime][cache][safety]") {
  test::TempDir dir;
  Warnings w;
  DiskCache cache = cache_at(dir.path());
  KILN_REQUIRE_OK(put(cache, "kernel A", 100));
  // Plant A's file under B's address, and under another kind's folder.
  fs::create_directories(fs::path(entry_path(dir.path(), "kernel B")).parent_path());
  fs::copy_file(entry_path(dir.path(), "kernel A"), entry_path(dir.path(), "kernel B"));
  fs::create_directories(fs::path(entry_path(dir.path(), "kernel A", "cuda")).parent_path());
  fs::copy_file(entry_path(dir.path(), "kernel A"), entry_path(dir.path(), "kernel A", "cuda"));
  auto verified = cache.list(true);
  REQUIRE(verified);
  int flagged = 0;
  for (const auto& l : *verified)
    if (!l.problem.empty()) {
      ++flagged;
      CHECK(l.ours);
    }
  CHECK(flagged == 2);  // verify checks the recorded key against the name and the folder
  CHECK_FALSE(get(cache, "kernel B"));
  CHECK_FALSE(get(cache, "kernel A", "cuda"));
  CHECK(w.any("records the key of another specialization"));
  CHECK_FALSE(fs::exists(entry_path(dir.path(), "kernel B")));  // removed: recompiled next time
  CHECK(get(cache, "kernel A"));
}

TEST_CASE("folders are made 0700, entries 0600; others' folders are refused",
          "[runtime][cache][safety]") {
  test::TempDir base;
  const std::string d = base.path() + "/new/cache";
  DiskCache cache = cache_at(d);
  KILN_REQUIRE_OK(put(cache, "k"));
  struct stat st {};
  REQUIRE(::stat(d.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat((d + "/v2/cpu").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  REQUIRE(::stat(entry_path(d, "k").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  Warnings w;
  SECTION("a folder others can write to (a shared 1777 folder)") {
    fs::permissions(d, fs::perms::all | fs::perms::sticky_bit);
    CHECK_THAT(cache.refusal(), Contains("other users can write to it"));
    CHECK_FALSE(get(cache, "k"));
    CHECK_FALSE(put(cache, "k2").ok());
    CHECK_FALSE(cache.clear());
    CHECK(w.any("not used"));
    CHECK(fs::exists(entry_path(d, "k")));
  }
  SECTION("an entry others can write to") {
    fs::permissions(entry_path(d, "k"), fs::perms::others_write, fs::perm_options::add);
    CHECK_FALSE(get(cache, "k"));
    CHECK(w.any("other users can write to it"));
    CHECK(fs::exists(entry_path(d, "k")));  // not ours to delete
  }
  SECTION("an entry or folder of another user") {
    if (::geteuid() != 0) {
      WARN("skipped: changing a file's owner needs root");
      return;
    }
    REQUIRE(::chown(entry_path(d, "k").c_str(), 65534, 65534) == 0);
    CHECK_FALSE(get(cache, "k"));
    CHECK(w.any("belongs to user id 65534"));
    REQUIRE(::chown(d.c_str(), 65534, 65534) == 0);
    CHECK_THAT(cache.refusal(), Contains("belongs to user id 65534"));
    CHECK_FALSE(put(cache, "k3").ok());
  }
}

TEST_CASE("a FIFO or other special file in an entry's place does not block",
          "[runtime][cache][safety]") {
  test::TempDir dir;
  Warnings w;
  DiskCache cache = cache_at(dir.path());
  const std::string p = entry_path(dir.path(), "k");
  fs::create_directories(fs::path(p).parent_path());
  REQUIRE(::mkfifo(p.c_str(), 0600) == 0);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(get(cache, "k"));
  auto verified = cache.list(true);
  REQUIRE(verified);
  REQUIRE(verified->size() == 1);
  CHECK_THAT((*verified)[0].problem, Contains("not a regular file"));
  KILN_REQUIRE_OK(cache.clear());
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(fs::is_fifo(p));
  CHECK(w.any("not a regular file"));
}

TEST_CASE("sizes in a crafted header cannot make the reader run past the file",
          "[runtime][cache][safety]") {
  const std::vector<char> good =
      cache_entry::encode("cpu", strong_hash("m"), "m", "{}", std::vector<char>(64, 'x'));
  REQUIRE(cache_entry::parse(good, nullptr).empty());
  // Each size field set so that the total wraps around 2^64 (or 2^32), checksum recomputed.
  for (size_t field : {12u, 16u, 20u, 24u}) {
    for (uint64_t v : {~uint64_t{0}, ~uint64_t{0} - 55, uint64_t{0xffffffff}, uint64_t{1} << 63}) {
      std::vector<char> bad = good;
      if (field == 24)
        std::memcpy(bad.data() + field, &v, 8);
      else {
        const auto v32 = static_cast<uint32_t>(v);
        std::memcpy(bad.data() + field, &v32, 4);
      }
      const uint64_t sum = cache_entry::checksum(bad);
      std::memcpy(bad.data() + 32, &sum, 8);
      cache_entry::Parsed out;
      CHECK_FALSE(cache_entry::parse(bad, &out).empty());
    }
  }
  // And through the cache: verify and load report it, neither crashes.
  test::TempDir dir;
  Warnings w;
  DiskCache cache = cache_at(dir.path());
  std::vector<char> bad = good;
  const uint64_t wrap = ~uint64_t{0} - 10;
  std::memcpy(bad.data() + 24, &wrap, 8);
  const uint64_t sum = cache_entry::checksum(bad);
  std::memcpy(bad.data() + 32, &sum, 8);
  write(entry_path(dir.path(), "m"), std::string(bad.begin(), bad.end()));
  auto verified = cache.list(true);
  REQUIRE(verified);
  REQUIRE(verified->size() == 1);
  CHECK_THAT((*verified)[0].problem, Contains("truncated"));
  CHECK_FALSE(get(cache, "m"));
}

TEST_CASE("a damaged entry that cannot be removed is not reported as removed",
          "[runtime][cache][safety]") {
  if (::geteuid() == 0) {
    WARN("skipped: root may remove files from a read-only folder");
    return;
  }
  test::TempDir dir;
  Warnings w;
  DiskCache cache = cache_at(dir.path());
  KILN_REQUIRE_OK(put(cache, "k"));
  const std::string p = entry_path(dir.path(), "k");
  fs::resize_file(p, 60);
  fs::permissions(fs::path(p).parent_path(), fs::perms::owner_read | fs::perms::owner_exec);
  CHECK_FALSE(get(cache, "k"));
  fs::permissions(fs::path(p).parent_path(), fs::perms::owner_all);
  CHECK(w.any("could not be removed"));
  CHECK_FALSE(w.any("; removed"));
  CHECK(fs::exists(p));
}

TEST_CASE("KILN_CACHE_MAX is parsed strictly", "[runtime][cache][safety]") {
  CHECK(DiskCache::parse_size("0") == uint64_t{0});
  CHECK(DiskCache::parse_size("4096") == uint64_t{4096});
  CHECK(DiskCache::parse_size("64M") == uint64_t{64} << 20);
  CHECK(DiskCache::parse_size("2g") == uint64_t{2} << 30);
  CHECK(DiskCache::parse_size("1T") == uint64_t{1} << 40);
  CHECK(DiskCache::parse_size("18446744073709551615") == ~uint64_t{0});
  for (const char* bad : {"", "1e30", "inf", "nan", "0.5", "-1", "18446744073709551616",
                          "16777216T", "garbage", "1TB", "K", " 1", "1 "}) {
    INFO(bad);
    CHECK_FALSE(DiskCache::parse_size(bad));
  }
  Warnings w;
  ::setenv("KILN_CACHE_DIR", "/tmp/kiln-a", 1);
  ::setenv("KILN_CACHE_MAX", "1e30", 1);
  CHECK(DiskCache::config_from_env().max_bytes == uint64_t{1} << 30);
  CHECK(w.any("KILN_CACHE_MAX='1e30' is not a size"));
  ::unsetenv("KILN_CACHE_MAX");
  ::unsetenv("KILN_CACHE_DIR");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_CASE("an empty or truncated file at an entry's name is removed and rewritten",
          "[runtime][cache][safety]") {
  test::TempDir dir;
  Warnings w;
  DiskCache cache = cache_at(dir.path());
  // What a power cut leaves when a write was renamed into place before it reached the disk.
  for (const std::string& content : {std::string(), std::string("KILN")}) {
    write(entry_path(dir.path(), "kernel A"), content);
    CHECK_FALSE(get(cache, "kernel A"));
    CHECK(w.any("damaged"));
    CHECK_FALSE(w.any("left alone"));
    CHECK_FALSE(fs::exists(entry_path(dir.path(), "kernel A")));
    KILN_REQUIRE_OK(put(cache, "kernel A"));  // the next store writes it
    CHECK(get(cache, "kernel A"));
  }
  // verify --remove and clear remove it too.
  write(entry_path(dir.path(), "kernel B"), "");
  auto listed = cache.list(true);
  REQUIRE(listed);
  bool flagged = false;
  for (const auto& l : *listed)
    if (l.path == entry_path(dir.path(), "kernel B")) {
      flagged = !l.problem.empty() && l.ours;
      KILN_REQUIRE_OK(cache.remove(l));
    }
  CHECK(flagged);
  CHECK_FALSE(fs::exists(entry_path(dir.path(), "kernel B")));
  write(entry_path(dir.path(), "kernel C"), "");
  KILN_REQUIRE_OK(cache.clear());
  CHECK_FALSE(fs::exists(entry_path(dir.path(), "kernel C")));
}

TEST_CASE("an entry whose description disagrees with the kernel is a miss, then replaced",
          "[runtime][cache][safety]") {
  test::ScopedCache scoped;
  Warnings w;
  // A cube size nothing else launches rt_fill_n with: its specialization is new to this
  // process, so the launch below reads the disk cache. A child process writes the entry.
  auto launch = [](float value) {
    auto rt = test::open_cpu();
    Tensor y = test::f32_tensor(rt, std::vector<float>(40, 0.0f));
    KILN_REQUIRE_OK(rt.launch(test::kernel(rt, "rt_fill_n"), 1, 40, y, 40u, value));
    KILN_REQUIRE_OK(rt.sync());
    return test::to_host<float>(y);
  };
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto rt = Runtime::open("cpu");
    if (!rt) ::_exit(1);
    auto y = rt->empty(ir::ElemType::F32, {40});
    auto k = rt->kernel("rt_fill_n");
    ::_exit(y && k && rt->launch(*k, 1, 40, *y, 40u, 1.0f).ok() && rt->sync().ok() ? 0 : 1);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  // Rewrite the entry's description (a valid checksum) to say the kernel takes no parameters.
  DiskCache cache = cache_at(scoped.dir());
  auto listed = cache.list(true);
  REQUIRE(listed);
  REQUIRE(listed->size() == 1);
  const std::string path = listed->front().path;
  const std::string bytes = test::read_file(path);
  cache_entry::Parsed parsed;
  REQUIRE(cache_entry::parse(std::span<const char>(bytes.data(), bytes.size()), &parsed).empty());
  auto meta = nlohmann::json::parse(parsed.meta);
  auto info = nlohmann::json::parse(meta["info"].get<std::string>());
  info["params"] = nlohmann::json::array();
  meta["info"] = info.dump();
  const std::vector<char> forged =
      cache_entry::encode(parsed.kind, parsed.key, parsed.material, meta.dump(), parsed.blob);
  write(path, std::string(forged.begin(), forged.end()));
  for (float v : launch(2.0f)) REQUIRE(v == 2.0f);
  CHECK(w.any("does not describe this kernel"));
  CHECK(test::read_file(path) != std::string(forged.begin(), forged.end()));  // rewritten
}

}  // namespace
}  // namespace kiln
