#pragma once
// The einsum equation, parsed once for the op's inference, its decomposition (ops/index.cpp) and the reference
// kernel. Labels are ids: 'A'..'Z' -> 0..25, 'a'..'z' -> 26..51, the dims an ellipsis stands for 52, 53, ...
// (right-aligned, as NumPy broadcasts them).
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace spore {

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // one label id per dim of each input
  std::vector<int> output;
  int num_labels = 0;  // ids are < num_labels
};

// Parses `equation` for inputs of the given ranks: "ij,jk->ik", "...ij,...jk", implicit outputs (the ellipsis dims,
// then the labels used once, in alphabetical order), spaces ignored. Throws Error(invalid_argument) saying what is
// wrong (the caller names the node).
EinsumSpec parse_einsum(std::string_view equation, std::span<const int> ranks);

// The name of a label id for messages ("i", "...0").
std::string einsum_label_name(int id);

}  // namespace spore
