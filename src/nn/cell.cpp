#include "nn/cell.h"

#include <algorithm>

#include "autodiff/autodiff.h"
#include "ops/ops.h"

namespace spore::nn {

Tensor Cell::construct(const Tensor&) {
  throw_error(ErrorCode::unsupported, "nn::Cell: this cell does not define construct(const Tensor&)");
}

Tensor Cell::construct(std::span<const Tensor> xs) {
  SPORE_CHECK(xs.size() == 1, ErrorCode::invalid_argument,
              "nn::Cell: this cell takes 1 input, got {}", xs.size());
  return construct(xs[0]);
}

Tensor& Cell::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  SPORE_CHECK(!name.empty() && name.find('.') == std::string::npos, ErrorCode::invalid_argument,
              "nn::Cell::register_parameter: invalid name '{}' (must be non-empty, without '.')", name);
  SPORE_CHECK(value.defined(), ErrorCode::invalid_argument,
              "nn::Cell::register_parameter: parameter '{}' is undefined", name);
  for (const auto& p : params_)
    SPORE_CHECK(p->name != name, ErrorCode::invalid_argument,
                "nn::Cell::register_parameter: parameter '{}' already registered", name);
  SPORE_CHECK(!requires_grad || is_floating(value.dtype()), ErrorCode::dtype_mismatch,
              "nn::Cell::register_parameter: trainable parameter '{}' must be floating, got {}", name,
              dtype_name(value.dtype()));
  params_.push_back(std::make_unique<Parameter>(Parameter{name, std::move(value), requires_grad}));
  return params_.back()->value;
}

void Cell::register_cell(const std::string& name, Cell& cell) {
  SPORE_CHECK(!name.empty() && name.find('.') == std::string::npos, ErrorCode::invalid_argument,
              "nn::Cell::register_cell: invalid name '{}' (must be non-empty, without '.')", name);
  SPORE_CHECK(&cell != this, ErrorCode::invalid_argument, "nn::Cell::register_cell: '{}' is the cell itself", name);
  for (const auto& [n, c] : children_)
    SPORE_CHECK(n != name, ErrorCode::invalid_argument, "nn::Cell::register_cell: cell '{}' already registered",
                name);
  children_.emplace_back(name, &cell);
  cell.set_train(training_);
}

std::vector<std::string> Cell::split_names(std::string_view names, size_t n) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= names.size()) {
    size_t end = names.find(',', start);
    if (end == std::string_view::npos) end = names.size();
    std::string_view part = names.substr(start, end - start);
    while (!part.empty() && (part.front() == ' ' || part.front() == '\n' || part.front() == '\t')) part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\n' || part.back() == '\t')) part.remove_suffix(1);
    // Members like `blocks[0]` or `this->fc` still get a usable name.
    std::string name;
    for (char ch : part) name += (ch == '.' || ch == '[' || ch == ']' || ch == '>' || ch == '-') ? '_' : ch;
    out.push_back(name);
    start = end + 1;
  }
  SPORE_CHECK(out.size() == n, ErrorCode::invalid_argument,
              "nn::Cell::register_cells_named: {} names for {} cells", out.size(), n);
  return out;
}

void Cell::collect(const std::string& prefix, std::vector<std::pair<std::string, Parameter*>>& out,
                   std::vector<const Cell*>& seen, bool recurse) {
  if (std::find(seen.begin(), seen.end(), this) != seen.end()) return;
  seen.push_back(this);
  for (auto& p : params_) out.emplace_back(prefix + p->name, p.get());
  if (!recurse) return;
  for (auto& [name, c] : children_) c->collect(prefix + name + ".", out, seen, true);
}

