#include "io/hf_model.h"

#include <gtest/gtest.h>

#include "io/file_util.h"
#include "tensor/storage.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace spore::io {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A fresh folder under the test's temp dir.
std::string folder(const std::string& name) {
  fs::path p = testing::temp_dir("hf_model") / name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

void write_text(const std::string& path, const std::string& text) { write_file_atomic(path, text); }

const char* kConfig = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8,
                         "num_hidden_layers": 2, "tie_word_embeddings": true})";

Tensor pattern(Shape s, int salt) { return testing::patterned_tensor(std::move(s), DType::f32, salt); }

TEST(HfModel, SingleFileFolder) {
  const std::string dir = folder("single");
  write_text(dir + "/config.json", kConfig);
  write_text(dir + "/tokenizer.json", "{}");
  std::map<std::string, Tensor> ts{{"model.embed_tokens.weight", pattern({10, 8}, 1)},
                                   {"model.norm.weight", pattern({8}, 2)},
                                   {"model.layers.0.mlp.up_proj.weight", pattern({16, 8}, 3)}};
  ts["half"] = testing::patterned_tensor({3, 5}, DType::bf16, 4);
  write_safetensors(dir + "/model.safetensors", ts);
  HfModel m = read_hf_model(dir);
  EXPECT_EQ(m.architecture(), "Qwen2ForCausalLM");
  EXPECT_EQ(m.config.at("hidden_size").get<int>(), 8);
  EXPECT_EQ(m.tokenizer_json, dir + "/tokenizer.json");
  EXPECT_EQ(m.tokenizer_config_json, "");
  EXPECT_EQ(m.weight_files, (std::vector<std::string>{"model.safetensors"}));
  ASSERT_EQ(m.tensors.size(), ts.size());
  for (const auto& [name, t] : ts) {
    EXPECT_TRUE(m.tensor(name).bit_equal(t)) << name;
    EXPECT_EQ(m.tensor_file.at(name), "model.safetensors");
  }
  EXPECT_EQ(m.tensor("model.norm.weight", {8}).numel(), 8);
  std::string e = error_of([&] { m.tensor("model.norm.weight", {9}); });
  EXPECT_NE(e.find("'model.norm.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("[8]"), std::string::npos) << e;
  EXPECT_NE(e.find("[9]"), std::string::npos) << e;
  e = error_of([&] { m.tensor("lm_head.weight"); });
  EXPECT_NE(e.find("missing tensor 'lm_head.weight'"), std::string::npos) << e;
}

TEST(HfModel, TensorsAliasTheMappingAndOutliveTheModel) {
  const std::string dir = folder("alias");
  write_text(dir + "/config.json", R"({"model_type": "llama"})");
  write_safetensors(dir + "/model.safetensors", {{"w", pattern({1024, 64}, 7)}});
  Tensor w;
  {
    const size_t before = memory_in_use();
    HfModel m = read_hf_model(dir);
    EXPECT_EQ(m.architecture(), "llama");
    w = m.tensor("w");
    // Not a copy: mapped bytes are not allocated through Storage, so the memory in use does not grow by the tensor.
    EXPECT_LT(static_cast<int64_t>(memory_in_use()) - static_cast<int64_t>(before), static_cast<int64_t>(w.nbytes()));
  }
  // map_safetensors itself, against the copying reader.
  SafetensorsFile a = map_safetensors(dir + "/model.safetensors"), b = read_safetensors(dir + "/model.safetensors");
  EXPECT_TRUE(a.tensors.at("w").bit_equal(b.tensors.at("w")));
  EXPECT_NE(a.tensors.at("w").raw_data(), b.tensors.at("w").raw_data());
}

TEST(HfModel, ShardedFolder) {
  const std::string dir = folder("sharded");
  write_text(dir + "/config.json", kConfig);
  write_text(dir + "/tokenizer.json", "{}");
  write_text(dir + "/tokenizer_config.json", "{}");
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {{"a", pattern({4, 4}, 1)}, {"b", pattern({4}, 2)}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", pattern({2, 3}, 3)}});
  write_text(dir + "/model.safetensors.index.json",
             R"({"metadata": {"total_size": 88}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                 "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}})");
  HfModel m = read_hf_model(dir);
  EXPECT_EQ(m.weight_files.size(), 2u);
  EXPECT_EQ(m.tensors.size(), 3u);
  EXPECT_EQ(m.tensor_file.at("c"), "model-00002-of-00002.safetensors");
  EXPECT_TRUE(m.tensor("c").bit_equal(pattern({2, 3}, 3)));
  EXPECT_EQ(m.tokenizer_config_json, dir + "/tokenizer_config.json");
}

TEST(HfModel, ErrorsNameTheFile) {
  const std::string dir = folder("errors");
  std::string e = error_of([&] { read_hf_model(dir); });
  EXPECT_NE(e.find("missing config.json"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { read_hf_model(dir + "/nope"); }).find("does not exist"), std::string::npos);

  write_text(dir + "/config.json", "{\"a\": 1,,}");
  e = error_of([&] { read_hf_model(dir); });
  EXPECT_NE(e.find("config.json': bad JSON at byte offset"), std::string::npos) << e;

  write_text(dir + "/config.json", "{}");
  e = error_of([&] { read_hf_model(dir); });
  EXPECT_NE(e.find("no model.safetensors or model.safetensors.index.json"), std::string::npos) << e;
  write_safetensors(dir + "/s1.safetensors", {{"a", pattern({2}, 1)}, {"dup", pattern({2}, 2)}});
  write_safetensors(dir + "/s2.safetensors", {{"b", pattern({2}, 3)}, {"dup", pattern({2}, 4)}});
  auto index = [&](const std::string& map) {
    write_text(dir + "/model.safetensors.index.json", "{\"weight_map\": {" + map + "}}");
    return error_of([&] { read_hf_model(dir); });
  };
  e = index(R"("a": "s1.safetensors", "b": "s3.safetensors")");
  EXPECT_NE(e.find("shard 's3.safetensors' listed in model.safetensors.index.json is missing"), std::string::npos)
      << e;
  e = index(R"("a": "s1.safetensors", "b": "s2.safetensors", "dup": "s1.safetensors")");
  EXPECT_NE(e.find("tensor 'dup' is in both 's1.safetensors' and 's2.safetensors'"), std::string::npos) << e;
  write_safetensors(dir + "/s2.safetensors", {{"b", pattern({2}, 3)}});
  EXPECT_EQ(index(R"("a": "s1.safetensors", "b": "s2.safetensors", "dup": "s1.safetensors")"), "");
  e = index(R"("a": "s1.safetensors", "b": "s2.safetensors", "ghost": "s2.safetensors")");
  EXPECT_NE(e.find("tensor 'ghost' is listed in model.safetensors.index.json under 's2.safetensors' but no shard"),
            std::string::npos)
      << e;
  e = index(R"("a": "s2.safetensors", "b": "s1.safetensors")");
  EXPECT_NE(e.find("tensor 'a' is listed in model.safetensors.index.json under 's2.safetensors' but is in "
                   "'s1.safetensors'"),
            std::string::npos)
      << e;
  e = index(R"("a": "../s1.safetensors")");
  EXPECT_NE(e.find("not a file name in the folder"), std::string::npos) << e;
  e = index(R"("a": 5)");
  EXPECT_NE(e.find("weight_map['a']"), std::string::npos) << e;
  // A corrupt shard: the safetensors reader's error, naming the shard file.
  write_text(dir + "/s2.safetensors", "garbage!");
  e = index(R"("a": "s1.safetensors", "b": "s2.safetensors")");
  EXPECT_NE(e.find("s2.safetensors"), std::string::npos) << e;
  e = index(R"("a": "s1.safetensors")");
  EXPECT_EQ(e, "") << "an unlisted shard is not read";
}

TEST(HfModel, RealSafetensorsSamplesMapped) {
  SPORE_SHARED_DATA_DIR(dir, "safetensors-samples");
  // Each sample holds -3..2 cast to its dtype; the mapped reader must agree with the copying one on every file.
  int n = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    const std::string path = entry.path().string();
    SafetensorsFile mapped = map_safetensors(path, /*skip_unsupported=*/true);
    SafetensorsFile copied = read_safetensors(path, /*skip_unsupported=*/true);
    ++n;
    EXPECT_EQ(mapped.metadata, copied.metadata) << path;
    EXPECT_EQ(mapped.skipped, copied.skipped) << path;
    ASSERT_EQ(mapped.tensors.size(), copied.tensors.size()) << path;
    for (const auto& [name, t] : copied.tensors) {
      EXPECT_TRUE(mapped.tensors.at(name).bit_equal(t)) << path << " " << name;
      std::vector<double> want{-3, -2, -1, 0, 1, 2};
      if (t.dtype() == DType::u8) want = {253, 254, 255, 0, 1, 2};
      EXPECT_EQ(mapped.tensors.at(name).to_doubles(), want) << path << " " << name;
    }
  }
  EXPECT_EQ(n, 10);
  // The real files also work as the weights of a model folder.
  const std::string m = folder("real");
  write_text(m + "/config.json", R"({"model_type": "sample"})");
  fs::copy_file(dir + "/overall.safetensors", m + "/model.safetensors");
  EXPECT_NE(error_of([&] { read_hf_model(m); }).find("unsupported dtype"), std::string::npos);
  fs::remove(m + "/model.safetensors");
  fs::copy_file(dir + "/f.safetensors", m + "/model.safetensors");
  HfModel hm = read_hf_model(m);
  EXPECT_EQ(hm.tensor("f", {6}).to_doubles(), (std::vector<double>{-3, -2, -1, 0, 1, 2}));
}

}  // namespace
}  // namespace spore::io
