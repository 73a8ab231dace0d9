// libFuzzer target: parse_spore on arbitrary bytes. A spore::Error is the expected way to reject input;
// a crash, a sanitizer report, any other exception or an internal-assertion error is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>

#include "base/error.h"
#include "io/model_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto g = spore::io::parse_spore(std::span<const uint8_t>(data, size), "fuzz.spore");
    // A graph that loads must also print (every constant's bytes are readable).
    (void)spore::print_graph(*g);
  } catch (const spore::Error& e) {
    if (e.code() == spore::ErrorCode::internal) {  // an invariant broken by user input
      std::fprintf(stderr, "internal error on fuzz input: %s\n", e.what());
      std::abort();
    }
  }
  return 0;
}
