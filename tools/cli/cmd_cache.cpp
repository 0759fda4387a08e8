// `kiln cache stats|ls|verify|clear` and `kiln devices`.
#include <ctime>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/disk_cache.h"
#include "runtime/runtime.h"
#include "tools/cli/commands.h"

namespace kiln::cli {

namespace {

std::string human_bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30))
    return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (uint64_t{1} << 20))
    return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (uint64_t{1} << 10))
    return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

std::string when(int64_t t) {
  char buf[32];
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  localtime_r(&tt, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M", &tm);
  return buf;
}

// The cache's entries, or an error printed for the user (no cache location, a refused folder).
std::optional<std::vector<DiskCache::Listing>> entries_or_report(const DiskCache& cache,
                                                                 bool verify) {
  auto entries = cache.list(verify);
  if (!entries) {
    print_error(entries.error());
    return std::nullopt;
  }
  return std::move(*entries);
}

int cache_stats_cmd() {
  auto cache = DiskCache::global();
  if (cache->dir().empty()) {
    fmt::print("there is no disk cache: none of KILN_CACHE_DIR, XDG_CACHE_HOME and HOME is set\n");
    return 0;
  }
  if (!cache->enabled()) fmt::print("the disk cache is off (KILN_CACHE=off)\n");
  if (std::string why = cache->refusal(); !why.empty()) {
    fmt::print("cache    {}\nrefused  {}\n", cache->dir(), why);
    return 1;
  }
  const auto entries = entries_or_report(*cache, false);
  if (!entries) return 1;
  std::map<std::string, std::pair<int, uint64_t>> by_kind;
  uint64_t total = 0;
  for (const auto& e : *entries) {
    auto& k = by_kind[e.kind];
    ++k.first;
    k.second += e.bytes;
    total += e.bytes;
  }
  fmt::print("cache    {}\n", cache->dir());
  fmt::print("entries  {} ({} of a {} cap; least recently used entries go past it)\n",
             entries->size(), human_bytes(total), human_bytes(cache->max_bytes()));
  for (const auto& [kind, n] : by_kind)
    fmt::print("  {:<6} {} entries, {}\n", kind, n.first, human_bytes(n.second));
  return 0;
}

int cache_ls_cmd() {
  auto cache = DiskCache::global();
  const auto entries = entries_or_report(*cache, false);
  if (!entries) return 1;
  if (entries->empty()) {
    fmt::print("the cache at {} is empty\n", cache->dir());
    return 0;
  }
  fmt::print("{:<20} {:<5} {:>10}  {:<16}  {}\n", "kernel", "kind", "size", "last used", "key");
  for (const auto& e : *entries) {
    auto meta = nlohmann::json::parse(e.meta, nullptr, false);
    const std::string kernel =
        meta.is_object() ? meta.value("kernel", std::string("?")) : std::string("(unreadable)");
    fmt::print("{:<20} {:<5} {:>10}  {:<16}  {}\n", kernel, e.kind, human_bytes(e.bytes),
               when(e.last_used), e.name.substr(0, e.name.size() - 3));
    // A tuning: what it was tuned for and the winner (kiln tune, docs/runtime.md).
    if (e.kind == "tune" && meta.is_object())
      fmt::print("  tuned for {}: {} ({} mode)\n", meta.value("tuned", std::string("?")),
                 meta.value("winner", std::string("?")), meta.value("mode", std::string("?")));
  }
  return 0;
}

int cache_verify_cmd(bool remove) {
  auto cache = DiskCache::global();
  const auto entries = entries_or_report(*cache, true);
  if (!entries) return 1;
  int checked = 0, damaged = 0, foreign = 0, kept = 0;
  for (const auto& e : *entries) {
    if (e.ours) ++checked;
    if (e.problem.empty()) continue;
    if (!e.ours) {
      ++foreign;
      fmt::print("not kiln's: {} ({})\n", e.path, e.problem);
      continue;
    }
    ++damaged;
    std::string fate;
    if (remove) {
      if (auto st = cache->remove(e); st) {
        fate = "; removed";
      } else {
        fate = fmt::format("; not removed: {}", st.error().message);
        ++kept;
      }
    }
    fmt::print("damaged: {} ({}){}\n", e.path, e.problem, fate);
  }
  fmt::print(
      "{} entries checked, {} damaged{}{}\n", checked, damaged,
      damaged && !remove ? " (kiln recompiles them when used; --remove deletes them now)" : "",
      foreign ? fmt::format("; {} files or folders that kiln did not write are left alone", foreign)
              : std::string());
  return (damaged && !remove) || kept || foreign ? 1 : 0;
}

int cache_clear_cmd() {
  auto cache = DiskCache::global();
  auto done = cache->clear();
  if (!done) {
    print_error(done.error());
    return 1;
  }
  fmt::print(
      "removed {} entries ({}) from {}{}\n", done->entries, human_bytes(done->bytes), cache->dir(),
      done->kept
          ? fmt::format("; left {} files or folders there that are not kiln entries", done->kept)
          : std::string());
  return 0;
}

}  // namespace

Command add_cache_command(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "cache", "Inspect, verify or clear the disk cache of compiled kernels and tunings");
  sub->require_subcommand(1);
  auto* stats = sub->add_subcommand("stats", "Where the cache is, its size and cap");
  auto* ls = sub->add_subcommand(
      "ls", "List the entries: kernel, kind, size, last use, key (and each tuning's winner)");
  auto* verify = sub->add_subcommand(
      "verify",
      "Check every entry's format, checksum and recorded key, and report files kiln did not write");
  auto remove = std::make_shared<bool>(false);
  verify->add_flag("--remove", *remove, "Delete damaged entries");
  auto* clear = sub->add_subcommand("clear", "Remove every kiln entry (and nothing else)");
  sub->footer(
      "The cache lives in $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "
      "KILN_CACHE=off disables it and KILN_CACHE_MAX caps it (default 1G).");
  return {sub, [=]() -> int {
            if (stats->parsed()) return cache_stats_cmd();
            if (ls->parsed()) return cache_ls_cmd();
            if (verify->parsed()) return cache_verify_cmd(*remove);
            if (clear->parsed()) return cache_clear_cmd();
            return 2;
          }};
}

Command add_devices_command(CLI::App& app) {
  auto* sub =
      app.add_subcommand("devices", "List the devices kiln can run on, and why others are absent");
  return {sub, []() -> int {
            for (const DeviceEntry& d : devices()) {
              if (!d.available) {
                fmt::print("{:<8} absent: {}\n", d.name, d.reason);
                continue;
              }
              const DeviceInfo& i = d.info;
              fmt::print("{:<8} {}\n{:<8} {}, {} memory\n", d.name, i.description, "", i.details,
                         human_bytes(i.memory_bytes));
            }
            return 0;
          }};
}

}  // namespace kiln::cli
