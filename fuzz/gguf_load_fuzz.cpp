// libFuzzer target: GgufFile::parse on arbitrary bytes, then every tensor viewed and dequantized. A spore::Error is
// the expected way to reject input; a crash, a sanitizer report, any other exception or an internal-assertion error
// is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "base/error.h"
#include "io/gguf/gguf.h"

namespace {
void check(const spore::Error& e) {
  if (e.code() == spore::ErrorCode::internal) {  // an invariant broken by user input
    std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
    std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    spore::io::GgufFile f = spore::io::GgufFile::parse(data, size, "fuzz.gguf");
    for (const auto& t : f.tensors()) {
      // Every accepted tensor's bytes lie inside the input: reading them all must be safe.
      try {
        (void)f.dequantize_f32(t.name);
      } catch (const spore::Error& e) {
        check(e);
      }
      try {
        (void)f.view(t.name);
      } catch (const spore::Error& e) {
        check(e);
      }
    }
    for (const auto& [key, v] : f.metadata()) (void)f.get_float_or(key + ".missing", 0);
  } catch (const spore::Error& e) {
    check(e);
  }
  return 0;
}
