#include <chrono>
#include <filesystem>
#include <fstream>

#include "ops/graph_ops.h"
#include "passes/pass.h"

namespace spore {

void PassManager::run(Graph& g) {
  records_.clear();
  for (const std::string& d : opts_.disabled) {
    bool known = false;
    std::string names;
    for (const auto& p : passes_) {
      known |= p->name() == d;
      if (names.find(p->name()) == std::string::npos) names += (names.empty() ? "" : ", ") + p->name();
    }
    SPORE_CHECK(known, ErrorCode::invalid_argument, "cannot disable pass '{}': no such pass in the pipeline ({})", d, names);
  }
  int index = 0;
  auto save = [&](const std::string& name) {
    if (opts_.save_graphs_dir.empty()) return;
    std::filesystem::create_directories(opts_.save_graphs_dir);
    const std::string base = fmt::format("{}/{:02d}_{}", opts_.save_graphs_dir, index, name);
    std::ofstream(base + ".ir") << print_graph(g);
    std::ofstream(base + ".dot") << graph_to_dot(g);
  };
  save("input");
  for (auto& p : passes_) {
    ++index;
    PassRecord rec;
    rec.name = p->name();
    const bool disabled = std::find(opts_.disabled.begin(), opts_.disabled.end(), rec.name) != opts_.disabled.end();
    if (disabled || opts_.opt_level < p->min_opt_level()) {
      rec.skipped = true;
      records_.push_back(rec);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    rec.changed = p->run(g, opts_);
    rec.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (opts_.verify_each) {
      try {
        verify_graph(g);
      } catch (const Error& e) {
        SPORE_FAIL(e.code(), "graph invalid after pass '{}': {}", rec.name, e.what());
      }
    }
    save(rec.name);
    records_.push_back(rec);
  }
}

void add_default_pipeline(PassManager& pm) {
  pm.add(make_dce_pass());
  pm.add(make_remove_dropout_pass());    // inference only
  pm.add(make_fold_batch_norm_pass());   // inference only
  pm.add(make_simplify_pass());
  pm.add(make_cse_pass());
  pm.add(make_fold_constants_pass());
  pm.add(make_dce_pass());
  pm.add(make_recognize_patterns_pass());
  pm.add(make_fuse_attention_pass());    // after recognize_patterns (a written-out softmax becomes softmax first)
  pm.add(make_dce_pass());
  pm.add(make_group_linear_blockq_pass());  // after cse (duplicate projections merged first), before fuse_elementwise
  pm.add(make_fuse_epilogue_pass());     // before fuse_elementwise, which would otherwise take bias-add + act
  pm.add(make_fuse_elementwise_pass());
  pm.add(make_layout_pass());            // inference only; after the epilogues are fused into conv2d_fused
  pm.add(make_dce_pass());
  pm.add(make_rematerialize_pass());     // recompute option only; after every cse (which would merge its clones back)
  pm.add(make_memory_plan_pass());
}

}  // namespace spore
