#include "io/hf_model.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "io/file_util.h"
#include "io/safetensors.h"

namespace spore::io {
namespace {

namespace fs = std::filesystem;

nlohmann::json read_json(const std::string& path) {
  std::string text = read_file_bytes(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    SPORE_FAIL(ErrorCode::parse_error, "'{}': bad JSON at byte offset {}: {}", path, e.byte, e.what());
  }
}

std::string if_exists(const fs::path& p) { return fs::is_regular_file(p) ? p.string() : std::string(); }

}  // namespace

std::string HfModel::architecture() const {
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0].is_string())
    return config["architectures"][0].get<std::string>();
  if (config.contains("model_type") && config["model_type"].is_string()) return config["model_type"].get<std::string>();
  SPORE_FAIL(ErrorCode::parse_error, "'{}/config.json': neither \"architectures\" nor \"model_type\" names the model",
             dir);
}

const Tensor* HfModel::find(const std::string& name) const {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

const Tensor& HfModel::tensor(const std::string& name) const {
  const Tensor* t = find(name);
  SPORE_CHECK(t, ErrorCode::not_found, "model '{}': missing tensor '{}' ({} tensors in {})", dir, name,
              tensors.size(), fmt::join(weight_files, ", "));
  return *t;
}

const Tensor& HfModel::tensor(const std::string& name, const Shape& shape) const {
  const Tensor& t = tensor(name);
  SPORE_CHECK(t.shape() == shape, ErrorCode::shape_mismatch, "model '{}': tensor '{}' in {} has shape {}, expected {}",
              dir, name, tensor_file.at(name), shape_str(t.shape()), shape_str(shape));
  return t;
}

HfModel read_hf_model(const std::string& dir, bool use_mmap) {
  HfModel m;
  m.dir = dir;
  const fs::path root(dir);
  SPORE_CHECK(fs::is_directory(root), ErrorCode::io_error, "model folder '{}' does not exist or is not a folder", dir);
  const fs::path config = root / "config.json";
  SPORE_CHECK(fs::is_regular_file(config), ErrorCode::not_found, "model folder '{}': missing config.json", dir);
  m.config = read_json(config.string());
  SPORE_CHECK(m.config.is_object(), ErrorCode::parse_error, "'{}': not a JSON object", config.string());
  m.tokenizer_json = if_exists(root / "tokenizer.json");
  m.tokenizer_config_json = if_exists(root / "tokenizer_config.json");
  m.generation_config_json = if_exists(root / "generation_config.json");

  const fs::path single = root / "model.safetensors", index = root / "model.safetensors.index.json";
  std::map<std::string, std::string> listed;  // from the index: tensor -> shard
  if (fs::is_regular_file(single)) {
    m.weight_files.push_back("model.safetensors");
  } else if (fs::is_regular_file(index)) {
    const std::string ipath = index.string();
    nlohmann::json j = read_json(ipath);
    SPORE_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), ErrorCode::parse_error,
                "'{}': needs a \"weight_map\" object", ipath);
    for (auto& [name, shard] : j["weight_map"].items()) {
      SPORE_CHECK(shard.is_string(), ErrorCode::parse_error, "'{}': weight_map['{}'] is not a file name", ipath, name);
      std::string s = shard.get<std::string>();
      // Shards live in the folder itself; anything else is refused rather than read from elsewhere.
      SPORE_CHECK(!s.empty() && s.find('/') == std::string::npos && s != "." && s != "..", ErrorCode::parse_error,
                  "'{}': tensor '{}' is listed in shard '{}', which is not a file name in the folder", ipath, name, s);
      listed.emplace(name, s);
      if (std::find(m.weight_files.begin(), m.weight_files.end(), s) == m.weight_files.end())
        m.weight_files.push_back(s);
    }
    SPORE_CHECK(!m.weight_files.empty(), ErrorCode::parse_error, "'{}': the weight_map lists no tensors", ipath);
    for (const auto& s : m.weight_files)
      SPORE_CHECK(fs::is_regular_file(root / s), ErrorCode::not_found,
                  "model folder '{}': shard '{}' listed in model.safetensors.index.json is missing", dir, s);
  } else {
    const bool bin = fs::exists(root / "pytorch_model.bin") || fs::exists(root / "pytorch_model.bin.index.json");
    SPORE_FAIL(ErrorCode::not_found, "model folder '{}': no model.safetensors or model.safetensors.index.json{}", dir,
               bin ? " (pytorch_model.bin is not supported: convert it to safetensors)" : "");
  }

  for (const auto& file : m.weight_files) {
    SafetensorsFile st = map_safetensors((root / file).string(), false, use_mmap);
    for (auto& [name, t] : st.tensors) {
      auto [it, fresh] = m.tensor_file.emplace(name, file);
      SPORE_CHECK(fresh, ErrorCode::parse_error, "model folder '{}': tensor '{}' is in both '{}' and '{}'", dir, name,
                  it->second, file);
      m.tensors.emplace(name, std::move(t));
    }
  }
  for (const auto& [name, shard] : listed) {
    auto it = m.tensor_file.find(name);
    SPORE_CHECK(it != m.tensor_file.end() && it->second == shard, ErrorCode::not_found,
                "model folder '{}': tensor '{}' is listed in model.safetensors.index.json under '{}' but {}", dir, name,
                shard, it == m.tensor_file.end() ? "no shard holds it" : "is in '" + it->second + "'");
  }
  return m;
}

}  // namespace spore::io
