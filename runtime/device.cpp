// The table of device families (runtime/device.h).
#include "runtime/device.h"

#include <algorithm>
#include <cstring>
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

Result<std::shared_ptr<DeviceEvent>> HostStream::record() {
  auto e = std::make_shared<HostEvent>();  // launches before it have finished already
  e->device = device_;
  return std::shared_ptr<DeviceEvent>(std::move(e));
}

Status HostStream::wait(const DeviceEvent& event) {
  if (event.device != device_)
    return Error(ErrorKind::InvalidArgument, "wait: the event was not recorded on this device");
  return {};  // launches complete in order as they are issued
}

Status HostMemoryDevice::upload(void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
  return {};
}
Status HostMemoryDevice::download(void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
  return {};
}
Status HostMemoryDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
  return {};
}

DeviceEntry device_entry(std::string name, const Result<DeviceInfo>& info) {
  DeviceEntry e;
  e.name = std::move(name);
  e.available = info.ok();
  if (info)
    e.info = *info;
  else
    e.reason = info.error().message;
  return e;
}

void describe_target(DeviceInfo& info, const backend::Target& target) {
  info.features = target.features;
  if (!target.backend) return;
  info.plane_width = target.backend->plane_width(target);
  info.matrix = target.backend->matrix_configs(target);
  const backend::Limits limits = target.backend->limits(target);
  info.shared_bytes = limits.max_shared_bytes;
  info.shared_optin_bytes = limits.max_shared_optin;
}

Result<std::unique_ptr<DeviceStream>> Device::wrap_stream(void*) {
  return Error(ErrorKind::Unsupported,
               fmt::format("{} has no native streams to wrap; external streams are CUDA streams "
                           "(CUstream) of a cuda:N runtime",
                           info().name));
}

}  // namespace kiln
