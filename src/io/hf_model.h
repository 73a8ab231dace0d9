#pragma once
// A Hugging Face model folder: config.json, the weights in model.safetensors or in the shards that
// model.safetensors.index.json lists, and the tokenizer files when present. Weights are mmap'd, not copied.
//
//   io::HfModel m = io::read_hf_model("Qwen2.5-0.5B");
//   std::string arch = m.architecture();                  // "Qwen2ForCausalLM"
//   int64_t hidden = m.config.at("hidden_size");
//   const Tensor& wq = m.tensor("model.layers.0.self_attn.q_proj.weight", {896, 896});  // errors name it
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace spore::io {

struct HfModel {
  std::string dir;
  nlohmann::json config;                              // config.json
  std::map<std::string, Tensor> tensors;              // aliasing read-only mappings: do not write
  std::map<std::string, std::string> tensor_file;     // tensor name -> the .safetensors file (name in `dir`) holding it
  std::vector<std::string> weight_files;              // model.safetensors, or the shards in index order
  std::string tokenizer_json;                         // full path, or "" when the folder has none
  std::string tokenizer_config_json;                  // full path, or ""
  std::string generation_config_json;                 // full path, or ""

  // config["architectures"][0], else config["model_type"]; an error naming config.json when neither is there.
  std::string architecture() const;
  // The tensor; a missing one is an error naming it and the folder.
  const Tensor& tensor(const std::string& name) const;
  // The tensor, checked against `shape` (error names the tensor, its shape and the expected one).
  const Tensor& tensor(const std::string& name, const Shape& shape) const;
  const Tensor* find(const std::string& name) const;
};

// Errors name the file: missing or malformed config.json, no weights, a shard listed in the index but missing, a
// tensor in two shards, a tensor the index lists under a shard that does not hold it.
HfModel read_hf_model(const std::string& dir, bool use_mmap = true);

}  // namespace spore::io
