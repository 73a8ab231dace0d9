// Writes the fuzzer's seed corpus into DIR: each given text-IR file as a .spore, plus a graph with
// constants of every dtype, a scalar, an empty tensor and a symbolic batch.
//   spore_fuzz_seeds DIR [FILE.ir ...]
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "io/model_file.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [FILE.ir ...]\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    int written = 0;
    auto emit = [&](const spore::Graph& g, const std::string& stem) {
      spore::io::save_spore(g, (dir / (stem + ".spore")).string(), {{"source", stem}});
      ++written;
    };
    for (int i = 2; i < argc; ++i) {
      std::ifstream in(argv[i], std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      emit(*spore::parse_graph(ss.str(), argv[i]), std::filesystem::path(argv[i]).stem().string());
    }
    const char* every_dtype = R"(graph @seed(%x: f32[batch,2]) {
  %w = constant() : f32[2,3] = hex"0000803f0000004000004040000080400000a0400000c040"
  %y = matmul(%x, %w) : f32[batch,3] !name="fc"
  %a = constant() : f64[2] = hex"000000000000f03f0000000000000040"
  %b = constant() : f16[2] = hex"003c0040"
  %c = constant() : bf16[2] = hex"803f0040"
  %d = constant() : i64[] = hex"0700000000000000"
  %e = constant() : i32[0,3] = hex""
  %f = constant() : i8[3] = hex"ff0102"
  %g = constant() : u8[1] = hex"fe"
  %h = constant() : bool[2] = hex"0100"
  return %y, %a, %b, %c, %d, %e, %f, %g, %h
}
)";
    emit(*spore::parse_graph(every_dtype, "every_dtype"), "every_dtype");
    std::printf("%d seeds in %s\n", written, dir.c_str());
  } catch (const spore::Error& e) {
    std::fprintf(stderr, "spore_fuzz_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
