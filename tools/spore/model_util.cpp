#include "tools/spore/model_util.h"

#include <cctype>
#include <regex>
#include <string>
#include <utility>

#include "base/error.h"

namespace spore::cli {

// "2GB", "512MiB", "1.5e9", "300000000B": decimal units are powers of 1000, the *iB ones powers of 1024.
size_t parse_bytes(const std::string& text) {
  static const std::regex re(R"(\s*([0-9]+(?:\.[0-9]*)?(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*)");
  std::smatch m;
  SPORE_CHECK(std::regex_match(text, m, re), ErrorCode::invalid_argument,
              "--max-memory '{}': expected a size such as 2GB, 512MiB or 1000000", text);
  std::string unit = m[2].str();
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::pair<const char*, double> units[] = {{"", 1},         {"b", 1},           {"k", 1e3},  {"kb", 1e3},
                                                  {"m", 1e6},      {"mb", 1e6},        {"g", 1e9},  {"gb", 1e9},
                                                  {"t", 1e12},     {"tb", 1e12},       {"kib", 1024.0},
                                                  {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  for (const auto& [name, scale] : units)
    if (unit == name) {
      const double bytes = std::stod(m[1].str()) * scale;
      SPORE_CHECK(bytes >= 1 && bytes < 9e18, ErrorCode::invalid_argument, "--max-memory '{}': out of range", text);
      return static_cast<size_t>(bytes);
    }
  SPORE_FAIL(ErrorCode::invalid_argument, "--max-memory '{}': unknown unit '{}' (use B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)",
             text, m[2].str());
}

}  // namespace spore::cli
