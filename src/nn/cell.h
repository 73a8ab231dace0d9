#pragma once
// nn::Cell: the base of layers and models (MindSpore's Cell). A cell owns named parameters and refers to
// sub-cells; construct() is its forward pass, written with ops:: so it runs eagerly or traced.
//
//   struct Net : nn::Cell {
//     nn::Dense fc1{4, 8}, fc2{8, 2};
//     nn::ReLU relu;
//     Net() { SPORE_REGISTER_CELLS(fc1, relu, fc2); }   // names "fc1", "relu", "fc2"
//     Tensor construct(const Tensor& x) override { return fc2(relu(fc1(x))); }
//   };
//   for (auto& [name, p] : net.parameters_and_names()) ...   // "fc1.weight", "fc1.bias", ...
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace spore::nn {

// A parameter slot. Its address never changes, so Tensor* handles stay valid across to(dtype) and
// optimizer updates that assign a new tensor to `value`.
struct Parameter {
  std::string name;
  Tensor value;
  bool requires_grad = true;  // false: a buffer such as BatchNorm's running mean
};

class Cell {
 public:
  Cell() = default;
  virtual ~Cell() = default;
  // Sub-cells are referred to by address: a cell is neither copyable nor movable.
  Cell(const Cell&) = delete;
  Cell& operator=(const Cell&) = delete;

  // Forward pass: override one. The span form forwards a single input to the single-input form; the
  // single-input form fails unless overridden.
  virtual Tensor construct(const Tensor& x);
  virtual Tensor construct(std::span<const Tensor> xs);
  Tensor operator()(const Tensor& x) { return construct(x); }
  Tensor operator()(std::span<const Tensor> xs) { return construct(xs); }
  Tensor operator()(const Tensor& a, const Tensor& b) {
    const Tensor xs[2] = {a, b};
    return construct(std::span<const Tensor>(xs));
  }

  // Registration. A parameter name must be unique within its cell and contain no '.'.
  Tensor& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  void register_cell(const std::string& name, Cell& cell);
  // Registers cells named by position: "0", "1", ... (after the cells already registered).
  template <typename... Cells>
  void register_cells(Cells&... cells) {
    (register_cell(std::to_string(children_.size()), cells), ...);
  }
  // Used by SPORE_REGISTER_CELLS: `names` is the comma-separated stringized argument list.
  template <typename... Cells>
  void register_cells_named(std::string_view names, Cells&... cells) {
    std::vector<std::string> split = split_names(names, sizeof...(cells));
    size_t i = 0;
    (register_cell(split[i++], cells), ...);
  }

  // All parameters (recursively, dotted names, registration order; a cell registered twice is listed once).
  std::vector<std::pair<std::string, Tensor*>> parameters_and_names(bool recurse = true);
  std::vector<Tensor*> trainable_params(bool recurse = true);
  std::vector<Parameter*> parameter_slots(bool recurse = true);
  Tensor* parameter(const std::string& dotted_name);  // nullptr if absent
  std::vector<std::pair<std::string, Cell*>> cells_and_names();  // direct children
  int64_t num_parameters(bool trainable_only = false);

  void set_train(bool mode = true);
  bool training() const { return training_; }
  // Converts floating parameters (and buffers) to `dtype` in place; the Tensor* handles stay valid.
  void to(DType dtype);

 private:
  static std::vector<std::string> split_names(std::string_view names, size_t n);
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out,
               std::vector<const Cell*>& seen, bool recurse);

  std::vector<std::unique_ptr<Parameter>> params_;
  std::vector<std::pair<std::string, Cell*>> children_;
  bool training_ = false;
};

// Registers member cells under their own variable names: SPORE_REGISTER_CELLS(conv1, relu, fc).
#define SPORE_REGISTER_CELLS(...) register_cells_named(#__VA_ARGS__, __VA_ARGS__)

// A container that owns its cells and applies them in order.
class SequentialCell : public Cell {
 public:
  SequentialCell() = default;
  template <typename... C>
  explicit SequentialCell(std::unique_ptr<C>... cells) {
    (append(std::move(cells)), ...);
  }
  void append(std::unique_ptr<Cell> cell);
  size_t size() const { return owned_.size(); }
  Cell& operator[](size_t i) { return *owned_.at(i); }
  Tensor construct(const Tensor& x) override;

 private:
  std::vector<std::unique_ptr<Cell>> owned_;
};

// Owns cells and registers them ("0", "1", ...) but defines no forward pass: the parent decides.
class CellList : public Cell {
 public:
  CellList() = default;
  void append(std::unique_ptr<Cell> cell);
  size_t size() const { return owned_.size(); }
  Cell& operator[](size_t i) { return *owned_.at(i); }

 private:
  std::vector<std::unique_ptr<Cell>> owned_;
};

// The training step that random and stateful cells key on (RAII, per thread; scopes nest). train::Model opens
// one around each training step with `counter` = the step (an i64/i32 scalar tensor; in graph mode the
// symbolic plan input). While one is active:
//  - Dropout draws its mask from (its seed, how many times it was called in this scope) with the counter as
//    the dropout op's offset input, so a compiled plan draws a fresh mask every step and two calls of one
//    cell in a step differ;
//  - BatchNorm (train mode) assigns its updated running stats to its buffers even while tracing (the caller
//    makes the buffers plan inputs and outputs, and restores the slots after the trace).
// Outside a scope: Dropout keys on a host call counter, and BatchNorm skips the update under a trace.
class StepScope {
 public:
  explicit StepScope(Tensor counter);
  ~StepScope();
  StepScope(const StepScope&) = delete;
  StepScope& operator=(const StepScope&) = delete;

  // The innermost active scope on this thread, or nullptr.
  static StepScope* current();
  const Tensor& counter() const { return counter_; }
  // 0, 1, 2, ... for successive calls with the same key (a cell's address) in this scope.
  int64_t next_call(const void* key);

 private:
  Tensor counter_;
  StepScope* prev_;
  std::vector<std::pair<const void*, int64_t>> calls_;  // few random cells per net: a linear scan is enough
};

// Gradients of a scalar loss with respect to a cell's trainable parameters, keyed by dotted name.
struct LossAndGrads {
  Tensor loss;
  std::map<std::string, Tensor> grads;
};
// Runs loss_fn() with the cell's trainable parameters watched by a tape (the cell sees the watched
// handles while loss_fn runs, then gets its own back). Works eagerly and under a CompiledFunction trace.
// In a trace the parameters are captured as constants today: the plan's gradients are right for the
// values at trace time, but an update made afterwards is not seen by the cached plan. Training in graph
// mode needs parameters bound as graph inputs by reference (DESIGN.md §2), a runtime change.
// `on_grad(name, grad)`, if given, gets each gradient as soon as backward has finished it (GradientTape::gradient's
// `ready`), after loss_fn has returned; every trainable parameter once, those the loss does not reach last (zeros).
LossAndGrads value_and_grad(Cell& cell, const std::function<Tensor()>& loss_fn,
                            const std::function<void(const std::string& name, const Tensor& grad)>& on_grad = nullptr);

}  // namespace spore::nn
