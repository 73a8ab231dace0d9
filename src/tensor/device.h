#pragma once
// Devices: where a Storage's bytes live. Device 0 is host memory (every built-in backend computes there). A
// backend with memory of its own (a GPU) registers a device with its DeviceMemory; Storage::allocate(bytes, what,
// device) then allocates there, Tensor::device() says where a tensor is, and a compiled plan for that backend
// copies its inputs in and its outputs out as explicit steps (runtime/plan.cpp). Host code that reads elements
// (item_at, to_doubles, copies) refuses tensors that are not on the host, naming the device.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace spore {

struct Device {
  uint8_t id = 0;
  constexpr bool is_host() const { return id == 0; }
  friend constexpr bool operator==(Device a, Device b) { return a.id == b.id; }
};
inline constexpr Device host_device{};

// A device's allocator and its copies to, from and within it.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual void* allocate(size_t bytes) = 0;  // nullptr when the device is out of memory
  virtual void release(void* p, size_t bytes) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy_within(void* dst, const void* src, size_t bytes) = 0;
};

// Registers a device; throws invalid_argument when the name is taken or every id is used.
Device register_device(std::string name, std::unique_ptr<DeviceMemory> memory);
std::string_view device_name(Device d);
// The memory of a registered non-host device; throws not_found otherwise.
DeviceMemory& device_memory(Device d);
// Copies `bytes` between two buffers on any devices (through the host between two other devices).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

}  // namespace spore
