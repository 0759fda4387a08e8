// The table of device families (runtime/device.h).
#include "runtime/device.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>

namespace kiln {

namespace {
std::mutex& families_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<DeviceFamily>& families() {
  static auto* f = new std::vector<DeviceFamily>();
  return *f;
}
}  // namespace

void register_device_family(DeviceFamily family) {
  std::lock_guard<std::mutex> lock(families_mu());
  for (const DeviceFamily& f : families())
    if (f.name == family.name) return;
  families().push_back(std::move(family));
  // Listed in a fixed order whatever order the files registered in.
  std::sort(families().begin(), families().end(),
            [](const DeviceFamily& a, const DeviceFamily& b) { return a.name < b.name; });
}

std::vector<DeviceFamily> device_families() {
  std::lock_guard<std::mutex> lock(families_mu());
  return families();
}

Result<std::unique_ptr<DeviceStream>> Device::wrap_stream(void*) {
  return Error(ErrorKind::Unsupported,
               fmt::format("{} has no native streams to wrap; external streams are CUDA streams "
                           "(CUstream) of a cuda:N runtime",
                           info().name));
}

}  // namespace kiln
