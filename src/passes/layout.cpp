// Layout: chains of convolutions run in oneDNN's blocked layout (inference graphs).
//
// oneDNN's AVX2 convolutions compute in nChw8c: channels in blocks of 8 innermost. A plain NCHW conv2d therefore
// reorders its input into the blocked layout and its output back, on every call. Measured on the ResNet-style
// CNN at batch 32, these activation reorders were 18% of the run.
//
// This pass keeps the activations blocked between the convolutions of a chain. The blocked tensor is an ordinary
// [N, C/8, H, W, 8] tensor. conv2d_fused's src_layout / dst_layout attributes tell the kernel to hand those bytes
// to oneDNN as nChw8c (ops/fused.h). The reorders become explicit reshape + transpose nodes: to_blocked where an
// NCHW value enters the chain and from_blocked where a chain's value leaves it. The residual add and the activation
// of conv2d_fused are elementwise, so they run on the blocked buffers unchanged.
//
// Which convs:
// - conv2d_fused (or a plain conv2d, which becomes a conv2d_fused without epilogue) in f32 with groups 1,
//   depthwise (groups = C = O), or groups of whole 8-channel blocks (dilation 1), pool none, a static 4-D output
//   whose channels divide by 8;
// - linked by a data edge (input or residual) to another such conv, or through a pool or a channel concat
//   (Inception's lone 1x1 branch), or alone over <= 4 input channels (a stem; otherwise a lone conv would only
//   trade oneDNN's internal reorders for our own).
// Between the convs, max/avg pools of a chain value pool the blocked tensor (their `layout` = nchw8c, the plain
// kernels' bits), a channel concat of chain values concatenates the blocked twins along C/8, and squeeze-excite's
// x * s or s * x (s [N, C, 1, 1]) multiplies the blocked x by s reshaped to [N, C/8, 1, 1, 8] (or by s's blocked twin
// when the FCs that make s are a chain of their own).
// A conv takes a blocked input only when that input is already blocked (produced inside the chain). The first
// conv of a chain (e.g. the 3-channel stem) reads NCHW, except a depthwise one, whose input is reordered. A global mean/sum/max over H, W of a chain's exit reduces
// the blocked tensor directly (its [N, C/8, 8] result is [N, C]), so a classifier head needs no reorder.
//
// Bits: oneDNN computes the same blocked convolution either way, the reorders are exact copies and the
// epilogue is elementwise. So outputs equal the unblocked oneDNN path's. The direct AVX2 conv that small
// problems may take otherwise sums in another order, so this pass runs only on inference graphs.
#include <algorithm>
#include <map>

#include "ops/fused.h"
#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {
namespace {

using V = std::vector<int64_t>;

bool static_dims(const TensorType& t, int rank) {
  if (t.rank() != rank) return false;
  for (const Dim& d : t.dims)
    if (!d.is_static()) return false;
  return true;
}

// conv2d (taken as a conv2d_fused without epilogue) or conv2d_fused.
bool is_candidate(const Node& n) {
  if ((n.op != "conv2d_fused"_op && n.op != "conv2d"_op) || n.outputs.size() != 1) return false;
  const Attrs& a = n.attrs;
  // groups 1, depthwise (groups = C = O: backend/cpu/depthwise_blocked.h), or groups of whole channel blocks
  // (C/groups and O/groups multiples of 8, dilation 1: regnet's 8-channel groups, direct_blocked.h)
  const int64_t groups = a.i("groups");
  if (groups != 1) {
    if (!static_dims(n.input(0)->type, 4) || !static_dims(n.output(0)->type, 4)) return false;
    const int64_t c = n.input(0)->type.dims[1].size, o = n.output(0)->type.dims[1].size;
    const bool depthwise = groups == c && groups == o;
    const auto& dil = a.ints("dilation");
    const bool whole_blocks = c % groups == 0 && o % groups == 0 && (c / groups) % fused::kChannelBlock == 0 &&
                              (o / groups) % fused::kChannelBlock == 0 &&
                              std::all_of(dil.begin(), dil.end(), [](int64_t d) { return d == 1; });
    if (!depthwise && !whole_blocks) return false;
  }
  if (n.op == "conv2d_fused"_op && (a.s("pool") != "none" || a.s("src_layout") != "nchw" || a.s("dst_layout") != "nchw"))
    return false;
  const TensorType& y = n.output(0)->type;
  return y.dtype == DType::f32 && static_dims(y, 4) && y.dims[1].size % fused::kChannelBlock == 0 &&
         static_dims(n.input(0)->type, 4);
}

class LayoutPass final : public Pass {
 public:
  std::string name() const override { return "layout"; }
  int min_opt_level() const override { return 1; }

