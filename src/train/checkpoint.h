#pragma once
// Training checkpoints as safetensors: every parameter and buffer of a cell under its dotted name, the
// optimizer state under "optimizer.<state name>", and step/epoch/seed/optimizer in __metadata__.
// Writes are atomic (temp file + rename), so a crash never leaves a torn checkpoint.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "nn/cell.h"
#include "train/optimizer.h"

namespace spore::train {

struct CheckpointInfo {
  int64_t step = 0;   // optimizer steps taken
  int64_t epoch = 0;  // epochs completed
  uint64_t seed = 0;
  std::string optimizer;  // Optimizer::name(), "" when saved without one
  std::map<std::string, std::string> extra;  // any other metadata
};

inline constexpr const char* kOptimizerPrefix = "optimizer.";

// opt may be null (weights only); otherwise `state` must match opt->state_names().
void save_checkpoint(const std::string& path, nn::Cell& net, const Optimizer* opt, std::span<const Tensor> state,
                     const CheckpointInfo& info);

// Replaces net's parameters with the file's. With opt and state non-null the file must also hold exactly
// the optimizer's state, which replaces *state (it must already hold init_state's tensors, used for the
// expected shapes); without them "optimizer.*" tensors are ignored. Every missing, extra, mis-shaped or
// mis-typed tensor is named in one error, and nothing is modified then.
CheckpointInfo load_checkpoint(const std::string& path, nn::Cell& net, const Optimizer* opt = nullptr,
                               std::vector<Tensor>* state = nullptr);

}  // namespace spore::train
