// Attention fusion (inference): matmul(A, B) -> [add(mask)] -> softmax(last axis) -> matmul(., V) becomes one
// `attention` node (ops/attention.h) whose kernel keeps each block of scores in cache instead of writing the
// [..., Lq, Lk] scores and probabilities out and reading them back three times.
//
// A may be q scaled by a scalar constant c (div(q, c), mul(q, c), mul(c, q)), and the scores q k^T may be
// scaled the same way before the mask (as spore's MultiHeadAttention writes it); the scales move into the
// node's `scale` attribute and the scaling nodes go. B is k^T: a transpose swapping k's last two axes (k is passed
// as is), a matmul with transpose_b=true (B is k), or any other value (passed as k with k_transposed=true).
// The mask is the other operand of an add whose output has the scores' type (so it only broadcasts into them).
// Every absorbed intermediate must have exactly one use and not be a graph output; q, k and v must have equal
// ranks and leading dims (the op does not broadcast batches); the fused node must infer the final type.
//
// The fused kernel sums in another order than matmul + softmax + matmul (and applies the scale to the scores,
// not to q), so the pass runs only when PassOptions::inference is set: training graphs must stay bit-identical
// to eager mode. The attention node keeps the last matmul's node name and its output's value name.
//
// The match is one rule on the rewrite engine (rules.h), rooted at the last matmul; its check reads the
// scale constants, the transposes and the shapes.
#include <optional>
#include <string>

#include "passes/pass.h"
#include "passes/rules.h"

namespace spore {
namespace {

using rewrite::Match;
using rewrite::Rewriter;

bool same_leading_dims(const TensorType& a, const TensorType& b) {
  if (a.rank() != b.rank() || a.rank() < 2) return false;
  for (int i = 0; i + 2 < a.rank(); ++i)
    if (!(a.dims[i] == b.dims[i])) return false;
  return true;
}

bool swaps_last_two(const Node& t) {
  const Attrs a = normalized(&t);
  const std::vector<int64_t>& perm = a.ints("perm");
  const int64_t r = static_cast<int64_t>(perm.size());
  if (r < 2) return false;
  for (int64_t i = 0; i + 2 < r; ++i)
    if (perm[i] != i) return false;
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

// The factor of a scaling captured as `mul` (c) or `div` (1 / c): c must be a finite scalar, c != 0 to divide.
// 1 when neither was captured.
std::optional<double> factor(const Match& mt, const std::string& mul, const std::string& div) {
  if (mt.has(mul)) return scalar_constant(mt[mul]);
  if (!mt.has(div)) return 1.0;
  const auto c = scalar_constant(mt[div]);
  if (!c || *c == 0.0) return std::nullopt;
  return 1.0 / *c;
}

// q, or q scaled by a scalar constant; q k^T (k^T: transpose(k), k under transpose_b, or any value); the scores
// optionally scaled by a constant, then optionally masked.
constexpr const char* kQ = "{qm=mul(q, $cq) | qd=div(q, $cq_div) | q}";
constexpr const char* kK = "{~kt=transpose(k) | k}";

std::string attention_pattern() {
  const std::string mm = std::string("mm1=matmul(") + kQ + ", " + kK + ")";
  const std::string scores = "{sc=mul(" + mm + ", $cs) | sd=div(" + mm + ", $cs_div) | " + mm + "}";
  return "matmul(sm=softmax({add(s=" + scores + ", mask) | s=" + scores + "}), v)";
}

bool check_attention(Match& mt, Build& b) {
  const Node* sm = mt.node("sm");
  const Value* p = sm->output(0);
  const int rank = p->type.rank();
  if (rank < 2 || !is_floating(p->type.dtype)) return false;
  const int64_t axis = normalized(sm).i("axis");
  if (axis != -1 && axis != rank - 1) return false;
  const Attrs mm2 = normalized(mt.root);
  if (mm2.b("transpose_a") || mm2.b("transpose_b")) return false;
  // The scores (scaled or not) have the masked scores' type, and the mask their dtype.
  const Value* s = mt["s"];
  if (mt.has("mask") && (s->type != sm->input(0)->type || mt["mask"]->type.dtype != s->type.dtype)) return false;
  const Node* mm1 = mt.node("mm1");
  if ((mt.has("sc") || mt.has("sd")) && mm1->output(0)->type != s->type) return false;
  const auto score_scale = factor(mt, "cs", "cs_div");
  const auto q_scale = factor(mt, "cq", "cq_div");
  if (!score_scale || !q_scale) return false;
  if ((mt.has("qm") || mt.has("qd")) && mt["q"]->type != mm1->input(0)->type) return false;
  const Attrs a1 = normalized(mm1);
  if (a1.b("transpose_a")) return false;
  bool k_transposed = false;
  if (a1.b("transpose_b")) {
    if (mt.has("kt")) return false;  // B itself is k
  } else if (mt.has("kt")) {
    if (!swaps_last_two(*mt.node("kt"))) return false;
  } else {
    k_transposed = true;
  }
  const TensorType &q = mt["q"]->type, &k = mt["k"]->type, &v = mt["v"]->type;
  if (!same_leading_dims(q, k) || !same_leading_dims(q, v) || q.dtype != k.dtype || q.dtype != v.dtype) return false;
  b.attrs.set("scale", *q_scale * *score_scale);
  b.attrs.set("k_transposed", k_transposed);
  return true;
}

class FuseAttentionPass final : public Pass {
 public:
  std::string name() const override { return "fuse_attention"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    static const rewrite::RewriteSet rules = [] {
      rewrite::RewriteSet rs("fuse_attention", registry_facts());
      // A mask of a dtype or rank the op rejects leaves the subgraph alone (the node is not built).
      rs.add(replace_rule("attention", attention_pattern(), "attention(q, k, v, mask?)",
                          [](Match& mt, Rewriter&, Build& b) { return check_attention(mt, b); }));
      return rs;
    }();
    return rewrite::apply_greedy(g, rules).applied > 0;
  }
};

}  // namespace

std::unique_ptr<Pass> make_fuse_attention_pass() { return std::make_unique<FuseAttentionPass>(); }

}  // namespace spore
