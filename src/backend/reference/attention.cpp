// Reference kernel of the fused attention op (ops/attention.h): the definition written out in double, one
// (batch, query row) at a time: scores = scale * q k^T (+ mask), max-subtracted softmax, times v; the
// result is rounded to the output dtype once.
#include <cmath>
#include <vector>

#include "backend/reference/families.h"
#include "backend/reference/util.h"
#include "ops/attention.h"

namespace spore::reference {
namespace {

void attention_kernel(KernelContext& k) {
  const Tensor& q = k.in(0);
  const Tensor& kk = k.in(1);
  const Tensor& v = k.in(2);
  const Tensor* mask = k.num_inputs() > 3 ? &k.in(3) : nullptr;
  const attention::Geometry g = attention::geometry(q.shape(), kk.shape(), v.shape(), k.attrs.b("k_transposed"));
  Shape scores_shape = q.shape();
  scores_shape.back() = g.lk;
  attention::MaskStrides ms;
  if (mask) ms = attention::mask_strides(mask->shape(), scores_shape);
  const double scale = k.attrs.f("scale");
  std::vector<double> s(static_cast<size_t>(g.lk));
  for (int64_t b = 0; b < g.batch; ++b) {
    const int64_t moff = mask ? ms.batch_offset(b) : 0;
    for (int64_t i = 0; i < g.lq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < g.lk; ++j) {
        double dot = 0;
        for (int64_t p = 0; p < g.d; ++p) {
          const int64_t ki = g.k_transposed ? (b * g.d + p) * g.lk + j : (b * g.lk + j) * g.d + p;
          dot += get(q, (b * g.lq + i) * g.d + p) * get(kk, ki);
        }
        double x = scale * dot;
        if (mask) x += get(*mask, moff + i * ms.row + j * ms.col);
        s[j] = x;
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (int64_t j = 0; j < g.lk; ++j) {
        s[j] = std::exp(s[j] - mx);
        sum += s[j];
      }
      for (int64_t c = 0; c < g.dv; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < g.lk; ++j) acc += s[j] * get(v, (b * g.lk + j) * g.dv + c);
        put(k.out(0), (b * g.lq + i) * g.dv + c, acc / sum);
      }
    }
  }
}

}  // namespace

void register_attention(KernelRegistry& r) {
  r.add(Backend::reference, "attention"_op, dtypes::floating, attention_kernel);
}

}  // namespace spore::reference
