// spore check-ops: which ops of a model spore can run. ONNX models: every op type with its count and status
// (supported / decomposed / unsupported, with the node names of unsupported ones). .spore models: every spore op
// with its count and how the CPU backend runs it (kernel / decomposition / unsupported).
// ONNX models whose ops are all supported are also compiled (batch 1, seeded random inputs, or the --input files;
// deploy::check_compiles), so "supported" means it runs; a compile that fails is never reported as compiled.
// Exit codes: 0 all supported (and, for ONNX, it compiles), 3 some unsupported or it does not compile
// (1 for errors such as an unreadable file).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <spore/spore.h>

#include "io/model_file.h"
#include "io/onnx/onnx.h"
#include "ops/backend.h"
#include "ops/kernel.h"
#include "ops/registry.h"
#include "deploy/session.h"
#include "tools/spore/commands.h"
#include "tools/spore/model_util.h"

namespace spore::cli {
namespace {

constexpr int exit_unsupported = 3;

bool is_spore_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SPORE_CHECK(f.good(), ErrorCode::io_error, "cannot open model file '{}'", path);
  char magic[8] = {};
  f.read(magic, 8);
  return f.gcount() == 8 && std::string(magic, 8) == "SPOREMDL";
}

int check_onnx(const std::string& path, bool json, const std::map<std::string, std::vector<Dim>>& dims,
               const std::vector<std::string>& input_specs) {
  const io::OnnxImportReport rep = io::check_onnx_ops(path);
  deploy::CompileCheck cc;
  if (!rep.has_unsupported()) {
    deploy::SessionOptions o;
    o.input_dims = dims;
    RunInputs given;
    if (!input_specs.empty()) {  // read against the model's inputs as `spore run` does
      const deploy::Session s(path, o);
      given = gather_run_inputs(s, input_specs, 1, false, 0, false, path);
    }
    cc = deploy::check_compiles(path, o, given.tensors, given.layout);
  }
  const bool ok = !rep.has_unsupported() && cc.compiled;
  if (json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& s : rep.ops) {
      nlohmann::json o = {{"op", s.op_type}, {"domain", s.domain}, {"count", s.count}, {"status", s.status}, {"note", s.note}};
      if (s.status == "unsupported") o["nodes"] = s.nodes;
      ops.push_back(o);
    }
    std::cout << nlohmann::json{{"format", "onnx"}, {"opset", rep.opset}, {"producer", rep.producer},
                                {"all_supported", !rep.has_unsupported()}, {"compiles", cc.compiled},
                                {"compile_note", cc.note}, {"ops", ops}}
                     .dump()
              << std::endl;
  } else {
    std::cout << path << ": " << rep.format();
    if (!rep.has_unsupported()) std::cout << "All ops supported; " << cc.note << "\n";
  }
  if (rep.has_unsupported()) return exit_unsupported;
  return ok ? 0 : exit_unsupported;
}

struct SporeOpRow {
  int64_t count = 0;
  std::string status;  // kernel | decomposition | unsupported
  std::vector<std::string> nodes;  // of unsupported ones
  std::set<std::string> dtypes;
};

int check_spore(const std::string& path, bool json) {
  std::unique_ptr<Graph> g = io::load_model(path);
  std::map<std::string, SporeOpRow> rows;
  auto rank = [](const std::string& s) { return s == "unsupported" ? 2 : s == "decomposition" ? 1 : 0; };
  for (const Node* n : g->nodes()) {
    if (n->is_input() || n->is_constant()) continue;
    const OpDef* d = op_registry().find(n->op);
    const std::string name(op_name(n->op));
    SporeOpRow& r = rows[name];
    ++r.count;
    std::string status = "unsupported";
    if (d) {
      std::vector<TensorType> ins, outs;
      for (const Value* v : n->inputs) ins.push_back(v->type);
      for (const Value* v : n->outputs) outs.push_back(v->type);
      const DType dt = d->dispatch_dtype(ins, outs);
      r.dtypes.insert(std::string(dtype_name(dt)));
      // The CPU backend's plan-time answer for this node's attributes and dtype (what compiling a plan asks).
      if (backend_impl(Backend::cpu).supports(n->op, d->normalize(n->attrs, n->label()), dt)) status = "kernel";
      else if (d->decompose) status = "decomposition";
    }
    if (status == "unsupported") r.nodes.push_back(n->name.empty() ? n->label() : n->name);
    if (r.status.empty() || rank(status) > rank(r.status)) r.status = status;
  }
  bool any_unsupported = false;
  for (const auto& [op, r] : rows) any_unsupported = any_unsupported || r.status == "unsupported";
  if (json) {
    nlohmann::json ops = nlohmann::json::array();
    for (const auto& [op, r] : rows) {
      nlohmann::json o = {{"op", op}, {"count", r.count}, {"status", r.status},
                          {"dtypes", std::vector<std::string>(r.dtypes.begin(), r.dtypes.end())}};
      if (r.status == "unsupported") o["nodes"] = r.nodes;
      ops.push_back(o);
    }
    std::cout << nlohmann::json{{"format", "spore"}, {"all_supported", !any_unsupported}, {"ops", ops}}.dump() << std::endl;
  } else {
    std::cout << fmt::format("{}: spore model, {} op types (CPU backend)\n", path, rows.size());
    std::cout << fmt::format("  {:<20}  {:>5}  {:<13}  {}\n", "op", "count", "status", "dtypes / nodes");
    for (const auto& [op, r] : rows) {
      std::string extra;
      for (const auto& d : r.dtypes) extra += (extra.empty() ? "" : ",") + d;
      if (r.status == "unsupported") {
        extra += "; nodes:";
        for (const auto& n : r.nodes) extra += " " + n;
      }
      std::cout << fmt::format("  {:<20}  {:>5}  {:<13}  {}\n", op, r.count, r.status, extra);
    }
    std::cout << (any_unsupported ? "Some ops have neither a CPU kernel nor a decomposition.\n" : "All ops supported.\n");
  }
  return any_unsupported ? exit_unsupported : 0;
}

}  // namespace

int cmd_check_ops(int argc, char** argv) {
  CLI::App app(
      "spore check-ops: lists the ops of a model (.onnx or .spore) with counts and whether spore supports them; "
      "exit code 0 when all are supported, 3 when some are not",
      "spore check-ops");
  std::string model;
  bool json = false;
  std::vector<std::string> shape_specs, input_specs;
  app.add_option("model", model, "model file (.onnx or .spore)")->required();
  app.add_option("--input", input_specs,
                 "NAME=FILE.npy (repeatable): compile for this tensor (other inputs random, batch 1); needed for models "
                 "that take an input as an attribute (a shape, k) and compile once per value")
      ->allow_extra_args(false);
  app.add_option("--input-shape", shape_specs, "NAME:D0,D1,... fixes input dims for the compile check (repeatable)")
      ->allow_extra_args(false);
  app.add_flag("--json", json,
               "print {\"format\", \"all_supported\", \"ops\": [{\"op\", \"count\", \"status\", \"nodes\"...}]}");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (is_spore_file(model)) return check_spore(model, json);
  return check_onnx(model, json, input_dims_of(parse_input_shapes(shape_specs)), input_specs);
}

}  // namespace spore::cli
