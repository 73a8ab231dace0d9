// spore graph: parse a text-IR file (or load a .spore/.onnx model), verify it, print it back (text or DOT),
// optionally after the default pass pipeline, after chosen passes (--print-after) or saving every pass's graph
// (--save-graphs). Errors point at file:line:col.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include <CLI/CLI.hpp>

#include <spore/spore.h>

#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

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

// The Graphviz `dot` executable in PATH, or "" when there is none.
std::string find_dot() {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = end > start ? dirs.substr(start, end - start) : ".";
    const std::string exe = dir + "/dot";
    if (::access(exe.c_str(), X_OK) == 0 && !std::filesystem::is_directory(exe)) return exe;
    start = end + 1;
  }
  return "";
}

// Renders DOT text to SVG with `dot -Tsvg` (run directly, no shell); dot's own message on failure.
std::string render_svg(const std::string& dot_text) {
  const std::string dot = find_dot();
  SPORE_CHECK(!dot.empty(), ErrorCode::unsupported,
              "--svg: Graphviz 'dot' was not found in PATH; install Graphviz (e.g. apt-get install graphviz) or write "
              "DOT with --dot and render it elsewhere");
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("spore_svg_{}", getpid());
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "graph.dot").string(), out = (dir / "graph.svg").string(), err = (dir / "err.txt").string();
  auto slurp = [](const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  std::string svg, message;
  int status = -1;
  {
    std::ofstream f(in, std::ios::binary);
    f << dot_text;
  }
  // posix_spawn, not fork: the process has pool threads, and the child only needs its stderr redirected.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string a0 = "dot", a1 = "-Tsvg", a2 = in, a3 = "-o", a4 = out;
  char* args[] = {a0.data(), a1.data(), a2.data(), a3.data(), a4.data(), nullptr};
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, dot.c_str(), &actions, nullptr, args, environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned == 0) waitpid(pid, &status, 0);
  if (spawned == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) svg = slurp(out);
  else message = slurp(err);
  std::filesystem::remove_all(dir);
  SPORE_CHECK(spawned == 0, ErrorCode::io_error, "--svg: cannot start '{}': {}", dot, std::strerror(spawned));
  while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.pop_back();
  for (char& c : message) c = c == '\n' ? ' ' : c;
  SPORE_CHECK(!svg.empty(), ErrorCode::io_error, "--svg: '{} -Tsvg' failed{}{}", dot, message.empty() ? "" : ": ", message);
  return svg;
}

}  // namespace