std::vector<Parameter*> Cell::parameter_slots(bool recurse) {
  std::vector<std::pair<std::string, Parameter*>> all;
  std::vector<const Cell*> seen;
  collect("", all, seen, recurse);
  std::vector<Parameter*> out;
  for (auto& [n, p] : all) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> Cell::parameters_and_names(bool recurse) {
  std::vector<std::pair<std::string, Parameter*>> all;
  std::vector<const Cell*> seen;
  collect("", all, seen, recurse);
  std::vector<std::pair<std::string, Tensor*>> out;
  for (auto& [n, p] : all) out.emplace_back(n, &p->value);
  return out;
}

std::vector<Tensor*> Cell::trainable_params(bool recurse) {
  std::vector<Tensor*> out;
  for (Parameter* p : parameter_slots(recurse))
    if (p->requires_grad) out.push_back(&p->value);
  return out;
}

Tensor* Cell::parameter(const std::string& dotted_name) {
  for (auto& [n, t] : parameters_and_names())
    if (n == dotted_name) return t;
  return nullptr;
}

std::vector<std::pair<std::string, Cell*>> Cell::cells_and_names() { return children_; }

int64_t Cell::num_parameters(bool trainable_only) {
  int64_t n = 0;
  for (Parameter* p : parameter_slots())
    if (!trainable_only || p->requires_grad) n += p->value.numel();
  return n;
}

void Cell::set_train(bool mode) {
  training_ = mode;
  for (auto& [n, c] : children_) c->set_train(mode);
}

void Cell::to(DType dtype) {
  SPORE_CHECK(is_floating(dtype), ErrorCode::dtype_mismatch, "nn::Cell::to: expected a floating dtype, got {}",
              dtype_name(dtype));
  autodiff::NoGradGuard no_grad;
  for (Parameter* p : parameter_slots())
    if (is_floating(p->value.dtype()) && p->value.dtype() != dtype) p->value = ops::cast(p->value, dtype);
}

void SequentialCell::append(std::unique_ptr<Cell> cell) {
  SPORE_CHECK(cell != nullptr, ErrorCode::invalid_argument, "nn::SequentialCell::append: null cell");
  owned_.push_back(std::move(cell));
  register_cell(std::to_string(owned_.size() - 1), *owned_.back());
}

Tensor SequentialCell::construct(const Tensor& x) {
  Tensor y = x;
  for (auto& c : owned_) y = (*c)(y);
  return y;
}

void CellList::append(std::unique_ptr<Cell> cell) {
  SPORE_CHECK(cell != nullptr, ErrorCode::invalid_argument, "nn::CellList::append: null cell");
  owned_.push_back(std::move(cell));
  register_cell(std::to_string(owned_.size() - 1), *owned_.back());
}

namespace {
thread_local StepScope* t_step_scope = nullptr;
}  // namespace

StepScope::StepScope(Tensor counter) : counter_(std::move(counter)), prev_(t_step_scope) {
  SPORE_CHECK(counter_.defined(), ErrorCode::invalid_argument, "nn::StepScope: the step counter is undefined");
  SPORE_CHECK(counter_.dtype() == DType::i64 || counter_.dtype() == DType::i32, ErrorCode::dtype_mismatch,
              "nn::StepScope: expected an i64 or i32 step counter, got {}", dtype_name(counter_.dtype()));
  SPORE_CHECK(counter_.rank() == 0 || (counter_.rank() == 1 && counter_.dim(0) == 1), ErrorCode::shape_mismatch,
              "nn::StepScope: expected a scalar step counter (shape [] or [1]), got {}", shape_str(counter_.shape()));
  t_step_scope = this;
}

StepScope::~StepScope() { t_step_scope = prev_; }

StepScope* StepScope::current() { return t_step_scope; }

int64_t StepScope::next_call(const void* key) {
  for (auto& [k, n] : calls_)
    if (k == key) return n++;
  calls_.emplace_back(key, 1);
  return 0;
}

LossAndGrads value_and_grad(Cell& cell, const std::function<Tensor()>& loss_fn,
                            const std::function<void(const std::string& name, const Tensor& grad)>& on_grad) {
  std::vector<std::pair<std::string, Parameter*>> all;
  {
    std::vector<std::pair<std::string, Tensor*>> named = cell.parameters_and_names();
    std::vector<Parameter*> slots = cell.parameter_slots();
    for (size_t i = 0; i < slots.size(); ++i)
      if (slots[i]->requires_grad) all.emplace_back(named[i].first, slots[i]);
  }
  std::vector<Tensor> saved, sources;
  LossAndGrads r;
  {
    autodiff::GradientTape tape;
    // The cell reads its parameters through the slots, so swapping in watched handles (same data) is
    // enough for the tape to see every use; the originals go back even if loss_fn throws.
    struct Restore {
      std::vector<std::pair<std::string, Parameter*>>& all;
      std::vector<Tensor>& saved;
      ~Restore() {
        for (size_t i = 0; i < saved.size(); ++i) all[i].second->value = saved[i];
      }
    } restore{all, saved};
    for (auto& [n, p] : all) {
      saved.push_back(p->value);
      p->value = tape.watch(p->value);
      sources.push_back(p->value);
    }
    r.loss = loss_fn();
    SPORE_CHECK(r.loss.defined(), ErrorCode::invalid_argument, "nn::value_and_grad: the loss is undefined");
    autodiff::GradientTape::ReadyFn ready;
    if (on_grad) ready = [&](size_t k, const Tensor& g) { on_grad(all[k].first, g); };
    std::vector<Tensor> g = tape.gradient(r.loss, sources, Tensor(), ready);
    for (size_t i = 0; i < all.size(); ++i) r.grads[all[i].first] = g[i];
  }
  r.loss.autograd_slot().reset();
  return r;
}

}  // namespace spore::nn
