// Malformed custom-op plugins, one per BAD_* definition (tests/CMakeLists.txt builds each): the loader must
// reject every one with an error naming the library and the op, and register nothing.
#include "spore/custom_op_abi.h"

namespace {

int copy_kernel(const spore_kernel_context*, char*, size_t) { return 0; }
const spore_kernel_def good_kernels[] = {{SPORE_F32, copy_kernel, "scalar"}};

#if defined(BAD_BAD_DTYPE)
const spore_kernel_def kernels[] = {{42, copy_kernel, "scalar"}};
#else
const spore_kernel_def kernels[] = {{SPORE_F32, copy_kernel, "scalar"}};
#endif

#if defined(BAD_CLASH_BUILTIN)
#define OP_NAME "relu"
#elif defined(BAD_CLASH_PLUGIN)
#define OP_NAME "scale2x"  // tests/plugins/good_plugin.cpp has it
#elif defined(BAD_NULL_NAME)
#define OP_NAME nullptr
#else
#define OP_NAME "bad_op_ok_name"
#endif

#if defined(BAD_NO_KERNELS)
#define NUM_KERNELS 0
#else
#define NUM_KERNELS 1
#endif

// A valid op first: a later bad op must not leave it registered.
const spore_custom_op ops[] = {
    {"bad_plugin_first_op", nullptr, 1, 1, 0, 0, nullptr, nullptr, 1, good_kernels, nullptr},
    {OP_NAME, nullptr, 1, 1, 0, 0, nullptr, nullptr, NUM_KERNELS, kernels, nullptr},
};

#if defined(BAD_ABI)
#define ABI_VERSION 99u
#else
#define ABI_VERSION SPORE_CUSTOM_OP_ABI_VERSION
#endif

const spore_plugin plugin = {ABI_VERSION, sizeof(spore_plugin), "badplugin", "0", nullptr, 2, ops};

}  // namespace

#if defined(BAD_NO_ENTRY)
// The entry under a wrong name: spore finds no spore_plugin_entry.
extern "C" SPORE_PLUGIN_EXPORT const spore_plugin* spore_plugin_entry_v2(void) { return &plugin; }
#else
extern "C" SPORE_PLUGIN_EXPORT const spore_plugin* spore_plugin_entry(void) { return &plugin; }
#endif
