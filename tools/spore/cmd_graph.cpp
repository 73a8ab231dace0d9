// spore graph: parse a text-IR file, verify it, print it back (text or DOT), optionally after the
// default pass pipeline. Errors point at file:line:col.
#include <cctype>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include <CLI/CLI.hpp>

#include <spore/spore.h>

#include "tools/spore/commands.h"

namespace spore::cli {
namespace {

// Verification errors name a node "op 'name' (%value)"; point them at the line defining that value.
std::string locate(const std::string& text, const std::string& file, const std::string& msg) {
  std::smatch m;
  if (!std::regex_search(msg, m, std::regex(R"(\(%([^)]+)\))"))) return file + ": " + msg;
  const std::string name = m[1];
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    for (const std::string& ref : {"%" + name, "%\"" + name + "\""}) {
      const size_t at = line.find(ref);
      if (at == std::string::npos) continue;
      const size_t after = at + ref.size();
      if (after < line.size() && (std::isalnum(static_cast<unsigned char>(line[after])) || line[after] == '_' || line[after] == '.'))
        continue;  // a longer name
      // A definition: among the results before " = ", or a signature input ("%x: f32[...]").
      const size_t eq = line.find(" = ");
      const bool defines = (eq != std::string::npos && at < eq && line.find_first_not_of(' ') == line.find('%')) ||
                           (line.rfind("graph", 0) == 0 && line.compare(after, 1, ":") == 0);
      if (defines) return fmt::format("{}:{}:{}: {}", file, no, at + 1, msg);
    }
  }
  return file + ": " + msg;
}

}  // namespace

int cmd_graph(int argc, char** argv) {
  CLI::App app("spore graph: parse, verify and print a text-IR graph file (see docs/IR.md)", "spore graph");
  std::string file, output;
  bool dot = false, verify_only = false, passes = false;
  app.add_option("file", file, "text-IR file ('-' reads stdin)")->required();
  app.add_flag("--dot", dot, "print Graphviz DOT instead of text IR");
  app.add_flag("--verify-only", verify_only, "only parse and verify; print a one-line summary");
  app.add_flag("--passes", passes, "run the default pass pipeline (needs static input shapes) and print the result");
  app.add_option("--output,-o", output, "write to this file instead of stdout");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::string text;
  if (file == "-") {
    std::stringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    std::ifstream in(file, std::ios::binary);
    SPORE_CHECK(in.good(), ErrorCode::io_error, "cannot open '{}'", file);
    std::stringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  const std::string source = file == "-" ? "<stdin>" : file;
  std::unique_ptr<Graph> g = parse_graph(text, source);  // parse errors already carry file:line:col
  try {
    verify_graph(*g);
  } catch (const Error& e) {
    throw Error(e.code(), locate(text, source, e.what()));
  }
  if (verify_only) {
    std::printf("%s: ok (%zu nodes, %zu inputs, %zu outputs)\n", source.c_str(), g->num_live_nodes(), g->inputs().size(),
                g->outputs().size());
    return 0;
  }
  std::string records;
  if (passes) {
    for (const Value* v : g->inputs())
      SPORE_CHECK(v->type.is_static(), ErrorCode::shape_mismatch,
                  "{}: --passes needs static input shapes, but input %{} is {}", source, v->name, v->type.str());
    PassManager pm(PassOptions{.verify_each = true});
    add_default_pipeline(pm);
    pm.run(*g);
    for (const PassRecord& r : pm.records())
      records += fmt::format("# pass {:<16} {:>8.3f} ms{}\n", r.name, r.ms, r.skipped ? " (skipped)" : r.changed ? " (changed)" : "");
  }
  const std::string out = dot ? graph_to_dot(*g) : records + print_graph(*g);
  if (output.empty()) {
    std::fwrite(out.data(), 1, out.size(), stdout);
  } else {
    std::ofstream f(output, std::ios::binary);
    f << out;
    SPORE_CHECK(f.good(), ErrorCode::io_error, "cannot write '{}'", output);
  }
  return 0;
}

}  // namespace spore::cli
