/* spore custom-op plugin ABI, version 1 — plain C so a plugin can be built by any compiler, separately from spore.
 *
 * A plugin is a shared library that exports ONE symbol:
 *
 *     SPORE_PLUGIN_EXPORT const spore_plugin* spore_plugin_entry(void);
 *
 * spore (`spore::load_custom_ops(path)`, `--custom-ops lib.so`) dlopens the library, calls the entry, checks
 * `abi_version == SPORE_CUSTOM_OP_ABI_VERSION` and `struct_size`, then registers every op in `ops` with the same
 * registry as the built-in ops: the op then works in eager and graph mode, is saved in `.spore` files by name, and
 * is imported from ONNX nodes whose domain is `domain` (or "spore.custom" when NULL).
 *
 * Rules: tensors passed to kernels are dense, row-major, and live only for the call. The plugin must not keep
 * pointers to them. Callbacks return 0 on success; on failure they write a message into `err` (at most
 * `err_len` bytes, NUL-terminated) and return non-zero, and spore raises it as an error naming the node.
 * Everything the plugin returns (names, arrays) must stay valid until the process exits (plugins are never
 * unloaded).
 */
#ifndef SPORE_CUSTOM_OP_ABI_H
#define SPORE_CUSTOM_OP_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPORE_CUSTOM_OP_ABI_VERSION 1u
#define SPORE_MAX_DIMS 8

#if defined(_WIN32)
#define SPORE_PLUGIN_EXPORT __declspec(dllexport)
#else
#define SPORE_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Values match spore::DType. */
typedef enum spore_dtype {
  SPORE_F64 = 0,
  SPORE_F32 = 1,
  SPORE_F16 = 2,
  SPORE_BF16 = 3,
  SPORE_I64 = 4,
  SPORE_I32 = 5,
  SPORE_I8 = 6,
  SPORE_U8 = 7,
  SPORE_BOOL = 8
} spore_dtype;

/* Traits (bit flags); meanings as spore::Trait. ELEMENTWISE ops may be fused into elementwise chains only by
 * name-preserving passes (spore never decomposes a custom op). */
#define SPORE_TRAIT_ELEMENTWISE (1u << 0)
#define SPORE_TRAIT_INPLACE_OK (1u << 5)
#define SPORE_TRAIT_NONDETERMINISTIC (1u << 8)
#define SPORE_TRAIT_NO_GRAD (1u << 9)

typedef struct spore_tensor_type {
  int32_t dtype; /* spore_dtype */
  int32_t ndim;
  int64_t shape[SPORE_MAX_DIMS];
} spore_tensor_type;

typedef struct spore_tensor {
  spore_tensor_type type;
  void* data; /* dense row-major; const for inputs */
} spore_tensor;

/* Attributes of the node (integers and floats by name); NULL/0 when the op declares none. */
typedef struct spore_attr {
  const char* name;
  int32_t kind; /* 0 = int64, 1 = float64 */
  int64_t i;
  double f;
} spore_attr;

/* Work-splitting service from the host: runs fn(user, begin, end) over [0, n) on spore's thread pool in
 * chunks of `grain` elements. Chunk boundaries depend only on n and grain (never on the thread count), so a
 * kernel whose chunks are independent is deterministic across thread counts. */
typedef void (*spore_range_fn)(void* user, int64_t begin, int64_t end);
typedef void (*spore_parallel_for_fn)(void* host, int64_t n, int64_t grain, spore_range_fn fn, void* user);

typedef struct spore_kernel_context {
  int32_t num_inputs;
  const spore_tensor* inputs;
  int32_t num_outputs;
  spore_tensor* outputs; /* preallocated by spore with the inferred types */
  int32_t num_attrs;
  const spore_attr* attrs;
  int32_t num_threads;
  spore_parallel_for_fn parallel_for;
  void* host;
} spore_kernel_context;

/* Shape/dtype inference: fill outs[0..num_outputs) from the inputs and attributes. NULL = every output has
 * input 0's type. outs[] arrive zeroed except dtype (input 0's). In graph mode a dim unknown until run time
 * (symbolic, e.g. a batch dim) is -1 in `ins`; an output dim set to -1 takes input 0's unknown dim on the
 * same axis. */
typedef int (*spore_infer_fn)(const spore_tensor_type* ins, int32_t num_inputs, const spore_attr* attrs,
                              int32_t num_attrs, spore_tensor_type* outs, int32_t num_outputs, char* err,
                              size_t err_len);
typedef int (*spore_kernel_fn)(const spore_kernel_context* ctx, char* err, size_t err_len);

typedef struct spore_kernel_def {
  int32_t dtype;    /* dispatch dtype: input 0's */
  spore_kernel_fn fn;
  const char* impl; /* shown by the profiler and `spore ops` ("scalar", "avx2", ...) */
} spore_kernel_def;

typedef struct spore_attr_def {
  const char* name;
  int32_t kind; /* 0 = int64, 1 = float64 */
  int64_t default_i;
  double default_f;
} spore_attr_def;

typedef struct spore_custom_op {
  const char* name; /* unique across spore's built-in ops and every loaded plugin */
  const char* doc;
  int32_t num_inputs;
  int32_t num_outputs;
  uint32_t traits; /* SPORE_TRAIT_* */
  int32_t num_attrs;
  const spore_attr_def* attr_defs;
  spore_infer_fn infer; /* may be NULL */
  int32_t num_kernels;
  const spore_kernel_def* kernels;
  /* Optional gradient: the name of another op (in this plugin or built in) that takes
   * (inputs..., outputs..., output_grads...) and returns one gradient per input. NULL = not differentiable. */
  const char* grad_op;
} spore_custom_op;

typedef struct spore_plugin {
  uint32_t abi_version; /* SPORE_CUSTOM_OP_ABI_VERSION the plugin was built against */
  uint32_t struct_size; /* sizeof(spore_plugin) as the plugin saw it */
  const char* name;     /* plugin name, stored in .spore files next to each op that needs it */
  const char* version;
  const char* domain;   /* ONNX domain of its ops; NULL = "spore.custom" */
  int32_t num_ops;
  const spore_custom_op* ops;
} spore_plugin;

typedef const spore_plugin* (*spore_plugin_entry_fn)(void);
#define SPORE_PLUGIN_ENTRY_SYMBOL "spore_plugin_entry"

#ifdef __cplusplus
}
#endif

#endif /* SPORE_CUSTOM_OP_ABI_H */
