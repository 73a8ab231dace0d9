// Memory planning: every intermediate value (not a graph input, constant or graph output) gets an
// offset in one arena, written into Value::arena_offset so the plan can be printed and diffed.
//
// Level 0 gives every buffer its own range (no reuse: the baseline). Level 1 computes live ranges
// over the node order (defined at its producer, dead after its last user) and places each buffer
// first-fit into the lowest gap between buffers still live, so dead buffers' space is reused.
// Sizes are rounded to 64 bytes (kernels may assume aligned buffers). If the arena would exceed
// the memory cap, planning fails with the peak, the largest live buffers at the peak (by node), and
// what to try.
#include <algorithm>
#include <map>

#include "ops/registry.h"
#include "passes/pass.h"

namespace spore {
namespace {

struct Buf {
  Value* v;
  int64_t size;
  int64_t def;
  int64_t last;
  int64_t offset = -1;
};

int64_t aligned_bytes(const TensorType& t) {
  const int64_t b = std::max<int64_t>(t.numel(), 1) * static_cast<int64_t>(dtype_size(t.dtype));
  return (b + 63) / 64 * 64;
}

bool is_reshape_like(OpId op) {
  return op == OpId::reshape || op == OpId::flatten || op == OpId::squeeze || op == OpId::unsqueeze;
}

}  // namespace

bool is_arena_alias(const Node& n) {
  return is_reshape_like(n.op) && n.inputs.size() == 1 && n.outputs.size() == 1 && n.outputs[0]->arena_offset >= 0 &&
         n.inputs[0]->arena_offset == n.outputs[0]->arena_offset;
}

MemoryPlanInfo plan_memory(Graph& g, int level, size_t max_memory) {
  const auto& order = g.nodes();
  std::map<const Node*, int64_t> pos;
  for (size_t i = 0; i < order.size(); ++i) pos[order[i]] = static_cast<int64_t>(i);
  std::vector<Buf> bufs;
  std::map<const Value*, size_t> buf_of;             // value -> its buffer (aliases: the root's)
  std::vector<std::pair<Value*, size_t>> aliases;    // reshape-like outputs placed on their input's buffer
  for (Node* n : order) {
    const OpDef& def = op_registry().get(n->op);
    for (Value* v : n->outputs) v->arena_offset = -1;
    if (def.traits.has(Trait::graph_structure)) continue;
    for (Value* v : n->outputs) {
      if (g.is_output(v)) continue;
      SPORE_CHECK(v->type.is_static(), ErrorCode::shape_mismatch, "[memory_plan] %{} has a symbolic type {}; bind input shapes first",
                  v->name, v->type.str());
      int64_t last = pos[n];
      for (const Use& u : v->uses) last = std::max(last, pos[u.user]);
      auto in = level >= 1 && is_reshape_like(n->op) && n->inputs.size() == 1 ? buf_of.find(n->inputs[0]) : buf_of.end();
      if (in != buf_of.end() && n->inputs[0]->type.dtype == v->type.dtype &&
          n->inputs[0]->type.numel() == v->type.numel()) {
        // Same bytes in the same order: share the input's buffer and keep it alive for this value's users.
        bufs[in->second].last = std::max(bufs[in->second].last, last);
        buf_of[v] = in->second;
        aliases.emplace_back(v, in->second);
        continue;
      }
      buf_of[v] = bufs.size();
      bufs.push_back({v, aligned_bytes(v->type), pos[n], last});
    }
  }
  MemoryPlanInfo info;
  info.num_buffers = static_cast<int64_t>(bufs.size());
  for (const Buf& b : bufs) info.total_bytes += b.size;
  if (level == 0) {
    int64_t off = 0;
    for (Buf& b : bufs) {
      b.offset = off;
      off += b.size;
    }
    info.arena_bytes = off;
  } else {
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
      info.arena_bytes = std::max(info.arena_bytes, off + b.size);
    }
  }
  for (Buf& b : bufs) b.v->arena_offset = b.offset;
  for (auto& [v, b] : aliases) v->arena_offset = bufs[b].offset;
  if (max_memory > 0 && static_cast<size_t>(info.arena_bytes) > max_memory) {
    // Find the step with the most live bytes and list its largest buffers.
    int64_t worst_step = 0, worst_bytes = -1;
    for (size_t s = 0; s < order.size(); ++s) {
      int64_t bytes = 0;
      for (const Buf& b : bufs) if (b.def <= static_cast<int64_t>(s) && b.last >= static_cast<int64_t>(s)) bytes += b.size;
      if (bytes > worst_bytes) { worst_bytes = bytes; worst_step = static_cast<int64_t>(s); }
    }
    std::vector<const Buf*> at_peak;
    for (const Buf& b : bufs) if (b.def <= worst_step && b.last >= worst_step) at_peak.push_back(&b);
    std::sort(at_peak.begin(), at_peak.end(), [](const Buf* a, const Buf* b) { return a->size > b->size; });
    std::string top;
    for (size_t i = 0; i < at_peak.size() && i < 5; ++i)
      top += fmt::format("\n  {} bytes: %{} {} from {}", at_peak[i]->size, at_peak[i]->v->name, at_peak[i]->v->type.str(),
                         at_peak[i]->v->producer->label());
    SPORE_FAIL(ErrorCode::out_of_memory,
               "[memory_plan] the plan needs {} bytes of activations but max_device_memory is {} bytes; "
               "largest live buffers at the peak (step {}):{}\n  try a smaller batch{}",
               info.arena_bytes, max_memory, worst_step, top, level == 0 ? " or memory_optimize_level=1" : "");
  }
  return info;
}

namespace {
class MemoryPlanPass final : public Pass {
 public:
  std::string name() const override { return "memory_plan"; }
  bool run(Graph& g, const PassOptions& o) override {
    plan_memory(g, o.memory_optimize_level, o.max_memory);
    return true;
  }
};
}  // namespace

std::unique_ptr<Pass> make_memory_plan_pass() { return std::make_unique<MemoryPlanPass>(); }

}  // namespace spore
