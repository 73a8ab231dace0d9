// Conformance cases of the indexing family (ops/index.cpp): scatter_nd, gather_nd, grid_sample (+ grad), roi_align
// (+ grad), einsum. Index inputs in i64 and i32, negative indices included.
#include "conformance/harness.h"

namespace spore::conformance {

void add_index_cases(CaseList& c, ErrorList& e) {
  const auto I = [](int64_t v) { return AttrValue(v); };
  const DType i64 = DType::i64, i32 = DType::i32, f32 = DType::f32;

  // ---- scatter_nd: row path (narrow slices), column path (slices of >= 1024 elements), full-depth tuples.
  for (const char* red : {"none", "add", "mul", "max", "min"}) {
    const std::string r(red);
    c.push_back(OpCase("scatter_nd/depth2_" + r, "scatter_nd"_op, {{6, 5, 4}, {3, 2}, {3, 4}})
                    .attr("reduction", r)
                    .input_dtype(1, i64)
                    .gen(1, Gen::index(5, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
    c.push_back(OpCase("scatter_nd/wide_" + r, "scatter_nd"_op, {{4, 1030}, {5, 1}, {5, 1030}})
                    .attr("reduction", r)
                    .input_dtype(1, i32)
                    .gen(1, Gen::index(4, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
    c.push_back(OpCase("scatter_nd/elements_" + r, "scatter_nd"_op, {{5, 6}, {2, 4, 2}, {2, 4}})
                    .attr("reduction", r)
                    .input_dtype(1, i64)
                    .gen(1, Gen::index(5, true))
                    .gen(0, Gen::uniform(-0.5, 0.5))
                    .gen(2, Gen::uniform(-0.5, 0.5)));
  }

  // ---- gather_nd: batch_dims 0, 1, 2.
  c.push_back(
      OpCase("gather_nd/depth2", "gather_nd"_op, {{5, 6, 7}, {4, 2}}).input_dtype(1, i64).gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather_nd/full_i32", "gather_nd"_op, {{5, 6}, {3, 2, 2}})
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather_nd/batch1", "gather_nd"_op, {{3, 5, 6}, {3, 4, 1}})
                  .attr("batch_dims", I(1))
                  .input_dtype(1, i64)
                  .gen(1, Gen::index(5, true)));
  c.push_back(OpCase("gather_nd/batch2_i32", "gather_nd"_op, {{2, 3, 5, 4}, {2, 3, 2, 2}})
                  .attr("batch_dims", I(2))
                  .input_dtype(1, i32)
                  .gen(1, Gen::index(4, true)));

  // ---- grid_sample: every mode x padding x align_corners, the grid reaching past the border.
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    for (const char* pad : {"zeros", "border", "reflection"})
      for (bool align : {false, true}) {
        const std::string name = std::string("grid_sample/") + mode + "_" + pad + (align ? "_align" : "");
        c.push_back(OpCase(name, "grid_sample"_op, {{2, 3, 5, 6}, {2, 4, 7, 2}})
                        .attr("mode", std::string(mode))
                        .attr("padding_mode", std::string(pad))
                        .attr("align_corners", align)
                        .gen(1, Gen::uniform(-1.3, 1.3))
                        .tol(std::string(mode) == "bicubic" ? 4 : 1));
        c.push_back(OpCase("grid_sample_grad/" + name.substr(12), "grid_sample_grad"_op,
                           {{2, 3, 5, 6}, {2, 4, 7, 2}, {2, 3, 4, 7}})
                        .attr("mode", std::string(mode))
                        .attr("padding_mode", std::string(pad))
                        .attr("align_corners", align)
                        .gen(1, Gen::uniform(-1.3, 1.3))
                        .tol(std::string(mode) == "bicubic" ? 8 : 4));
      }
  // Many images with small grids (RAFT's correlation lookup: one channel, 7 x 7 points per image), and grids of more
  // points than one block of the CPU kernel (64), ending in a partial block.
  c.push_back(OpCase("grid_sample/many_small_images", "grid_sample"_op, {{70, 1, 9, 9}, {70, 7, 7, 2}})
                  .attr("mode", std::string("bilinear"))
                  .attr("padding_mode", std::string("zeros"))
                  .attr("align_corners", true)
                  .gen(1, Gen::uniform(-1.3, 1.3)));
  for (const char* mode : {"bilinear", "nearest", "bicubic"})
    c.push_back(
        OpCase(std::string("grid_sample/partial_block_") + mode, "grid_sample"_op, {{3, 2, 6, 5}, {3, 13, 11, 2}})
            .attr("mode", std::string(mode))
            .attr("padding_mode", std::string("border"))
            .attr("align_corners", false)
            .gen(1, Gen::uniform(-1.3, 1.3))
            .tol(std::string(mode) == "bicubic" ? 4 : 1));

  // ---- roi_align: avg / max, both coordinate modes, fixed and adaptive sampling. Random corners give some
  // inverted rois (no samples) as well as ordinary ones.
  for (const char* mode : {"avg", "max"})
    for (const char* ctm : {"half_pixel", "output_half_pixel"})
      for (int64_t ratio : {0, 2}) {
        const std::string name = std::string("roi_align/") + mode + "_" + ctm + "_" + std::to_string(ratio);
        const auto make = [&](const std::string& n, OpId op, std::vector<Shape> shapes) {
          return OpCase(n, op, std::move(shapes))
              .attr("mode", std::string(mode))
              .attr("coordinate_transformation_mode", std::string(ctm))
              .attr("sampling_ratio", I(ratio))
              .attr("output_height", I(3))
              .attr("output_width", I(4))
              .attr("spatial_scale", 0.5)
              .gen(1, Gen::uniform(-2, 22))
              .input_dtype(2, ratio ? i32 : i64)
              .gen(2, Gen::index(2));
        };
        c.push_back(make(name, "roi_align"_op, {{2, 3, 9, 10}, {5, 4}, {5}}));
        c.push_back(
            make("roi_align_grad/" + name.substr(10), "roi_align_grad"_op, {{2, 3, 9, 10}, {5, 4}, {5}, {5, 3, 3, 4}})
                .tol(4));
      }

  // ---- einsum
  const auto ein = [&](const std::string& name, const std::string& eq, std::vector<Shape> shapes) {
    c.push_back(OpCase("einsum/" + name, "einsum"_op, std::move(shapes)).attr("equation", eq).tol(4));
  };
  ein("matmul", "ij,jk->ik", {{3, 4}, {4, 5}});
  ein("batch_matmul", "bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}});
  ein("implicit_transpose", "ji", {{3, 4}});
  ein("diagonal", "bii->bi", {{2, 4, 4}});
  ein("trace", "ii", {{5, 5}});
  ein("inner", "i,i", {{7}, {7}});
  ein("sum", "ij->", {{3, 4}});
  ein("outer", "i,j->ij", {{3}, {4}});
  ein("ellipsis_broadcast", "...ij,...jk->...ik", {{2, 1, 3, 4}, {5, 4, 2}});
  ein("three", "ijk,ikl,il->jl", {{2, 3, 4}, {2, 4, 5}, {2, 5}});
  ein("attention_scores", "bhqd,bhkd->bhqk", {{1, 2, 3, 8}, {1, 2, 5, 8}});
  ein("summed_label", "ijk,jl->il", {{3, 4, 2}, {4, 5}});

  e.push_back(
      {"scatter_nd/depth", "scatter_nd"_op, {{5, 3}, {2, 3}, {2}}, {f32, i64, f32}, {}, ErrorCode::shape_mismatch});
  e.push_back({"scatter_nd/updates",
               "scatter_nd"_op,
               {{5, 3}, {2, 1}, {2, 4}},
               {f32, i64, f32},
               {},
               ErrorCode::shape_mismatch});
  e.push_back({"scatter_nd/float_indices",
               "scatter_nd"_op,
               {{5, 3}, {2, 1}, {2, 3}},
               {f32, f32, f32},
               {},
               ErrorCode::dtype_mismatch});
  e.push_back({"gather_nd/batch_dims",
               "gather_nd"_op,
               {{5, 3}, {2, 1}},
               {f32, i64},
               {{"batch_dims", I(2)}},
               ErrorCode::invalid_argument});
  e.push_back({"gather_nd/batch_mismatch",
               "gather_nd"_op,
               {{5, 3}, {4, 1}},
               {f32, i64},
               {{"batch_dims", I(1)}},
               ErrorCode::shape_mismatch});
  e.push_back({"grid_sample/grid_shape",
               "grid_sample"_op,
               {{1, 2, 4, 4}, {1, 3, 3, 3}},
               {f32, f32},
               {},
               ErrorCode::shape_mismatch});
  e.push_back({"grid_sample/volumetric",
               "grid_sample"_op,
               {{1, 2, 4, 4, 4}, {1, 3, 3, 3, 3}},
               {f32, f32},
               {},
               ErrorCode::unsupported});
  e.push_back(
      {"roi_align/rois", "roi_align"_op, {{1, 2, 4, 4}, {3, 5}, {3}}, {f32, f32, i64}, {}, ErrorCode::shape_mismatch});
  e.push_back({"einsum/terms",
               "einsum"_op,
               {{3, 4}},
               {f32},
               {{"equation", std::string("ij,jk->ik")}},
               ErrorCode::invalid_argument});
  e.push_back({"einsum/sizes",
               "einsum"_op,
               {{3, 4}, {5, 6}},
               {f32, f32},
               {{"equation", std::string("ij,jk->ik")}},
               ErrorCode::shape_mismatch});
}

}  // namespace spore::conformance
