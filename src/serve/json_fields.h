#pragma once
// Typed reads of a JSON request's fields that fail with a 400 naming the field's JSON path ("messages[2].content:
// expected a string, got a number"). A field that is absent or null counts as not given, as OpenAI's API treats it;
// fields the reader is never asked about are ignored (OpenAI ignores unknown fields too).
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace spore::serve {

// "a string", "a number", "an array", ... for error messages.
std::string json_kind(const nlohmann::json& j);
// path + "." + key, or key alone at the top level; path + "[i]" for elements.
std::string json_path(const std::string& path, const std::string& key);
std::string json_path(const std::string& path, size_t index);

class Fields {
 public:
  // `obj` must be a JSON object (else a 400 naming `path`, or "request body" at the top).
  Fields(const nlohmann::json& obj, std::string path);

  const nlohmann::json* get(const std::string& key) const;  // nullptr when absent or null
  std::string path(const std::string& key) const { return json_path(path_, key); }

  std::optional<std::string> str(const std::string& key) const;
  std::optional<bool> boolean(const std::string& key) const;
  // Numbers within [lo, hi] (inclusive); integers also accept an integral float (2.0).
  std::optional<double> number(const std::string& key, double lo, double hi) const;
  std::optional<int64_t> integer(const std::string& key, int64_t lo, int64_t hi) const;

 private:
  const nlohmann::json& obj_;
  std::string path_;
};

// The same checks on a value that is not an object's field (array elements): `path` names it.
std::string expect_string(const nlohmann::json& j, const std::string& path);
int64_t expect_integer(const nlohmann::json& j, const std::string& path, int64_t lo, int64_t hi);

}  // namespace spore::serve
