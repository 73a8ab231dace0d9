// PLACEHOLDER (owned by the format helper): replaced by the real .spore reader/writer.
#include "base/error.h"
#include "io/model_file.h"
namespace spore::io {
void save_spore(const Graph&, const std::string& path, const std::map<std::string, std::string>&) { SPORE_FAIL(ErrorCode::unsupported, "save_spore: not yet ({})", path); }
std::string encode_spore(const Graph&, const std::map<std::string, std::string>&) { SPORE_FAIL(ErrorCode::unsupported, "encode_spore: not yet"); }
std::unique_ptr<Graph> load_spore(const std::string& path, SporeFileInfo*) { SPORE_FAIL(ErrorCode::unsupported, "load_spore: not yet ({})", path); }
std::unique_ptr<Graph> parse_spore(std::span<const uint8_t>, const std::string& name, SporeFileInfo*) { SPORE_FAIL(ErrorCode::unsupported, "parse_spore: not yet ({})", name); }
}  // namespace spore::io
