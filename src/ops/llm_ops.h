#pragma once
// The LLM ops (docs/LLM.md): rope, linear_blockq, linear_blockq_multi, embed_blockq and attention_kv. They are
// defined here, once, like every op (ids in ir/op_list.inc, OpDefs in llm_ops.cpp). Kernels:
// src/backend/cpu/{blockq,llm_attention}.cpp (batch-invariant AVX2, AVX-512 VNNI builds with the same bits) and
// src/backend/reference/{blockq,llm_attention}.cpp (plain loops, the definition the tests check against).
//
// Weight formats of linear_blockq / embed_blockq (the `format` attribute):
//   f32, f16, bf16  w is a typed tensor [N, K] of that dtype;
//   q8_0            w is u8 [N, K/32*34]: per block of 32 values, an f16 scale d then 32 int8 q; x = d*q;
//   q4_0            w is u8 [N, K/32*18]: per block, an f16 scale d then 16 bytes; byte j holds value j in its low
//                   nibble and value j+16 in its high nibble; x = d*(nibble-8).
// These are GGUF's (ggml's) Q8_0 and Q4_0 blocks, bit for bit, so GGUF weights are used straight from the mapping.
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "ops/registry.h"
#include "tensor/tensor.h"

namespace spore {

namespace llm_ops {

enum class WeightFormat : uint8_t { f32, f16, bf16, q8_0, q4_0 };
std::optional<WeightFormat> parse_format(std::string_view s);
// The `format` attribute of linear_blockq / embed_blockq, parsed; throws invalid_argument naming it otherwise.
WeightFormat format_of(const Attrs& a);
std::string_view format_name(WeightFormat f);
inline constexpr int64_t max_multi_weights = 8;  // linear_blockq_multi's count
inline constexpr int64_t qk = 32;  // values per quant block
inline constexpr int64_t q8_0_block_bytes = 34;
inline constexpr int64_t q4_0_block_bytes = 18;
// Bytes of one weight row of k values in format f (k % 32 == 0 for the quant formats, checked by the caller).
int64_t row_bytes(WeightFormat f, int64_t k);
// The dtype of w for format f (u8 for the quant formats).
DType weight_dtype(WeightFormat f);
// K (values per row) from a row of `bytes` bytes; nullopt when bytes is not a whole number of blocks.
std::optional<int64_t> row_values(WeightFormat f, int64_t bytes);

// The sequences of one attention_kv call: tokens [first, first + count) belong to slot `slot` (0 for a single cache,
// -1 for padding rows) at positions p0, p0 + 1, ... Both kernels split their tokens with this; it checks what the op
// promises (consecutive positions within a run, the new rows fit the cache, a slot in one run only, slots in
// [-1, n_slots)) and names the offending token. slots == nullptr: one cache, one run.
struct AttentionRun {
  int64_t slot, p0, first, count;
};
std::vector<AttentionRun> attention_runs(const int64_t* positions, const int64_t* slots, int64_t t_n,
                                         int64_t n_slots, int64_t ctx);

}  // namespace llm_ops

namespace ops {

// y[..., n] = sum_k x[..., k] * w[n, k] (+ bias[n]); x f32 [..., K], w as `format` says, bias f32 [N]. For q8_0/q4_0
// the activations are rounded to Q8_0 blocks first and for f16/bf16 to that dtype (as llama.cpp does), so results
// match llama.cpp's closely. Every y element is summed in the same order whatever the number of rows (batch
// invariant).
Tensor linear_blockq(const Tensor& x, const Tensor& w, std::string_view format, const std::optional<Tensor>& bias = {});
// linear_blockq for several weights of one format over the same x, in one kernel: y_i = linear_blockq(x, ws[i],
// format, biases[i]) bit for bit. biases: empty or one per weight. epilogue "silu_mul" (two weights, gate and up):
// one output, mul(silu(y_0), y_1) bit for bit (a SwiGLU MLP's input projections). The group_linear_blockq pass
// makes these from sibling linear_blockq nodes (Q/K/V, gate/up), so models need not call it.
std::vector<Tensor> linear_blockq_multi(const Tensor& x, const std::vector<Tensor>& ws, std::string_view format,
                                        const std::vector<Tensor>& biases = {}, std::string_view epilogue = "");
// Rows of a weight table: w [V, ...] as `format` says, ids i64 any shape -> f32 [..., K].
Tensor embed_blockq(const Tensor& w, const Tensor& ids, std::string_view format);
// Rotary position embedding of x f32 [T, H, D] at positions i64 [T]. mode "normal" rotates pairs (2i, 2i+1), "neox"
// pairs (i, i + dim/2). The first `dim` of D are rotated (0 = all of D). Angle of pair i at position p:
// p * freq_scale * theta^(-2i/dim) / freq_factors[i] (freq_factors f32 [dim/2], optional: Llama 3.1 scaling).
// Differentiable in x: the gradient is the inverse rotation (rope of the sign-flipped gradient, exact).
Tensor rope(const Tensor& x, const Tensor& positions, double theta, std::string_view mode, int64_t dim = 0,
            double freq_scale = 1.0, const std::optional<Tensor>& freq_factors = {});
// Causal attention of new tokens over a KV cache plus themselves. q f32 [T, Hq, D]; k_cache, v_cache [Hkv, C, D]
// in f32/f16/bf16, or i8 with k_scale, v_scale f32 [Hkv, C] (given exactly when the cache is i8: row (h, j) stands for
// scale[h, j] * q[h, j, :], see ops/llm_kv_quant.h); k_new, v_new f32 [T, Hkv, D]; positions i64 [T], consecutive
// (p0, p0+1, ...). Query t sees the cache rows [0, p0) and the new rows [0, t]. New rows are rounded to the cache
// dtype first (i8: llm_ops::kv_quantize_row), so a token gives the same bits whether its keys come from the cache or
// from this call. GQA: q head h reads kv head h / (Hq / Hkv). Output [T, Hq, D]. The cache is only read: the caller
// writes k_new / v_new into it after the run.
// Pooled (continuous batching, llm/engine.h): k_cache, v_cache [S, Hkv, C, D] hold one cache per sequence slot (i8
// scales [S, Hkv, C]) and `slots` i64 [T] says which slot each token belongs to. A run of consecutive tokens with the
// same slot s is one sequence: its positions are consecutive from p0, and its token t sees slot s's cache rows
// [0, p0) and the run's new rows up to itself. A slot may appear in one run only; slot -1 marks a padding row, whose
// output is 0 and which reads nothing. A token's result has the same bits as in the single-cache form.
Tensor attention_kv(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& k_new,
                    const Tensor& v_new, const Tensor& positions, double scale,
                    const std::optional<Tensor>& k_scale = {}, const std::optional<Tensor>& v_scale = {},
                    const std::optional<Tensor>& slots = {});

}  // namespace ops

void register_llm_ops(OpRegistry& r);

}  // namespace spore
