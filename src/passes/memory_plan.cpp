// Memory planning: every intermediate value (not a graph input, constant or graph output) gets an
// offset in one arena, written into Value::arena_offset so the plan can be printed and diffed.
//
// Level 0 gives every buffer its own range (no reuse: the baseline). Level 1 computes live ranges
// over the node order (defined at its producer, dead after its last user) and places each buffer
// first-fit into the lowest gap between buffers still live, so dead buffers' space is reused; a
// reshape-like node's output shares its input's bytes (no kernel runs for it).
// Level 2 adds in-place outputs and better packing:
//  - an op whose traits say `inplace_ok` writes output 0 over input 0 when input 0's buffer dies at
//    that node and both hold the same number of elements of the same dtype. Such kernels read input 0
//    elementwise at the index they write (binary ops only when input 0 is not broadcast, which equal
//    sizes guarantee), so the overwrite is safe. The two values become one buffer whose live range
//    covers both, so the saving shows up as one buffer fewer live at that step.
//  - offsets come from the better of two packings: level 1's first-fit in node order, and greedy by
//    size (largest buffer first, each into the smallest gap among the already placed buffers whose live
//    ranges overlap its own). Neither dominates; both are cheap, so the smaller arena wins (and level 2
//    also tries its packings without the in-place merges, so it never needs more than level 1).
// Sizes are rounded to 64 bytes (kernels may assume aligned buffers). If the arena would exceed the
// memory cap, planning fails at compile time with the peak, the largest live buffers at the peak (by
// node), and what would lower it: a higher level (with the bytes it would need) or a smaller batch.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "ops/registry.h"
#include "passes/pass.h"
#include "tensor/storage.h"
#include "tensor/tensor.h"

