#include <gtest/gtest.h>

#include "runtime/runtime.h"

namespace spore::testing {
// Only this file is compiled with the checkout's path (tests/CMakeLists.txt), so the other test files' objects do not
// depend on where the repository is and ccache serves them to every clone on the machine.
const char* source_dir() { return SPORE_TEST_SOURCE_DIR; }
}  // namespace spore::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  spore::init();
  return RUN_ALL_TESTS();
}
