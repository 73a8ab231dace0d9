#pragma once
// What the pattern passes share on top of the rewrite engine (ir/rewrite/rewrite.h): the op registry's facts,
// replacements written as text, and the checks on constants that rules make.
//
//   RewriteSet rs("recognize", registry_facts());
//   rs.add(replace_rule("silu", "mul(x, sigmoid(x))", "silu(x)", [](Match& mt, Rewriter&, Build& b) {
//     return same_type(mt, mt["x"]->type);       // what the pattern cannot say; b.attrs for the new node
//   }));
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/rewrite/rewrite.h"

namespace spore {

// Commutativity and the like, from the OpDefs.
const rewrite::OpFacts& registry_facts();

// What a rule's check decides about the node that replaces the match.
struct Build {
  Attrs attrs;
  std::optional<std::string> name;  // unset: the root's node name
};

// "silu(x)", "attention(q, k, v, mask?)": an op and the captures that are its inputs (a `?` input is left out
// when nothing was captured under that name).
class Replacement {
 public:
  explicit Replacement(std::string_view text);
  // Builds the node with the captures as inputs. If the op accepts them and infers the root's output type, the
  // node takes over the root's uses and its value name (the old value is renamed <name>.unfused<id>), the matched
  // nodes left unused are erased and true is returned; otherwise the graph is as before and false is returned.
  bool apply(const rewrite::Match& mt, rewrite::Rewriter& rw, const Build& b) const;

 private:
  OpId op_{};
  std::vector<std::pair<std::string, bool>> args_;  // capture, optional
};

// A rule that replaces its match (interior nodes used only inside it) by `replacement` when `check` accepts the
// match; `check` may add constants (through the Rewriter, so they go again if the rule declines) and captures.
using RuleCheck = std::function<bool(rewrite::Match&, rewrite::Rewriter&, Build&)>;
rewrite::RewriteRule replace_rule(std::string name, std::string_view pattern, std::string_view replacement,
                                  RuleCheck check = nullptr);

// Gives the root's uses (and its value name, when it is a graph output) to `to`: a simplification's
// replacement by a value that already exists. False (nothing changed) when `to` is a graph input or already a
// graph output and the root is an output.
bool forward_root(rewrite::Match& mt, rewrite::Rewriter& rw, Value* to);

// ---- checks on constants and types

const Tensor* constant_payload(const Value* v);
// The value of a one-element constant (any rank), if v is one and it is finite.
std::optional<double> scalar_constant(const Value* v);
// Every element of the constant equals v (zero_sign, for v == 0: -1 = any sign, 0 = +0 only, 1 = -0 only).
bool constant_all(const Value* c, double v, int zero_sign = -1);
bool float_dtype(DType t);
// The node's attributes with the schema's defaults filled in.
Attrs normalized(const Node* n);
// Every matched node's output 0 has type `t`.
bool same_type(const rewrite::Match& mt, const TensorType& t);

}  // namespace spore
