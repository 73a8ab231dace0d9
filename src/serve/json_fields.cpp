#include "serve/json_fields.h"

#include <cmath>

#include <fmt/format.h>

#include "serve/errors.h"

namespace spore::serve {

std::string json_kind(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

std::string json_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
std::string json_path(const std::string& path, size_t index) { return fmt::format("{}[{}]", path, index); }

Fields::Fields(const nlohmann::json& obj, std::string path) : obj_(obj), path_(std::move(path)) {
  if (!obj_.is_object())
    bad_request(path_, fmt::format("expected a JSON object, got {}", json_kind(obj_)));
}

const nlohmann::json* Fields::get(const std::string& key) const {
  auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string expect_string(const nlohmann::json& j, const std::string& path) {
  if (!j.is_string()) bad_request(path, fmt::format("expected a string, got {}", json_kind(j)));
  return j.get<std::string>();
}

int64_t expect_integer(const nlohmann::json& j, const std::string& path, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (j.is_number_integer()) {
    if (j.is_number_unsigned() && j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      bad_request(path, fmt::format("{} is out of range [{}, {}]", j.get<uint64_t>(), lo, hi));
    v = j.get<int64_t>();
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
      bad_request(path, fmt::format("expected an integer, got {}", j.dump()));
    v = static_cast<int64_t>(d);
  } else {
    bad_request(path, fmt::format("expected an integer, got {}", json_kind(j)));
  }
  if (v < lo || v > hi) bad_request(path, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
  return v;
}

std::optional<std::string> Fields::str(const std::string& key) const {
  const nlohmann::json* j = get(key);
  if (!j) return std::nullopt;
  return expect_string(*j, path(key));
}

std::optional<bool> Fields::boolean(const std::string& key) const {
  const nlohmann::json* j = get(key);
  if (!j) return std::nullopt;
  if (!j->is_boolean()) bad_request(path(key), fmt::format("expected a boolean, got {}", json_kind(*j)));
  return j->get<bool>();
}

std::optional<double> Fields::number(const std::string& key, double lo, double hi) const {
  const nlohmann::json* j = get(key);
  if (!j) return std::nullopt;
  if (!j->is_number()) bad_request(path(key), fmt::format("expected a number, got {}", json_kind(*j)));
  const double v = j->get<double>();
  if (!(v >= lo && v <= hi)) bad_request(path(key), fmt::format("{} is out of range [{}, {}]", j->dump(), lo, hi));
  return v;
}

std::optional<int64_t> Fields::integer(const std::string& key, int64_t lo, int64_t hi) const {
  const nlohmann::json* j = get(key);
  if (!j) return std::nullopt;
  return expect_integer(*j, path(key), lo, hi);
}

}  // namespace spore::serve