namespace spore {
namespace {

struct Buf {
  Value* v;  // the value that defines the buffer (aliases and in-place outputs share it)
  int64_t size;
  int64_t def;
  int64_t last;
  int64_t offset = -1;
};

int64_t aligned_bytes(const TensorType& t) {
  const int64_t b = std::max<int64_t>(t.numel(), 1) * static_cast<int64_t>(dtype_size(t.dtype));
  return (b + 63) / 64 * 64;
}

bool is_reshape_like(OpId op) { return op_registry().get(op).traits.has(Trait::reshape); }

// The byte offset at which a view op's output (slice: a run of whole rows, e.g. one step of an RNN's input
// projection) lies contiguously in its input's bytes, if it does: what the op's eager view gives, computed on
// metadata only (a tensor over a storage that is never read).
std::optional<int64_t> contiguous_view_bytes(const Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return std::nullopt;
  const OpDef& def = op_registry().get(n.op);
  if (!def.traits.has(Trait::view) || def.traits.has(Trait::reshape) || !def.view) return std::nullopt;
  const TensorType& it = n.inputs[0]->type;
  const TensorType& ot = n.outputs[0]->type;
  if (!it.is_static() || !ot.is_static() || it.dtype != ot.dtype || ot.numel() == 0) return std::nullopt;
  static char never_read;
  const size_t bytes = static_cast<size_t>(it.numel()) * dtype_size(it.dtype);
  const Shape shape = it.shape();
  const Tensor x = Tensor::from_storage(Storage::wrap(&never_read, bytes), shape, contiguous_strides(shape), 0, it.dtype);
  Tensor v;
  try {
    v = def.view(std::span<const Tensor>(&x, 1), n.attrs, ot);
  } catch (const Error&) {
    return std::nullopt;  // attributes the view cannot read: the kernel runs (and reports them)
  }
  if (!v.defined() || !v.is_contiguous() || v.shape() != ot.shape()) return std::nullopt;
  return v.offset() * static_cast<int64_t>(dtype_size(it.dtype));
}

// The buffers of a graph at a level, before placement.
struct Shared {
  Value* v;
  size_t buf;
  int64_t bytes;  // where v starts in the buffer (a contiguous view's offset; 0 for aliases and in-place outputs)
};

struct Buffers {
  std::vector<Buf> bufs;
  std::vector<Shared> shared;  // values placed on another value's buffer
  int64_t num_inplace = 0;
  int64_t num_steps = 0;
};

Buffers collect_buffers(Graph& g, int level) {
  const auto& order = g.nodes();
  std::map<const Node*, int64_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int64_t>(i);
  Buffers r;
  r.num_steps = static_cast<int64_t>(order.size());
  std::map<const Value*, size_t> buf_of;  // value -> its buffer
  std::set<const Value*> input_views;      // level >= 1: reshapes of graph inputs, run as views (is_input_view)
  std::map<const Value*, int64_t> at_bytes;  // values that start inside their buffer (contiguous views)
  for (Node* n : order) {
    const OpDef& def = op_registry().get(n->op);
    if (def.traits.has(Trait::graph_structure)) continue;
    for (size_t oi = 0; oi < n->outputs.size(); ++oi) {
      Value* v = n->outputs[oi];
      if (g.is_output(v)) continue;
      SPORE_CHECK(v->type.is_static(), ErrorCode::shape_mismatch, "[memory_plan] %{} has a symbolic type {}; bind input shapes first",
                  v->name, v->type.str());
      int64_t last = pos[n];
      for (const Use& u : v->uses) last = std::max(last, pos[u.user]);
      const bool same_bytes = !n->inputs.empty() && n->inputs[0]->type.dtype == v->type.dtype &&
                              n->inputs[0]->type.numel() == v->type.numel();
      if (level >= 1 && oi == 0 && same_bytes && is_reshape_like(n->op) && n->inputs.size() == 1 &&
          (n->inputs[0]->producer->is_input() || input_views.count(n->inputs[0]))) {
        input_views.insert(v);  // no buffer: the plan reads the graph input's bytes with this shape
        continue;
      }
      const auto start_of = [&](const Value* x) {
        const auto it = at_bytes.find(x);
        return it == at_bytes.end() ? int64_t{0} : it->second;
      };
      auto in = same_bytes && oi == 0 ? buf_of.find(n->inputs[0]) : buf_of.end();
      if (in != buf_of.end() && level >= 1 && is_reshape_like(n->op) && n->inputs.size() == 1) {
        // Same bytes in the same order: share the input's buffer and keep it alive for this value's users.
        r.bufs[in->second].last = std::max(r.bufs[in->second].last, last);
        buf_of[v] = in->second;
        const int64_t at = start_of(n->inputs[0]);
        if (at != 0) at_bytes[v] = at;
        r.shared.push_back({v, in->second, at});
        continue;
      }
      // A contiguous run of the input's bytes (a slice of whole rows): the output is those bytes, on 64-byte
      // boundaries (kernels may assume aligned buffers), and the input's buffer stays alive for its users.
      if (level >= 1 && oi == 0) {
        const auto whole = buf_of.find(n->inputs.empty() ? nullptr : n->inputs[0]);
        if (whole != buf_of.end())
          if (const auto off = contiguous_view_bytes(*n); off && (start_of(n->inputs[0]) + *off) % 64 == 0) {
            r.bufs[whole->second].last = std::max(r.bufs[whole->second].last, last);
            buf_of[v] = whole->second;
            const int64_t at = start_of(n->inputs[0]) + *off;
            if (at != 0) at_bytes[v] = at;
            r.shared.push_back({v, whole->second, at});
            continue;
          }
      }
      // In place: input 0's buffer has no reader after this node (its live range, which already covers
      // every alias defined so far, ends here), so output 0 may overwrite it. Views are left out: their
      // kernel is a copy, and copying a buffer onto itself gains nothing.
      if (in != buf_of.end() && level >= 2 && def.traits.has(Trait::inplace_ok) && !def.traits.has(Trait::view) &&
          r.bufs[in->second].last == pos[n] && start_of(n->inputs[0]) == 0) {
        r.bufs[in->second].last = last;
        buf_of[v] = in->second;
        r.shared.push_back({v, in->second, 0});
        ++r.num_inplace;
        continue;
      }
      buf_of[v] = r.bufs.size();
      r.bufs.push_back({v, aligned_bytes(v->type), pos[n], last});
    }
  }
  return r;
}

bool overlap_in_time(const Buf& a, const Buf& b) { return a.def <= b.last && b.def <= a.last; }

// Level 1: node order, each buffer into the lowest gap between the buffers still live.
int64_t place_first_fit(std::vector<Buf>& bufs) {
  int64_t arena = 0;
  std::vector<Buf*> live;  // sorted by offset
  for (Buf& b : bufs) {
    std::erase_if(live, [&](const Buf* x) { return x->last < b.def; });
    int64_t off = 0;
    for (const Buf* x : live) {
      if (x->offset - off >= b.size) break;
      off = std::max(off, x->offset + x->size);
    }
    b.offset = off;
    live.insert(std::upper_bound(live.begin(), live.end(), &b, [](const Buf* a, const Buf* c) { return a->offset < c->offset; }), &b);
    arena = std::max(arena, off + b.size);
  }
  return arena;
}

// Greedy by size: largest first (ties by definition order, so the result is deterministic), each into the
// smallest gap that fits among the placed buffers live at the same time, else after the last of them.
int64_t place_greedy_by_size(std::vector<Buf>& bufs) {
  std::vector<size_t> idx(bufs.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return bufs[a].size > bufs[b].size; });
  std::vector<const Buf*> placed, conflicts;
  int64_t arena = 0;
  for (size_t i : idx) {
    Buf& b = bufs[i];
    conflicts.clear();
    for (const Buf* x : placed)
      if (overlap_in_time(*x, b)) conflicts.push_back(x);
    std::sort(conflicts.begin(), conflicts.end(), [](const Buf* a, const Buf* c) { return a->offset < c->offset; });
    int64_t off = 0, best = -1, best_gap = 0;
    for (const Buf* x : conflicts) {
      const int64_t gap = x->offset - off;
      if (gap >= b.size && (best < 0 || gap < best_gap)) {
        best = off;
        best_gap = gap;
      }
      off = std::max(off, x->offset + x->size);
    }
    b.offset = best >= 0 ? best : off;
    arena = std::max(arena, b.offset + b.size);
    placed.push_back(&b);
  }
  return arena;
}

// Places the buffers for `level`; returns the arena size.
int64_t place(std::vector<Buf>& bufs, int level) {
  if (level == 0) {
    int64_t off = 0;
    for (Buf& b : bufs) {
      b.offset = off;
      off += b.size;
    }
    return off;
  }
  const int64_t first_fit = place_first_fit(bufs);
  if (level == 1) return first_fit;
  std::vector<Buf> by_size = bufs;
  const int64_t greedy = place_greedy_by_size(by_size);
  if (greedy < first_fit) {
    bufs = std::move(by_size);
    return greedy;
  }
  return first_fit;
}

// The buffers of `g` at `level`, placed. Level 2 takes the smaller arena of the buffers with and without
// in-place outputs: merging two buffers into one longer-lived one usually saves a buffer but can fragment
// the packing, and level 2 must never need more than level 1.
Buffers plan_buffers(Graph& g, int level, int64_t& arena) {
  Buffers r = collect_buffers(g, level);
  arena = place(r.bufs, level);
  if (level == 2 && r.num_inplace > 0) {
    Buffers plain = collect_buffers(g, 1);
    const int64_t plain_arena = place(plain.bufs, 2);
    if (plain_arena < arena) {
      arena = plain_arena;
      return plain;
    }
  }
  return r;
}

}  // namespace

