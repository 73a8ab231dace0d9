#include "train/checkpoint.h"

#include <fmt/format.h>

#include "base/error.h"
#include "io/safetensors.h"

namespace spore::train {
namespace {

int64_t meta_int(const std::map<std::string, std::string>& m, const std::string& key, const std::string& path) {
  auto it = m.find(key);
  if (it == m.end()) return 0;
  try {
    return std::stoll(it->second);
  } catch (const std::exception&) {
    SPORE_FAIL(ErrorCode::parse_error, "train::load_checkpoint: {}: metadata '{}' is not an integer: '{}'", path, key,
               it->second);
  }
}

}  // namespace

void save_checkpoint(const std::string& path, nn::Cell& net, const Optimizer* opt, std::span<const Tensor> state,
                     const CheckpointInfo& info) {
  std::map<std::string, Tensor> tensors;
  for (auto& [name, t] : net.parameters_and_names()) tensors[name] = *t;
  if (opt) {
    const std::vector<std::string> names = opt->state_names();
    SPORE_CHECK(names.size() == state.size(), ErrorCode::invalid_argument,
                "train::save_checkpoint: optimizer '{}' names {} state tensors, got {}", opt->name(), names.size(),
                state.size());
    for (size_t i = 0; i < names.size(); ++i) tensors[kOptimizerPrefix + names[i]] = state[i];
  }
  std::map<std::string, std::string> meta = info.extra;
  meta["step"] = std::to_string(info.step);
  meta["epoch"] = std::to_string(info.epoch);
  meta["seed"] = std::to_string(info.seed);
  meta["optimizer"] = opt ? opt->name() : info.optimizer;
  meta["format"] = "spore.checkpoint.v1";
  io::write_safetensors(path, tensors, meta);
}

CheckpointInfo load_checkpoint(const std::string& path, nn::Cell& net, const Optimizer* opt,
                               std::vector<Tensor>* state) {
  const bool with_state = opt && state;
  io::SafetensorsFile file = io::read_safetensors(path);
  // Expected tensors: name -> (the slot to replace, its current value for shape/dtype).
  std::map<std::string, Tensor*> expected;
  for (auto& [name, t] : net.parameters_and_names()) expected[name] = t;
  if (with_state) {
    const std::vector<std::string> names = opt->state_names();
    SPORE_CHECK(names.size() == state->size(), ErrorCode::invalid_argument,
                "train::load_checkpoint: optimizer '{}' names {} state tensors but {} are held", opt->name(),
                names.size(), state->size());
    for (size_t i = 0; i < names.size(); ++i) expected[kOptimizerPrefix + names[i]] = &(*state)[i];
  }
  std::vector<std::string> problems;
  for (auto& [name, slot] : expected) {
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      problems.push_back(fmt::format("missing '{}'", name));
    } else if (it->second.shape() != slot->shape() || it->second.dtype() != slot->dtype()) {
      problems.push_back(fmt::format("'{}' expected {} {}, got {} {}", name, dtype_name(slot->dtype()),
                                     shape_str(slot->shape()), dtype_name(it->second.dtype()),
                                     shape_str(it->second.shape())));
    }
  }
  for (auto& [name, t] : file.tensors) {
    const bool is_state = name.rfind(kOptimizerPrefix, 0) == 0;
    if (!expected.count(name) && (with_state || !is_state)) problems.push_back(fmt::format("unexpected '{}'", name));
  }
  SPORE_CHECK(problems.empty(), ErrorCode::invalid_argument, "train::load_checkpoint: {}: {}", path,
              fmt::join(problems, "; "));
  CheckpointInfo info;
  info.step = meta_int(file.metadata, "step", path);
  info.epoch = meta_int(file.metadata, "epoch", path);
  info.seed = static_cast<uint64_t>(meta_int(file.metadata, "seed", path));
  if (auto it = file.metadata.find("optimizer"); it != file.metadata.end()) info.optimizer = it->second;
  for (auto& [k, v] : file.metadata)
    if (k != "step" && k != "epoch" && k != "seed" && k != "optimizer" && k != "format") info.extra[k] = v;
  if (with_state)
    SPORE_CHECK(info.optimizer.empty() || info.optimizer == opt->name(), ErrorCode::invalid_argument,
                "train::load_checkpoint: {}: expected optimizer '{}', the checkpoint was saved with '{}'", path,
                opt->name(), info.optimizer);
  // Fresh tensors (not in-place copies): storage may be shared, e.g. between optimizer state tensors.
  for (auto& [name, slot] : expected) *slot = file.tensors.at(name).clone();

  return info;
}

}  // namespace spore::train
