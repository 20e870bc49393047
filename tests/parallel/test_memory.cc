// Model states per rank equal the ZeRO arithmetic (cost/memory.h) to the byte for every
// stage, both precisions and world sizes that do and do not divide Ψ; the bucket, gather and
// scratch buffers have their documented sizes; and every byte is counted by the process's
// memory tracker under its category.
#include <algorithm>
#include <mutex>

#include "comm/process_group.h"
#include "core/memory.h"
#include "cost/memory.h"
#include "gtest/gtest.h"
#include "harness.h"

namespace strata::ptest {
namespace {

using parallel::DataParallelOptions;
using cost::Precision;

struct Expected {
  int64_t comm = 0, activations = 0;
};

// Documented buffer sizes (docs/zero.md), from the model's unit ranges and the bucket plan.
Expected documented_buffers(const model::GPT& gpt, const DataParallelOptions& o) {
  const int wb = o.precision == Precision::bf16 ? 2 : 4;
  std::vector<parallel::Range> units;
  for (int u = 0; u < gpt.num_units(); ++u) {
    auto [b, e] = gpt.unit_range(u);
    units.push_back({b, e});
  }
  int64_t max_block = 0;
  for (size_t u = 1; u < units.size(); ++u) max_block = std::max(max_block, units[u].size());
  Expected x;
  if (o.stage >= 2) {
    // Stages 2-3 cap buckets at the largest block as well.
    const int64_t cap = std::min(parallel::bucket_cap_elems(o.bucket_mb, wb), max_block);
    auto buckets = parallel::plan_buckets(units, cap);
    int64_t max_other = 0;
    for (size_t k = 0; k + 1 < buckets.size(); ++k)
      max_other = std::max(max_other, buckets[k].range.size());
    const int64_t rotating = std::min<int64_t>(2, int64_t(buckets.size()) - 1);
    x.comm += (buckets.back().range.size() + rotating * max_other) * wb;
  }
  if (o.stage == 3) {
    const int64_t blocks = int64_t(units.size()) - 1;
    const int64_t slots =
        o.reshard_after_forward ? std::min<int64_t>(o.prefetch + 1, blocks) : blocks;
    x.comm += (units[0].size() + slots * max_block) * wb;
  }
  if (o.precision == Precision::bf16) x.activations = 2 * (units[0].size() + max_block) * 4;
  return x;
}

TEST(ZeroMemory, ModelStatesEqualTheFormulaForEveryStageWorldAndPrecision) {
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (int stage = 0; stage <= 3; ++stage)
      for (int world : {1, 2, 3, 4, 5, 7}) {
        DataParallelOptions o;
        o.stage = stage;
        o.precision = p;
        o.bucket_mb = world % 2 ? 25 : 0.1;  // above and below a block's size
        const MemoryTracker& mt = memory_tracker();
        const int64_t base_p = mt.current(MemCategory::parameters);
        const int64_t base_g = mt.current(MemCategory::gradients);
        const int64_t base_o = mt.current(MemCategory::optimizer);
        const int64_t base_c = mt.current(MemCategory::comm);
        std::mutex mu;
        std::vector<parallel::MemoryReport> reports;
        int64_t psi = 0;
        Expected want;
        comm::run_threads(world, [&](comm::ProcessGroup& pg) {
          model::GPT gpt(small_config(), 1, parallel::model_owns_state(o));
          parallel::DataParallelEngine engine(gpt, pg, o, {}, 1);
          {
            std::lock_guard lk(mu);
            reports.push_back(engine.memory_report());
            psi = gpt.num_params();
            want = documented_buffers(gpt, o);
          }
          pg.barrier();  // every rank's buffers exist now
          if (pg.rank() == 0) {
            int64_t sum_p = 0, sum_g = 0, sum_o = 0, sum_c = 0;
            for (auto& r : reports)
              sum_p += r.parameters, sum_g += r.gradients, sum_o += r.optimizer, sum_c += r.comm;
            EXPECT_EQ(mt.current(MemCategory::parameters) - base_p, sum_p);
            EXPECT_EQ(mt.current(MemCategory::gradients) - base_g, sum_g);
            EXPECT_EQ(mt.current(MemCategory::optimizer) - base_o, sum_o);
            EXPECT_GE(mt.current(MemCategory::comm) - base_c, sum_c);  // + the communicator's own
          }
          pg.barrier();
        });
        const auto f = cost::zero_model_state_bytes(psi, world, stage, p);
        for (const parallel::MemoryReport& r : reports) {
          SCOPED_TRACE(testing::Message() << "stage " << stage << " world " << world << " "
                                          << parallel::precision_name(p));
          EXPECT_EQ(r.parameters, f.parameters);
          EXPECT_EQ(r.gradients, f.gradients);
          EXPECT_EQ(r.optimizer, f.optimizer);
          EXPECT_EQ(r.model_states(), f.total());
          EXPECT_EQ(r.comm, want.comm);
          EXPECT_EQ(r.activations, want.activations);
        }
      }
}

TEST(ZeroMemory, FormulaSpotChecks) {
  // bf16: 16Ψ, 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N (ceil), for Ψ = 1000, N = 3 (S = 334).
  EXPECT_EQ(cost::zero_model_state_bytes(1000, 3, 0, Precision::bf16).total(), 16000);
  EXPECT_EQ(cost::zero_model_state_bytes(1000, 3, 1, Precision::bf16).total(), 4000 + 12 * 334);
  EXPECT_EQ(cost::zero_model_state_bytes(1000, 3, 2, Precision::bf16).total(), 2000 + 14 * 334);
  EXPECT_EQ(cost::zero_model_state_bytes(1000, 3, 3, Precision::bf16).total(), 16 * 334);
  EXPECT_EQ(cost::zero_model_state_bytes(1000, 3, 2, Precision::fp32).total(), 4000 + 12 * 334);
}

}  // namespace
}  // namespace strata::ptest
