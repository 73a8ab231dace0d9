#include <gtest/gtest.h>

#include "runtime/runtime.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  spore::init();
  return RUN_ALL_TESTS();
}
