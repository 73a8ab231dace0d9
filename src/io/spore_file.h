#pragma once
// Layout constants and the checksum of the .spore container (docs/FORMAT.md), for the reader/writer
// in spore_file.cpp and for tests and tools that inspect or patch files. Users call io/model_file.h.
#include <cstddef>
#include <cstdint>
#include <span>

namespace spore::io::spore_layout {

inline constexpr char magic[8] = {'S', 'P', 'O', 'R', 'E', 'M', 'D', 'L'};
inline constexpr uint32_t header_bytes = 128;  // v1 header size; readers accept larger (future fields)
inline constexpr size_t alignment = 64;        // weights section and every tensor in it

// Byte offsets of the v1 header fields (all little-endian).
inline constexpr size_t off_version = 8;           // u32
inline constexpr size_t off_header_size = 12;      // u32
inline constexpr size_t off_file_size = 16;        // u64
inline constexpr size_t off_sections = 24;         // 4 x (u64 offset, u64 size): graph, index, metadata, weights
inline constexpr size_t off_producer = 88;         // 32 bytes, UTF-8, NUL-padded
inline constexpr size_t producer_bytes = 32;
inline constexpr size_t off_checksum = 120;        // u64
inline constexpr int num_sections = 4;
inline constexpr const char* section_names[num_sections] = {"graph", "tensor index", "metadata", "weights"};

// XXH64 (Yann Collet's xxHash, 64-bit variant) of `n` bytes.
uint64_t xxhash64(const void* data, size_t n, uint64_t seed);

// The file checksum: XXH64 of bytes [128, end) seeded with XXH64 of bytes [0, 120) (seed 0), i.e. every
// byte but the checksum field itself. `file` must hold at least 128 bytes.
uint64_t file_checksum(std::span<const uint8_t> file);

}  // namespace spore::io::spore_layout
