// Reference kernels of the linalg family: plain triple loops in double.
#include "backend/reference/families.h"
#include "backend/reference/util.h"

namespace spore::reference {
namespace {

// NumPy matmul. 1-D operands are viewed as [1,K] / [K,1]; the output buffer holds batch*M*N elements
// whichever of those dims the inferred shape dropped.
void matmul_kernel(KernelContext& k) {
  const Tensor& ta = k.in(0);
  const Tensor& tb = k.in(1);
  const bool tra = k.attrs.b("transpose_a") && ta.rank() >= 2;
  const bool trb = k.attrs.b("transpose_b") && tb.rank() >= 2;
  Shape sa = ta.shape(), sb = tb.shape();
  if (sa.size() == 1) sa.insert(sa.begin(), 1);
  if (sb.size() == 1) sb.push_back(1);
  const int64_t m = tra ? sa.back() : sa[sa.size() - 2];
  const int64_t kk = tra ? sa[sa.size() - 2] : sa.back();
  const int64_t n = trb ? sb[sb.size() - 2] : sb.back();
  const Shape ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  Shape bo(std::max(ba.size(), bb.size()), 1);
  for (size_t i = 0; i < bo.size(); ++i) {
    const size_t ia = i + ba.size(), ib = i + bb.size();
    const int64_t da = ia >= bo.size() ? ba[ia - bo.size()] : 1;
    const int64_t db = ib >= bo.size() ? bb[ib - bo.size()] : 1;
    bo[i] = std::max(da, db);
  }
  const auto a = ta.to_doubles(), b = tb.to_doubles();
  const int64_t batches = shape_numel(bo);
  for (int64_t bi = 0; bi < batches; ++bi) {
    const auto idx = unravel(bi, bo);
    const int64_t oa = broadcast_index(idx, ba) * m * kk;
    const int64_t ob = broadcast_index(idx, bb) * kk * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t p = 0; p < kk; ++p) {
          const double av = a[oa + (tra ? p * m + i : i * kk + p)];
          const double bv = b[ob + (trb ? j * kk + p : p * n + j)];
          s += av * bv;
        }
        put(k.out(0), (bi * m + i) * n + j, s);
      }
    }
  }
}

void linear_kernel(KernelContext& k) {
  const int64_t in = k.in(1).dim(1), out = k.in(1).dim(0);
  const int64_t rows = in ? k.in(0).numel() / in : k.out(0).numel() / std::max<int64_t>(out, 1);
  const auto x = k.in(0).to_doubles(), w = k.in(1).to_doubles();
  const auto b = k.num_inputs() > 2 ? k.in(2).to_doubles() : std::vector<double>(out, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = 0;
      for (int64_t p = 0; p < in; ++p) s += x[r * in + p] * w[o * in + p];
      put(k.out(0), r * out + o, s + b[o]);
    }
  }
}

}  // namespace

void register_linalg(KernelRegistry& r) {
  r.add(Backend::reference, "matmul"_op, dtypes::floating, matmul_kernel);
  r.add(Backend::reference, "linear"_op, dtypes::floating, linear_kernel);
}

}  // namespace spore::reference
