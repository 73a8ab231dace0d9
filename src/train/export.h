#pragma once
// A cell traced to a deployable model graph (what `spore export` and spore.export write): the cell runs in eval mode
// under a trace with autodiff off, so its weights become constants named after their parameters ("conv.weight"),
// BatchNorm and Dropout take their inference form, and cheap cleanup (DCE, CSE, constant folding) runs before the
// graph is returned. Symbolic dims in `inputs` (e.g. a "batch" dim) stay symbolic in the file.
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "nn/cell.h"

namespace spore::train {

struct ExportSpec {
  std::vector<TensorType> inputs;
  std::vector<std::string> input_names;  // default "x" for one input, else "x0", "x1", ...
  std::string output_name = "logits";
};

// The cell's train mode is restored afterwards.
std::unique_ptr<Graph> export_graph(nn::Cell& net, const ExportSpec& spec);

// What an exported graph holds (for the summaries the CLI and Python print).
struct GraphSummary {
  int64_t ops = 0, params = 0, weight_bytes = 0;
};
GraphSummary summarize(const Graph& g);

}  // namespace spore::train