  bool run(Graph& g, const PassOptions& opts) override {
    if (!opts.inference) return false;
    std::vector<Node*> cands;
    std::map<const Node*, int> index;
    for (Node* n : g.nodes())
      if (!n->dead && is_candidate(*n)) {
        index[n] = static_cast<int>(cands.size());
        cands.push_back(n);
      }
    // Nodes the chain passes through when their input is blocked (norm_or_unary below): a batch norm, an elementwise
    // op of one input. Edges between convs are followed through runs of them (DenseNet's concat -> BN -> relu -> conv).
    const auto pass_through = [](const Node* n) {
      if (n->dead || n->inputs.empty() || n->outputs.size() != 1) return false;
      if (n->op == "batch_norm"_op) return n->inputs.size() == 5;
      const OpDef& def = op_registry().get(n->op);
      return n->inputs.size() == 1 && def.fusion == FusionKind::elementwise && def.traits.has(Trait::elementwise);
    };
    const auto producer_of = [&](const Value* v) -> const Node* {
      const Node* p = v->producer;
      while (p && pass_through(p)) p = p->input(0)->producer;
      return p;
    };
    // The candidate users of v, through pass-through nodes.
    const auto users_of = [&](const Value* v, std::vector<size_t>& out) {
      std::vector<const Value*> todo{v};
      while (!todo.empty()) {
        const Value* cur = todo.back();
        todo.pop_back();
        for (const Use& u : cur->uses) {
          if (index.count(u.user)) out.push_back(static_cast<size_t>(index[u.user]));
          else if (u.index == 0 && pass_through(u.user)) todo.push_back(u.user->output(0));
        }
      }
    };
    // Keep the convs that share a data edge with another candidate.
    std::vector<bool> keep(cands.size(), false);
    for (size_t i = 0; i < cands.size(); ++i)
      for (const Value* in : cands[i]->inputs) {
        const Node* p = producer_of(in);
        if (p && index.count(p)) keep[i] = keep[static_cast<size_t>(index[p])] = true;
      }
    // ... or through a pool or a channel concat (GoogLeNet's Inception blocks: a branch's lone 1x1 conv meets the
    // others only in their concat; DenseNet's transitions meet their block only through its last concat).
    for (const Node* n : g.nodes()) {
      if (n->dead || (n->op != "max_pool2d"_op && n->op != "avg_pool2d"_op && n->op != "concat"_op)) continue;
      std::vector<size_t> touching;
      for (const Value* in : n->inputs)
        if (const Node* p = producer_of(in); p && index.count(p)) touching.push_back(static_cast<size_t>(index[p]));
      for (const Value* out : n->outputs) users_of(out, touching);
      if (touching.size() >= 2)
        for (size_t i : touching) keep[i] = true;
    }
    // ... or alone, where it reads few channels (an RGB stem): its plain kernel is im2col + one sgemm per image,
    // which runs on one thread at batch 1 (googlenet's 7x7 stem in an int8 model, where no other conv is f32: 2.7 ms
    // at 1 and 2 threads), while the direct kernel reads NCHW into the blocked layout in row tasks, and a max pool
    // after it pools the blocked tensor.
    for (size_t i = 0; i < cands.size(); ++i)
      if (cands[i]->attrs.i("groups") == 1 && cands[i]->input(0)->type.dims[1].size <= 4) keep[i] = true;
    if (std::none_of(keep.begin(), keep.end(), [](bool b) { return b; })) return false;

    std::map<const Value*, Value*> blocked;  // NCHW value -> its blocked twin
    const auto to_blocked = [&](Value* v) -> Value* {
      if (auto it = blocked.find(v); it != blocked.end()) return it->second;
      const TensorType& t = v->type;
      const int64_t n = t.dims[0].size, c = t.dims[1].size, h = t.dims[2].size, w = t.dims[3].size;
      Node* r = build_node(g, "reshape"_op, {v}, Attrs{{"shape", V{n, c / fused::kChannelBlock, fused::kChannelBlock, h, w}}});
      Node* tr = build_node(g, "transpose"_op, {r->output(0)}, Attrs{{"perm", V{0, 1, 3, 4, 2}}});
      blocked[v] = tr->output(0);
      return tr->output(0);
    };
    // Registers `b` (blocked) as the twin of n's output, which gets a reorder back for its NCHW users, and
    // erases n.
    const auto replace_blocked = [&](Node* n, Node* b) {
      Value* y = n->output(0);
      const TensorType& t = y->type;
      Node* tr = build_node(g, "transpose"_op, {b->output(0)}, Attrs{{"perm", V{0, 1, 4, 2, 3}}});
      Node* r = build_node(g, "reshape"_op, {tr->output(0)},
                          Attrs{{"shape", V{t.dims[0].size, t.dims[1].size, t.dims[2].size, t.dims[3].size}}});
      const std::string keep_name = y->name;
      g.replace_all_uses(y, r->output(0));
      g.erase_node(n);
      if (!keep_name.empty()) {
        g.rename_value(y, fmt::format("{}.nchw{}", keep_name, y->id));  // frees the name
        g.rename_value(r->output(0), keep_name);
        g.rename_value(b->output(0), keep_name + ".nchw8c");
      }
      blocked[r->output(0)] = b->output(0);
    };
    // Squeeze-excite's rescale x * s (s: [N, C, 1, 1], the sigmoid of the pooled FCs) of a chain value stays in the
    // chain: s reshaped to [N, C/8, 1, 1, 8] (no copy: H = W = 1) broadcasts over the blocked x, so the projection
    // conv that follows reads blocked input instead of a reorder of x. Same products, so the same bits.
    const auto se_rescale = [&](Node* n) {
      if (n->op != "mul"_op || n->inputs.size() != 2 || n->outputs.size() != 1) return false;
      // x is the blocked operand of the output's shape; s may be a chain value too (torchvision writes scale * x, and
      // the FCs that make the scale form a chain of their own when their channels divide by 8).
      const auto is_x = [&](int i) {
        const Value* v = n->input(i);
        return blocked.count(v) && v->type.dtype == DType::f32 && static_dims(v->type, 4) &&
               static_dims(n->output(0)->type, 4) && v->type.dims == n->output(0)->type.dims;
      };
      const int xi = is_x(0) ? 0 : is_x(1) ? 1 : -1;
      if (xi < 0) return false;
      Value* x = n->input(xi);
      Value* sv = n->input(1 - xi);
      const TensorType& xt = x->type;
      const TensorType& st = sv->type;
      if (st.dtype != DType::f32 || !static_dims(st, 4) || st.dims[0].size != xt.dims[0].size ||
          st.dims[1].size != xt.dims[1].size || st.dims[2].size != 1 || st.dims[3].size != 1)
        return false;
      const int64_t nb = xt.dims[0].size, c = xt.dims[1].size;
      // s's blocked twin where it has one ([N, C/8, 1, 1, 8] already), else s reshaped.
      Value* s_blocked =
          blocked.count(sv) ? blocked[sv]
                            : build_node(g, "reshape"_op, {sv},
                                         Attrs{{"shape", V{nb, c / fused::kChannelBlock, 1, 1, fused::kChannelBlock}}})
                                  ->output(0);
      std::vector<Value*> ins{blocked[x], s_blocked};
      if (xi == 1) std::swap(ins[0], ins[1]);
      replace_blocked(n, build_node(g, "mul"_op, std::move(ins), {}, n->name));
      return true;
    };
    // Pooling of a chain value (GoogLeNet's and SqueezeNet's max pools, DenseNet's transitions) pools the blocked
    // tensor (layout "nchw8c": the plain kernels' bits, backend/cpu/conv.cpp); a channel concat of chain values
    // (Inception's branches, DenseNet's blocks) concatenates their blocked twins along C/8.
    const auto pool_or_concat = [&](Node* n) {
      if (n->outputs.size() != 1 || n->inputs.empty() || n->output(0)->type.dtype != DType::f32 ||
          !static_dims(n->output(0)->type, 4))
        return false;
      if ((n->op == "max_pool2d"_op || n->op == "avg_pool2d"_op) && n->inputs.size() == 1 && blocked.count(n->input(0)) &&
          (!n->attrs.has("layout") || n->attrs.s("layout") == "nchw")) {
        Attrs a = n->attrs;
        a.set("layout", std::string("nchw8c"));
        replace_blocked(n, build_node(g, n->op, {blocked[n->input(0)]}, a, n->name));
        return true;
      }
      if (n->op == "concat"_op) {
        int64_t axis = n->attrs.i("axis");
        if (axis < 0) axis += 4;
        if (axis != 1) return false;
        std::vector<Value*> ins;
        for (Value* v : n->inputs) {
          if (!blocked.count(v)) return false;
          ins.push_back(blocked[v]);
        }
        replace_blocked(n, build_node(g, "concat"_op, std::move(ins), Attrs{{"axis", int64_t{1}}}, n->name));
        return true;
      }
      return false;
    };
    // A pre-activation batch norm of a chain value and an elementwise op of one input (DenseNet's BN -> relu between
    // its blocks' concats and convs: each dense layer reordered the concat to NCHW for them, and its 1x1 then read
    // NCHW) run on the blocked tensor: the batch norm with layout "nchw8c" (its channel's fma per element, the NCHW
    // kernel's bits), the elementwise op as it is (layout-blind).
    const auto norm_or_unary = [&](Node* n) {
      if (n->outputs.size() != 1 || n->inputs.empty() || !blocked.count(n->input(0)) ||
          n->output(0)->type.dtype != DType::f32 || n->input(0)->type.dtype != DType::f32 ||
          !static_dims(n->output(0)->type, 4) || n->output(0)->type.dims != n->input(0)->type.dims || !pass_through(n))
        return false;
      if (n->op != "batch_norm"_op) {
        replace_blocked(n, build_node(g, n->op, {blocked[n->input(0)]}, n->attrs, n->name));
        return true;
      }
      if (n->attrs.has("layout") && n->attrs.s("layout") != "nchw") return false;
      std::vector<Value*> ins = n->inputs;
      ins[0] = blocked[n->input(0)];
      Attrs a = n->attrs;
      a.set("layout", std::string("nchw8c"));
      replace_blocked(n, build_node(g, "batch_norm"_op, std::move(ins), a, n->name));
      return true;
    };
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead) continue;
      const auto at = index.find(n);
      if (at == index.end()) {
        if (!se_rescale(n) && !pool_or_concat(n)) norm_or_unary(n);
        continue;
      }
      const size_t i = static_cast<size_t>(at->second);
      if (!keep[i]) continue;
      const fused::Operands o = n->op == "conv2d_fused"_op
                                    ? fused::operands(n->attrs, static_cast<int>(n->inputs.size()))
                                    : fused::Operands{n->inputs.size() > 2 ? 2 : -1, -1};
      std::vector<Value*> ins = n->inputs;
      Attrs a = n->attrs;
      // A depthwise conv reads only blocked input: an NCHW one is reordered into the chain.
      const bool depthwise = n->attrs.i("groups") != 1 && n->attrs.i("groups") == n->input(0)->type.dims[1].size &&
                             n->attrs.i("groups") == n->output(0)->type.dims[1].size;
      const bool src_blocked = blocked.count(ins[0]) != 0 || depthwise;
      if (src_blocked) {
        ins[0] = to_blocked(ins[0]);  // its blocked twin (made here only for a depthwise conv's NCHW input)
        a.set("src_layout", std::string("nchw8c"));
      }
      if (o.residual >= 0) ins[static_cast<size_t>(o.residual)] = to_blocked(ins[static_cast<size_t>(o.residual)]);
      a.set("dst_layout", std::string("nchw8c"));
      if (opts.fast_conv) a.set("conv_algo", std::string("fast"));
      replace_blocked(n, build_node(g, "conv2d_fused"_op, std::move(ins), a, n->name));  // a plain conv2d: no epilogue
    }
    // A spatial reduction of a chain's exit (the global mean before a classifier) reduces the blocked tensor over H, W
    // instead: [N, C/8, H, W, 8] -> [N, C/8, 8] is [N, C] in channel order, so only a reshape follows and the reorder
    // back to NCHW is left without users (dce removes it).
    for (Node* n : std::vector<Node*>(g.nodes())) {
      if (n->dead || n->inputs.size() != 1 || !blocked.count(n->input(0))) continue;
      const bool gap = n->op == "global_avg_pool"_op;
      // A reduction over `axes` (reduce_sum, reduce_mean, ...): the same op reduces the blocked tensor's H, W.
      const OpDef& def = op_registry().get(n->op);
      const bool reduce = def.fusion == FusionKind::reduce && def.traits.has(Trait::reduction) && def.find_attr("axes") &&
                          def.find_attr("keepdims");
      if (!gap && !reduce) continue;
      if (reduce) {
        std::vector<int64_t> axes = n->attrs.ints("axes");
        for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
        std::sort(axes.begin(), axes.end());
        if (axes != V{2, 3}) continue;
      }
      Value* y = n->output(0);
      if (!static_dims(y->type, y->type.rank())) continue;
      Node* red = build_node(g, gap ? "reduce_mean"_op : n->op, {blocked[n->input(0)]},
                             Attrs{{"axes", V{2, 3}}, {"keepdims", false}}, n->name);
      V shape;
      for (const Dim& d : y->type.dims) shape.push_back(d.size);
      Node* r = build_node(g, "reshape"_op, {red->output(0)}, Attrs{{"shape", shape}});
      const std::string keep_name = y->name;
      g.replace_all_uses(y, r->output(0));
      g.erase_node(n);
      if (!keep_name.empty()) {
        g.rename_value(y, fmt::format("{}.nchw{}", keep_name, y->id));
        g.rename_value(r->output(0), keep_name);
      }
    }
    g.topo_sort();
    return true;
  }
};

}  // namespace

std::unique_ptr<Pass> make_layout_pass() { return std::make_unique<LayoutPass>(); }

}  // namespace spore
