// Conformance cases of the LLM ops (ops/llm_ops.h): every weight format of linear_blockq, linear_blockq_multi
// and embed_blockq (valid GGUF Q8_0/Q4_0 blocks), rope in both modes with partial rotation and frequency factors,
// attention_kv over f32/f16/bf16/i8 caches with GQA, prefill and decode shapes. The formats fix the weight dtype,
// so each case covers the one dispatch dtype its format allows.
#include <string>

#include "conformance/harness.h"

namespace spore::conformance {
void add_llm_cases(CaseList& c, ErrorList& e) {
  using DT = DType;
  const DTypeSet f32{DT::f32};
  struct Format {
    const char* name;
    DT wdtype;
    int64_t row_bytes_per_32;  // bytes of 32 weight values in a row
    Gen gen;
  };
  const Format formats[] = {
      {"f32", DT::f32, 32 * 4, Gen::uniform(-0.5, 0.5)},     {"f16", DT::f16, 32 * 2, Gen::uniform(-0.5, 0.5)},
      {"bf16", DT::bf16, 32 * 2, Gen::uniform(-0.5, 0.5)},   {"q8_0", DT::u8, 34, Gen::q8_0_blocks()},
      {"q4_0", DT::u8, 18, Gen::q4_0_blocks()},
  };
  for (const Format& f : formats) {
    const std::string fn = f.name;
    // typed formats hold K values a row; the quant formats K/32 blocks.
    const auto row = [&](int64_t k) { return f.wdtype == DT::u8 ? k / 32 * f.row_bytes_per_32 : k; };
    const std::string lb = "linear_blockq/" + fn;
    c.push_back(OpCase(lb + "/1x64", "linear_blockq"_op, {{1, 64}, {5, row(64)}})
                    .attr("format", fn).input_dtype(1, f.wdtype).gen(1, f.gen).only(f32));
    c.push_back(OpCase(lb + "/prefill_bias", "linear_blockq"_op, {{2, 7, 256}, {33, row(256)}, {33}})
                    .attr("format", fn).input_dtype(1, f.wdtype).gen(1, f.gen).only(f32).tol(4));
    c.push_back(OpCase("linear_blockq_multi/" + fn, "linear_blockq_multi"_op, {{3, 128}, {9, row(128)}, {17, row(128)}})
                    .attr("format", fn).attr("count", int64_t{2}).input_dtype(1, f.wdtype).input_dtype(2, f.wdtype)
                    .gen(1, f.gen).gen(2, f.gen).only(f32).tol(2));
    c.push_back(OpCase("linear_blockq_multi/" + fn + "_silu_mul", "linear_blockq_multi"_op,
                       {{4, 64}, {12, row(64)}, {12, row(64)}, {12}, {12}})
                    .attr("format", fn).attr("count", int64_t{2}).attr("epilogue", std::string("silu_mul"))
                    .input_dtype(1, f.wdtype).input_dtype(2, f.wdtype).gen(1, f.gen).gen(2, f.gen).only(f32).tol(2));
    c.push_back(OpCase("embed_blockq/" + fn, "embed_blockq"_op, {{11, row(96)}, {2, 5}})
                    .attr("format", fn).input_dtype(1, DT::i64).gen(0, f.gen).gen(1, Gen::index(11))
                    .only(DTypeSet{f.wdtype}));
  }
  c.push_back(OpCase("embed_blockq/i32_ids", "embed_blockq"_op, {{7, 34 * 2}, {9}})
                  .attr("format", std::string("q8_0")).input_dtype(1, DT::i32).gen(0, Gen::q8_0_blocks())
                  .gen(1, Gen::index(7)).only(DTypeSet{DT::u8}));

  // Positions stay small here: the CPU kernel computes angles as llama.cpp does (a float recurrence) and drifts from
  // the reference's exact angles by about 6e-8 * position for |x| <= 1 (tests/llm/llm_attention_test.cpp checks
  // positions up to 4095 against that bound).
  for (const char* mode : {"normal", "neox"}) {
    const std::string m = mode;
    c.push_back(OpCase("rope/" + m, "rope"_op, {{5, 3, 64}, {5}})
                    .attr("mode", m).input_dtype(1, DT::i64).gen(1, Gen::integers(0, 100)).tol(4));
    c.push_back(OpCase("rope/" + m + "_partial_factors", "rope"_op, {{4, 2, 80}, {4}, {20}})
                    .attr("mode", m).attr("dim", int64_t{40}).attr("theta", 500000.0).attr("freq_scale", 0.25)
                    .input_dtype(1, DT::i64).gen(1, Gen::integers(0, 100)).gen(2, Gen::positive(0.5, 4.0)).tol(4));
  }

  // attention_kv: q [T, Hq, D], caches [Hkv, C, D], new rows [T, Hkv, D], positions p0.. (p0 + T <= C).
  struct Kv {
    const char* name;
    int64_t t, hq, hkv, d, ctx, p0;
  };
  const Kv kvs[] = {{"decode_gqa", 1, 4, 2, 64, 40, 23}, {"prefill", 6, 2, 2, 32, 16, 0}, {"chunk_gqa", 3, 6, 2, 16, 24, 9}};
  for (const Kv& k : kvs) {
    for (DT cache : {DT::f32, DT::f16, DT::bf16, DT::i8}) {
      const std::string n = std::string("attention_kv/") + k.name + "_" + std::string(dtype_name(cache));
      std::vector<Shape> shapes{{k.t, k.hq, k.d}, {k.hkv, k.ctx, k.d}, {k.hkv, k.ctx, k.d},
                                {k.t, k.hkv, k.d}, {k.t, k.hkv, k.d}, {k.t}};
      if (cache == DT::i8) {
        shapes.push_back({k.hkv, k.ctx});
        shapes.push_back({k.hkv, k.ctx});
      }
      OpCase oc(n, "attention_kv"_op, shapes);
      oc.attr("scale", 1.0 / 8).input_dtype(1, cache).input_dtype(2, cache).input_dtype(5, DT::i64)
          .gen(5, Gen::consecutive(k.p0)).only(f32).tol(2);
      if (cache == DT::i8) {
        oc.gen(1, Gen::integers(-127, 128)).gen(2, Gen::integers(-127, 128));
        oc.gen(6, Gen::positive(0.001, 0.02)).gen(7, Gen::positive(0.001, 0.02));
      }
      c.push_back(oc);
    }
  }

  // Pooled caches [S, Hkv, C, D] with slots i64 [T] (continuous batching): one sequence in slot 1 of 3 (several
  // sequences in one call and padding rows: tests/llm/llm_attention_test.cpp).
  for (DT cache : {DT::f32, DT::f16, DT::bf16, DT::i8}) {
    const int64_t t = 3, hq = 4, hkv = 2, d = 16, ctx = 24, p0 = 7;
    std::vector<Shape> shapes{{t, hq, d}, {3, hkv, ctx, d}, {3, hkv, ctx, d}, {t, hkv, d}, {t, hkv, d}, {t}};
    if (cache == DT::i8) {
      shapes.push_back({3, hkv, ctx});
      shapes.push_back({3, hkv, ctx});
    }
    const int slots_at = static_cast<int>(shapes.size());
    shapes.push_back({t});
    OpCase oc(std::string("attention_kv/pooled_") + std::string(dtype_name(cache)), "attention_kv"_op, shapes);
    oc.attr("scale", 1.0 / 4).input_dtype(1, cache).input_dtype(2, cache).input_dtype(5, DT::i64)
        .gen(5, Gen::consecutive(p0)).input_dtype(slots_at, DT::i64).gen(slots_at, Gen::integers(1, 2)).only(f32)
        .tol(2);
    if (cache == DT::i8) {
      oc.gen(1, Gen::integers(-127, 128)).gen(2, Gen::integers(-127, 128));
      oc.gen(6, Gen::positive(0.001, 0.02)).gen(7, Gen::positive(0.001, 0.02));
    }
    c.push_back(oc);
  }

  // ---- errors
  using EC = ErrorCode;
  e.push_back({"linear_blockq/bad_format", "linear_blockq"_op, {{2, 32}, {3, 32}}, {DT::f32, DT::f32},
               {{"format", std::string("q5_k")}}, EC::invalid_argument});
  e.push_back({"linear_blockq/partial_block", "linear_blockq"_op, {{2, 32}, {3, 35}}, {DT::f32, DT::u8},
               {{"format", std::string("q8_0")}}, EC::shape_mismatch});
  e.push_back({"linear_blockq/k_mismatch", "linear_blockq"_op, {{2, 64}, {3, 34}}, {DT::f32, DT::u8},
               {{"format", std::string("q8_0")}}, EC::shape_mismatch});
  e.push_back({"rope/odd_dim", "rope"_op, {{2, 1, 8}, {2}}, {DT::f32, DT::i64}, {{"dim", int64_t{3}}},
               EC::invalid_argument});
  e.push_back({"attention_kv/i8_without_scales", "attention_kv"_op,
               {{1, 2, 8}, {2, 4, 8}, {2, 4, 8}, {1, 2, 8}, {1, 2, 8}, {1}},
               {DT::f32, DT::i8, DT::i8, DT::f32, DT::f32, DT::i64}, {}, EC::invalid_argument});
}
}  // namespace spore::conformance
