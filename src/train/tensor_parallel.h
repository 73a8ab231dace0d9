#pragma once
// Tensor parallelism for the decoder LM (`spore train-lm --parallel tensor --tp N`, issue 26): Megatron-LM's splits
// (Shoeybi et al. 2019) over the N ranks of parallel::world(). In every block, attention's q/k/v matrices are split by
// rows along the heads (rank r owns query heads [r H/N, (r+1) H/N) and the kv heads they share) and the output matrix
// by columns; the MLP's gate and up matrices by rows and down by columns. Each rank computes its heads' (its hidden
// units') partial output, and one allreduce per half-block sums them (Megatron's "g": allreduce forward, identity
// backward); in backward, the gradient of each half-block's input is allreduced (Megatron's "f": identity forward,
// allreduce backward), as are the partial gradients of the norm weights in front of the split matrices. The token
// embedding, the norms, the output matrix and the loss are replicated: every rank computes them on the same bits, so
// they stay equal without communication.
//
// Equal to one process within f32 rounding, not bit for bit: a split matrix product sums its K terms in N partial
// sums (then added in spore's fixed tree), where one process sums them in one kernel. tests/parallel/
// tp_train_lm_test.py states the tolerance. Each step's micro-batches (`accum`) are summed from zeros in order, divided
// by M, clipped by the global norm (replicated squares once, split ones allreduced) and stepped with AdamW, as
// train::Model does. Checkpoints have train::Model's format (rank 0 reassembles the whole matrices and AdamW state;
// every rank loads the whole file and keeps its slices), so runs resume across one process and N ranks.
//
// Data x tensor: with W = D x N ranks (o.model_parallel_ranks = N), D replicas each run M / D of the micro-batches and
// sum their accumulated gradients before the step (model_parallel.h).
//
// Limits: every rank builds the whole model first; f32 only; no tied embeddings; heads, kv heads and ffn must divide
// by N; the vocabulary is not split.
#include <functional>
#include <string>

#include "train/lm.h"

namespace spore::train {

LmReport train_decoder_tensor_parallel(nn::LlamaModel& net, const LmTokens& data, int64_t ctx, const LmRunOptions& o,
                                       const std::string& key,
                                       const std::function<void(const LmProgress&)>& on_progress);

}  // namespace spore::train