bool is_input_view(const Graph& g, const Node& n) {
  if (!is_reshape_like(n.op) || n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const Value* in = n.inputs[0];
  const Value* out = n.outputs[0];
  if (out->arena_offset >= 0 || g.is_output(out) || in->type.dtype != out->type.dtype || !out->type.is_static()) return false;
  return in->producer->is_input() || is_input_view(g, *in->producer);
}

bool is_arena_alias(const Node& n) {
  if (n.inputs.size() != 1 || n.outputs.size() != 1 || n.outputs[0]->arena_offset < 0 || n.inputs[0]->arena_offset < 0)
    return false;
  if (is_reshape_like(n.op)) return n.inputs[0]->arena_offset == n.outputs[0]->arena_offset;
  const auto off = contiguous_view_bytes(n);
  return off && n.inputs[0]->arena_offset + *off == n.outputs[0]->arena_offset;
}

MemoryPlanInfo plan_memory(Graph& g, int level, size_t max_memory) {
  SPORE_CHECK(level >= 0 && level <= 2, ErrorCode::invalid_argument, "[memory_plan] memory_optimize_level must be 0, 1 or 2, got {}",
              level);
  for (Node* n : g.nodes())
    for (Value* v : n->outputs) v->arena_offset = -1;
  MemoryPlanInfo info;
  Buffers r = plan_buffers(g, level, info.arena_bytes);
  std::vector<Buf>& bufs = r.bufs;
  info.num_buffers = static_cast<int64_t>(bufs.size());
  info.num_inplace = r.num_inplace;
  for (const Buf& b : bufs) info.total_bytes += b.size;
  // The most bytes live at one step: what any packing of these buffers needs at least.
  std::vector<int64_t> live_at(static_cast<size_t>(r.num_steps) + 1, 0);
  for (const Buf& b : bufs) {
    live_at[b.def] += b.size;
    live_at[b.last + 1] -= b.size;
  }
  int64_t worst_step = 0, running = 0;
  for (int64_t s = 0; s < r.num_steps; ++s) {
    running += live_at[s];
    if (running > info.live_peak_bytes) {
      info.live_peak_bytes = running;
      worst_step = s;
    }
  }
  // The buffers live at the peak step, largest first: the memory report's "what holds the peak", and the
  // consumers named when the cap is exceeded.
  std::vector<const Buf*> at_peak;
  for (const Buf& b : bufs) if (b.def <= worst_step && b.last >= worst_step) at_peak.push_back(&b);
  std::stable_sort(at_peak.begin(), at_peak.end(), [](const Buf* a, const Buf* b) { return a->size > b->size; });
  if (!bufs.empty()) {
    info.peak_step = worst_step;
    info.peak_node = g.nodes()[static_cast<size_t>(worst_step)]->label();
  }
  for (const Buf* b : at_peak) {
    const Node* p = b->v->producer;
    const std::string op = op_registry().get(p->op).name;
    info.live_at_peak.push_back({b->v->name, p->name.empty() ? op : p->name, op, b->v->type.str(), b->size});
  }
  if (max_memory > 0 && static_cast<size_t>(info.arena_bytes) > max_memory) {
    std::string top;
    for (size_t i = 0; i < at_peak.size() && i < 5; ++i)
      top += fmt::format("\n  {} bytes: %{} {} from {}", at_peak[i]->size, at_peak[i]->v->name, at_peak[i]->v->type.str(),
                         at_peak[i]->v->producer->label());
    std::string options;
    if (level < 2) {
      // What the highest level would need, computed on the side (offsets are written below, not here).
      int64_t need2 = 0;
      plan_buffers(g, 2, need2);
      options = fmt::format("memory_optimize_level=2 (needs {} bytes{}) or ", need2,
                            static_cast<size_t>(need2) <= max_memory ? ", which fits" : "");
    }
    SPORE_FAIL(ErrorCode::out_of_memory,
               "[memory_plan] the plan needs {} bytes of activations but max_device_memory is {} bytes "
               "(memory_optimize_level={}); largest live buffers at the peak (step {} of {}, {} bytes live):{}\n"
               "  try {}a smaller batch (activations grow with it)",
               info.arena_bytes, max_memory, level, worst_step, r.num_steps, info.live_peak_bytes, top, options);
  }
  for (Buf& b : bufs) b.v->arena_offset = b.offset;
  for (const Shared& sh : r.shared) sh.v->arena_offset = bufs[sh.buf].offset + sh.bytes;
  return info;
}

namespace {
class MemoryPlanPass final : public Pass {
 public:
  std::string name() const override { return "memory_plan"; }
  bool run(Graph& g, const PassOptions& o) override {
    MemoryPlanInfo info = plan_memory(g, o.memory_optimize_level, o.max_memory);
    if (o.memory_info) *o.memory_info = std::move(info);
    return true;
  }
};
}  // namespace

std::unique_ptr<Pass> make_memory_plan_pass() { return std::make_unique<MemoryPlanPass>(); }

}  // namespace spore