int cmd_graph(int argc, char** argv) {
  CLI::App app("spore graph: parse, verify and print a text-IR graph file (see docs/IR.md)", "spore graph");
  std::string file, output, save_dir;
  std::vector<std::string> print_after, shape_specs;
  int opt_level = 1;
  bool dot = false, svg = false, verify_only = false, passes = false;
  app.add_option("file", file, "text-IR file ('-' reads stdin), or a .spore / .onnx model")->required();
  auto* print_after_opt = app.add_option("--print-after", print_after,
                 "run the default pipeline and print the graph after this pass (repeatable; 'all' = every pass)");
  app.add_option("--save-graphs", save_dir, "run the default pipeline and write NN_<pass>.ir/.dot after each pass here");
  app.add_option("--opt-level", opt_level, "optimization level for the pipeline (0 skips the optimizing passes)")
      ->check(CLI::Range(0, 3));
  app.add_option("--input-shape", shape_specs, "fix input dims, e.g. x:1,3,32,32 (repeatable)");
  std::vector<std::string> disabled;
  app.add_option("--disable-pass", disabled, "skip this pass of the pipeline (repeatable)")->allow_extra_args(false);
  auto* dot_flag = app.add_flag("--dot", dot, "print Graphviz DOT instead of text IR");
  auto* svg_flag = app.add_flag("--svg", svg, "render the DOT graph to SVG with Graphviz `dot` (must be in PATH)")->excludes(dot_flag);
  app.add_flag("--verify-only", verify_only, "only parse and verify; print a one-line summary");
  app.add_flag("--passes", passes, "run the default pass pipeline (needs static input shapes) and print the result");
  app.add_option("--output,-o", output, "write to this file instead of stdout");
  svg_flag->excludes(print_after_opt);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::string text;
  std::unique_ptr<Graph> g;
  const auto ends_with = [&](const char* ext) {
    const std::string e = ext;
    return file.size() >= e.size() && file.compare(file.size() - e.size(), e.size(), e) == 0;
  };
  if (ends_with(".spore") || ends_with(".onnx")) {
    g = load_model_file(file, parse_input_shapes(shape_specs));
  } else if (file == "-") {
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
  if (!g) {
    g = parse_graph(text, source);  // parse errors already carry file:line:col
    if (!shape_specs.empty()) apply_input_shapes(*g, parse_input_shapes(shape_specs));
  }
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
  std::string records, dumps;
  if (passes || !print_after.empty() || !save_dir.empty() || !disabled.empty()) {
    for (const Value* v : g->inputs())
      SPORE_CHECK(v->type.is_static(), ErrorCode::shape_mismatch,
                  "{}: running passes needs static input shapes, but input %{} is {} (fix it with --input-shape {}:...)",
                  source, v->name, v->type.str(), v->name);
    // --print-after reads the graphs the manager saves; without --save-graphs they go to a scratch dir.
    const bool scratch = save_dir.empty() && !print_after.empty();
    const std::string dir =
        scratch ? (std::filesystem::temp_directory_path() / fmt::format("spore_graph_{}", getpid())).string() : save_dir;
    PassManager pm(PassOptions{
        .opt_level = opt_level, .verify_each = true, .disabled = disabled, .save_graphs_dir = dir, .inference = true});
    add_default_pipeline(pm);
    std::vector<std::string> wanted = print_after;
    try {
      pm.run(*g);
      for (size_t i = 0; i < pm.records().size(); ++i) {
        const PassRecord& r = pm.records()[i];
        records += fmt::format("# pass {:<16} {:>8.3f} ms{}\n", r.name, r.ms, r.skipped ? " (skipped)" : r.changed ? " (changed)" : "");
        const bool all = std::find(print_after.begin(), print_after.end(), "all") != print_after.end();
        if (!all && std::find(print_after.begin(), print_after.end(), r.name) == print_after.end()) continue;
        std::erase(wanted, r.name);
        if (r.skipped) {  // the manager saves nothing for a skipped pass
          dumps += fmt::format("# after pass {:02d} {} (skipped)\n", i + 1, r.name);
          continue;
        }
        const std::string path = fmt::format("{}/{:02d}_{}.{}", dir, i + 1, r.name, dot ? "dot" : "ir");
        std::ifstream in(path, std::ios::binary);
        SPORE_CHECK(in.good(), ErrorCode::io_error, "cannot read the graph saved after pass '{}' ('{}')", r.name, path);
        std::stringstream ss;
        ss << in.rdbuf();
        dumps += fmt::format("# after pass {:02d} {}\n{}", i + 1, r.name, ss.str());
      }
    } catch (...) {
      if (scratch) std::filesystem::remove_all(dir);
      throw;
    }
    if (scratch) std::filesystem::remove_all(dir);
    std::erase(wanted, "all");
    if (!wanted.empty()) {
      std::string names;
      for (const PassRecord& r : pm.records()) names += (names.empty() ? "" : ", ") + r.name;
      SPORE_FAIL(ErrorCode::invalid_argument, "--print-after: no pass named '{}' in the pipeline ({})", wanted[0], names);
    }
  }
  const std::string out = !print_after.empty() ? records + dumps
                          : svg               ? render_svg(graph_to_dot(*g))
                          : dot               ? graph_to_dot(*g)
                                              : records + print_graph(*g);
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
