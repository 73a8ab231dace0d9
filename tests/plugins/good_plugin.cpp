// Test custom-op plugin "testplugin" (domain "test.domain"), built against include/spore/custom_op_abi.h only.
//   scale2x(x){offset: float = 0}       y = 2 x + offset        f32, f64; fails on a NaN input; gradient: scale2x_grad
//   scale2x_grad(x, y, dy)              dx = 2 dy               f32, f64
//   rowsum(x){scale: int = 1}           y[i] = scale * sum_j x[i, j] for a 2-D x; y is 1-D   f32; own inference
// Kernels split work with the host's parallel_for, so results do not depend on the thread count.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "spore/custom_op_abi.h"

namespace {

double attr_f(const spore_kernel_context* c, const char* name) {
  for (int i = 0; i < c->num_attrs; ++i)
    if (strcmp(c->attrs[i].name, name) == 0) return c->attrs[i].kind == 1 ? c->attrs[i].f : (double)c->attrs[i].i;
  return 0.0;
}
int64_t attr_i(const spore_attr* attrs, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (strcmp(attrs[i].name, name) == 0) return attrs[i].i;
  return 0;
}
int64_t numel(const spore_tensor_type& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

template <typename T>
struct Scale2x {
  const T* x;
  T* y;
  T offset;
  static void run(void* user, int64_t begin, int64_t end) {
    auto* s = static_cast<Scale2x*>(user);
    for (int64_t i = begin; i < end; ++i) s->y[i] = T(2) * s->x[i] + s->offset;
  }
};

template <typename T>
int scale2x_kernel(const spore_kernel_context* c, char* err, size_t err_len) {
  const T* x = static_cast<const T*>(c->inputs[0].data);
  const int64_t n = numel(c->inputs[0].type);
  for (int64_t i = 0; i < n; ++i) {
    if (isnan(x[i])) {
      snprintf(err, err_len, "input has NaN at index %lld", (long long)i);
      return 1;
    }
  }
  Scale2x<T> s{x, static_cast<T*>(c->outputs[0].data), static_cast<T>(attr_f(c, "offset"))};
  c->parallel_for(c->host, n, 1000, &Scale2x<T>::run, &s);
  return 0;
}

template <typename T>
int scale2x_grad_kernel(const spore_kernel_context* c, char*, size_t) {
  const T* dy = static_cast<const T*>(c->inputs[2].data);
  T* dx = static_cast<T*>(c->outputs[0].data);
  for (int64_t i = 0, n = numel(c->inputs[2].type); i < n; ++i) dx[i] = T(2) * dy[i];
  return 0;
}

struct RowSum {
  const float* x;
  float* y;
  int64_t cols;
  float scale;
  static void run(void* user, int64_t begin, int64_t end) {
    auto* s = static_cast<RowSum*>(user);
    for (int64_t r = begin; r < end; ++r) {
      float acc = 0;
      for (int64_t j = 0; j < s->cols; ++j) acc += s->x[r * s->cols + j];
      s->y[r] = s->scale * acc;
    }
  }
};

int rowsum_kernel(const spore_kernel_context* c, char*, size_t) {
  const spore_tensor_type& t = c->inputs[0].type;
  RowSum s{static_cast<const float*>(c->inputs[0].data), static_cast<float*>(c->outputs[0].data), t.shape[1],
           static_cast<float>(attr_i(c->attrs, c->num_attrs, "scale"))};
  c->parallel_for(c->host, t.shape[0], 3, &RowSum::run, &s);
  return 0;
}

int rowsum_infer(const spore_tensor_type* ins, int32_t, const spore_attr* attrs, int32_t num_attrs,
                 spore_tensor_type* outs, int32_t, char* err, size_t err_len) {
  if (ins[0].ndim != 2) {
    snprintf(err, err_len, "rowsum needs a 2-D input, got %d-D", (int)ins[0].ndim);
    return 1;
  }
  if (attr_i(attrs, num_attrs, "scale") == 0) {
    snprintf(err, err_len, "scale must not be 0");
    return 1;
  }
  outs[0].dtype = ins[0].dtype;
  outs[0].ndim = 1;
  outs[0].shape[0] = ins[0].shape[0];  // -1 (unknown until run time) passes through
  return 0;
}

const spore_kernel_def scale2x_kernels[] = {
    {SPORE_F32, scale2x_kernel<float>, "scalar"},
    {SPORE_F64, scale2x_kernel<double>, "scalar"},
};
const spore_kernel_def scale2x_grad_kernels[] = {
    {SPORE_F32, scale2x_grad_kernel<float>, "scalar"},
    {SPORE_F64, scale2x_grad_kernel<double>, "scalar"},
};
const spore_kernel_def rowsum_kernels[] = {{SPORE_F32, rowsum_kernel, "scalar"}};
const spore_attr_def scale2x_attrs[] = {{"offset", 1, 0, 0.0}};
const spore_attr_def rowsum_attrs[] = {{"scale", 0, 1, 0.0}};

const spore_custom_op ops[] = {
    {"scale2x", "2 x + offset", 1, 1, SPORE_TRAIT_ELEMENTWISE, 1, scale2x_attrs, nullptr, 2, scale2x_kernels,
     "scale2x_grad"},
    {"scale2x_grad", "gradient of scale2x", 3, 1, 0, 1, scale2x_attrs, nullptr, 2, scale2x_grad_kernels, nullptr},
    {"rowsum", "scale * row sums of a matrix", 1, 1, 0, 1, rowsum_attrs, rowsum_infer, 1, rowsum_kernels, nullptr},
};

const spore_plugin plugin = {SPORE_CUSTOM_OP_ABI_VERSION, sizeof(spore_plugin), "testplugin", "1.0", "test.domain",
                             3, ops};

}  // namespace

extern "C" SPORE_PLUGIN_EXPORT const spore_plugin* spore_plugin_entry(void) { return &plugin; }
