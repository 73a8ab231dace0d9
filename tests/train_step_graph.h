#pragma once
// A training step of a `layers`-deep MLP (forward, backward, SGD update), traced the way graph mode traces a
// train::Model step: batch (x, y) and parameters (w, b per layer) in; the loss, [the gradients,] and the new
// parameters out. Shared by the memory-planning and rematerialization tests.
#include <memory>
#include <span>
#include <vector>

#include "autodiff/autodiff.h"
#include "ops/ops.h"
#include "runtime/trace.h"

namespace spore {

inline std::unique_ptr<Graph> mlp_training_step(int layers, int64_t batch, int64_t width, bool grads_out = false) {
  std::vector<TensorType> types{TensorType::of(DType::f32, {batch, width}), TensorType::of(DType::f32, {batch, width})};
  for (int l = 0; l < layers; ++l) {
    types.push_back(TensorType::of(DType::f32, {width, width}));
    types.push_back(TensorType::of(DType::f32, {width}));
  }
  return trace_function(
      [layers, grads_out](std::span<const Tensor> in) {
        const Tensor x = in[0], y = in[1];
        const std::span<const Tensor> params = in.subspan(2);
        auto [loss, grads] = autodiff::value_and_grad(
            [&](std::span<const Tensor> p) {
              Tensor h = x;
              for (int l = 0; l < layers; ++l) {
                h = ops::add(ops::matmul(h, p[2 * l]), p[2 * l + 1]);
                if (l + 1 < layers) h = ops::relu(h);
              }
              const Tensor d = ops::sub(h, y);
              return ops::reduce_mean(ops::mul(d, d));
            },
            params);
        std::vector<Tensor> out{loss};
        if (grads_out)
          for (size_t i = 0; i < grads.size(); ++i) out.push_back(grads[i]);
        for (size_t i = 0; i < params.size(); ++i) out.push_back(ops::sub(params[i], ops::mul(grads[i], 0.01)));
        return out;
      },
      types);
}

}  // namespace spore
