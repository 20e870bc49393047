// The tp = 1 tensor layout: one primary piece per view of the parameter table, whole tensor,
// tiling the flat buffer in order (what checkpoints record for a single-process model).
#include <gtest/gtest.h>

#include "model/gpt.h"

using namespace strata;

TEST(ModelTensorLayout, OnePrimaryWholeTensorPerViewTilingTheBuffer) {
  for (const char* preset : {"tiny", "gpt2"}) {
    const model::GPTConfig cfg = model::GPTConfig::preset(preset);
    const std::vector<model::ParamView> table = model::build_param_table(cfg);
    const TensorLayout layout = model::tensor_layout(cfg);
    ASSERT_EQ(layout.size(), table.size()) << preset;
    int64_t at = 0;
    for (size_t i = 0; i < layout.size(); ++i) {
      const TensorPiece& p = layout[i];
      EXPECT_EQ(p.name, table[i].name);
      EXPECT_EQ(p.global_shape, table[i].shape);
      EXPECT_EQ(p.extents, table[i].shape);
      EXPECT_EQ(p.offsets, std::vector<int64_t>(table[i].shape.size(), 0));
      EXPECT_EQ(p.local_offset, at);
      EXPECT_TRUE(p.primary);
      at += p.numel();
    }
    EXPECT_EQ(at, cfg.num_params()) << preset;
  }
}
