#include "tensor/device.h"

#include <array>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/error.h"

namespace spore {
namespace {

struct Entry {
  std::string name;
  std::unique_ptr<DeviceMemory> memory;
};
constexpr size_t kMaxDevices = 16;

struct Table {
  std::mutex mu;
  std::array<Entry, kMaxDevices> devices;
  size_t count = 1;  // 0 is the host
};
Table& table() {
  static Table* t = [] {
    auto* t = new Table();  // leaked on purpose: storages may die during static teardown
    t->devices[0].name = "host";
    return t;
  }();
  return *t;
}

}  // namespace

Device register_device(std::string name, std::unique_ptr<DeviceMemory> memory) {
  SPORE_CHECK(memory != nullptr, ErrorCode::invalid_argument, "register_device '{}': no memory given", name);
  Table& t = table();
  std::lock_guard<std::mutex> lk(t.mu);
  for (size_t i = 0; i < t.count; ++i)
    SPORE_CHECK(t.devices[i].name != name, ErrorCode::invalid_argument, "register_device: device '{}' exists", name);
  SPORE_CHECK(t.count < kMaxDevices, ErrorCode::invalid_argument, "register_device '{}': all {} device ids are used",
              name, kMaxDevices);
  t.devices[t.count] = Entry{std::move(name), std::move(memory)};
  return Device{static_cast<uint8_t>(t.count++)};
}

std::string_view device_name(Device d) {
  Table& t = table();
  return d.id < t.count ? std::string_view(t.devices[d.id].name) : std::string_view("<unknown device>");
}

DeviceMemory& device_memory(Device d) {
  Table& t = table();
  SPORE_CHECK(!d.is_host() && d.id < t.count, ErrorCode::not_found, "no device memory for device id {}", d.id);
  return *t.devices[d.id].memory;
}

void copy_bytes(void* dst, Device dd, const void* src, Device sd, size_t bytes) {
  if (bytes == 0) return;
  if (dd.is_host() && sd.is_host()) {
    std::memcpy(dst, src, bytes);
  } else if (sd.is_host()) {
    device_memory(dd).copy_from_host(dst, src, bytes);
  } else if (dd.is_host()) {
    device_memory(sd).copy_to_host(dst, src, bytes);
  } else if (dd == sd) {
    device_memory(dd).copy_within(dst, src, bytes);
  } else {
    std::vector<unsigned char> staging(bytes);
    device_memory(sd).copy_to_host(staging.data(), src, bytes);
    device_memory(dd).copy_from_host(dst, staging.data(), bytes);
  }
}

}  // namespace spore
