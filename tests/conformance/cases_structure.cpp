#include "conformance/harness.h"

namespace spore::conformance {
void add_structure_cases(CaseList& c, ErrorList& e) {
  c.push_back(OpCase("identity", "identity"_op, {{3, 4}}));
}
}  // namespace spore::conformance
