// spore info: what this build is and what it will use on this machine.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "base/thread_pool.h"
#include "tools/spore/commands.h"

namespace spore::cli {

int cmd_info(int argc, char** argv) {
  CLI::App app("spore info: version, build type, CPU ISA in use, threads, library versions", "spore info");
  bool json = false;
  int threads = 0;
  app.add_flag("--json", json, "print JSON");
  app.add_option("--threads", threads, "thread count to report (default: all cores)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  set_threads(threads);
  const BackendInfo bi = backend_info();
  nlohmann::json j = {{"version", version()},
                      {"build_type", build_type()},
                      {"simd_target", bi.simd_target},
                      {"cpu_features", bi.cpu_features},
                      {"threads", num_threads()},
                      {"hardware_threads", hardware_threads()},
                      {"onednn", bi.onednn_version},
                      {"kernels", bi.kernels},
                      {"ops", op_registry().all().size()}};
  if (json) {
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("spore %s (%s build)\n", version().c_str(), build_type().c_str());
  std::printf("  simd target   %s (chosen at run time)\n", bi.simd_target.c_str());
  std::printf("  cpu features  %s\n", bi.cpu_features.c_str());
  std::printf("  threads       %d of %d\n", num_threads(), hardware_threads());
  std::printf("  oneDNN        %s\n", bi.onednn_version.c_str());
  std::printf("  kernels       %s\n", bi.kernels.c_str());
  std::printf("  ops           %zu registered\n", op_registry().all().size());
  return 0;
}

}  // namespace spore::cli
