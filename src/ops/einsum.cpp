#include "ops/einsum.h"

#include <algorithm>

#include "base/error.h"

namespace spore {
namespace {

constexpr int kEllipsisBase = 52;

int letter_id(char ch) {
  if (ch >= 'A' && ch <= 'Z') return ch - 'A';
  if (ch >= 'a' && ch <= 'z') return 26 + (ch - 'a');
  return -1;
}

// One operand's term: its letters, and where "..." stands (-1: nowhere).
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

Term parse_term(std::string_view t, std::string_view equation) {
  Term term;
  for (size_t i = 0; i < t.size(); ++i) {
    const char ch = t[i];
    if (ch == ' ') continue;
    if (ch == '.') {
      SPORE_CHECK(t.substr(i, 3) == "..." && term.ellipsis_at < 0, ErrorCode::invalid_argument,
                  "einsum equation '{}': a stray '.' or a second ellipsis in term '{}'", equation, t);
      term.ellipsis_at = static_cast<int>(term.letters.size());
      i += 2;
      continue;
    }
    const int id = letter_id(ch);
    SPORE_CHECK(id >= 0, ErrorCode::invalid_argument, "einsum equation '{}': '{}' is not a label (letters only)",
                equation, ch);
    term.letters.push_back(id);
  }
  return term;
}

}  // namespace

std::string einsum_label_name(int id) {
  if (id < 26) return std::string(1, static_cast<char>('A' + id));
  if (id < kEllipsisBase) return std::string(1, static_cast<char>('a' + id - 26));
  return "..." + std::to_string(id - kEllipsisBase);
}

EinsumSpec parse_einsum(std::string_view equation, std::span<const int> ranks) {
  const size_t arrow = equation.find("->");
  const std::string_view lhs = equation.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(
        parse_term(lhs.substr(start, comma == std::string_view::npos ? lhs.size() - start : comma - start), equation));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  SPORE_CHECK(terms.size() == ranks.size(), ErrorCode::invalid_argument,
              "einsum equation '{}' has {} operand terms for {} inputs", equation, terms.size(), ranks.size());
  // The ellipsis covers the dims the letters leave; its length is the longest any operand gives it.
  int ell = 0;
  std::vector<int> ell_len(terms.size(), 0);
  for (size_t i = 0; i < terms.size(); ++i) {
    const int letters = static_cast<int>(terms[i].letters.size());
    if (terms[i].ellipsis_at < 0) {
      SPORE_CHECK(letters == ranks[i], ErrorCode::invalid_argument,
                  "einsum equation '{}': term {} has {} labels for an input of rank {}", equation, i, letters,
                  ranks[i]);
    } else {
      SPORE_CHECK(letters <= ranks[i], ErrorCode::invalid_argument,
                  "einsum equation '{}': term {} has {} labels for an input of rank {}", equation, i, letters,
                  ranks[i]);
      ell_len[i] = ranks[i] - letters;
      ell = std::max(ell, ell_len[i]);
    }
  }
  EinsumSpec spec;
  spec.num_labels = kEllipsisBase + ell;
  const auto expand = [&](const Term& t, int len) {
    std::vector<int> ids;
    for (size_t j = 0; j <= t.letters.size(); ++j) {
      if (static_cast<int>(j) == t.ellipsis_at)
        for (int e = ell - len; e < ell; ++e) ids.push_back(kEllipsisBase + e);
      if (j < t.letters.size()) ids.push_back(t.letters[j]);
    }
    return ids;
  };
  for (size_t i = 0; i < terms.size(); ++i) spec.inputs.push_back(expand(terms[i], ell_len[i]));
  std::vector<int> count(static_cast<size_t>(kEllipsisBase), 0);
  for (const Term& t : terms)
    for (int id : t.letters) ++count[static_cast<size_t>(id)];
  if (arrow == std::string_view::npos) {
    for (int e = 0; e < ell; ++e) spec.output.push_back(kEllipsisBase + e);
    for (int id = 0; id < kEllipsisBase; ++id)
      if (count[static_cast<size_t>(id)] == 1) spec.output.push_back(id);
  } else {
    const Term out = parse_term(equation.substr(arrow + 2), equation);
    SPORE_CHECK(
        ell == 0 || out.ellipsis_at >= 0 || std::all_of(ell_len.begin(), ell_len.end(), [](int l) { return l == 0; }),
        ErrorCode::invalid_argument, "einsum equation '{}': the output must keep the ellipsis", equation);
    spec.output = expand(out, ell);
    for (size_t j = 0; j < out.letters.size(); ++j) {
      const int id = out.letters[j];
      SPORE_CHECK(count[static_cast<size_t>(id)] > 0, ErrorCode::invalid_argument,
                  "einsum equation '{}': output label '{}' is in no input", equation, einsum_label_name(id));
      SPORE_CHECK(std::count(out.letters.begin(), out.letters.end(), id) == 1, ErrorCode::invalid_argument,
                  "einsum equation '{}': output label '{}' appears twice", equation, einsum_label_name(id));
    }
  }
  return spec;
}

}  // namespace spore
