// Checkpoint access: every rank's write ranges tile [0, Ψ) exactly once, and optimizer
// state saved from one layout (stage, world size, precision) and loaded into another
// continues training exactly where the first left off.
#include <omp.h>

#include <map>
#include <mutex>

#include "comm/process_group.h"
#include "core/rng.h"
#include "gtest/gtest.h"
#include "harness.h"
#include "parallel/zero_comm.h"

namespace strata::ptest {
namespace {

using parallel::DataParallelOptions;
using cost::Precision;
using State = std::map<std::string, std::vector<float>>;  // name -> [0, Ψ)

// Trains `steps` steps (global batch 12 of random tokens per step, drawn from the step
// number) on `world` ranks, optionally starting from `load` at step `first`; returns the
// losses and the state as the checkpoint helper would assemble it from write ranges.
std::vector<double> train(int world, const DataParallelOptions& o, int first, int steps,
                          const State* load, State* save) {
  const model::GPTConfig cfg = small_config();
  const int B = 12, T = 16, micro = B / world;
  std::vector<double> losses;
  std::mutex mu;
  comm::run_threads(world, [&](comm::ProcessGroup& pg) {
    omp_set_num_threads(1);
    model::GPT gpt(cfg, micro, false);
    parallel::DataParallelEngine engine(gpt, pg, o, {}, 11);
    if (load) {
      for (parallel::StateShard& s : engine.state_shards()) {
        const std::vector<float>& src = load->at(s.name);
        std::copy(src.begin() + s.begin, src.begin() + s.end, static_cast<float*>(s.data));
      }
      engine.state_loaded(first);
    }
    for (int step = first; step < first + steps; ++step) {
      std::vector<int32_t> tok(size_t(micro) * T), tgt(tok.size());
      for (int i = 0; i < micro; ++i) {
        Rng rng(3, uint64_t(step) * 64 + uint64_t(pg.rank() * micro + i));
        for (int t = 0; t < T; ++t) {
          tok[size_t(i) * T + t] = int32_t(rng.below(uint64_t(cfg.vocab)));
          tgt[size_t(i) * T + t] = (tok[size_t(i) * T + t] * 5 + 1) % cfg.vocab;
        }
      }
      engine.begin_step();
      engine.begin_micro(0, 1);
      double loss = gpt.forward(tok.data(), tgt.data(), nullptr, micro, T);
      gpt.backward(1.0f / float(B * T));
      engine.end_backward();
      engine.step(2e-3f);
      loss = parallel::sum_over_ranks(pg, loss) / double(B * T);
      if (pg.rank() == 0) losses.push_back(loss);
    }
    EXPECT_EQ(engine.step_count(), first + steps);
    if (save) {
      std::lock_guard lk(mu);
      for (const parallel::StateShard& s : engine.state_shards()) {
        ASSERT_EQ(s.dtype, DType::f32);
        ASSERT_LE(s.begin, s.write_begin);
        ASSERT_LE(s.write_end, s.end);
        std::vector<float>& dst = (*save)[s.name];
        dst.resize(size_t(gpt.num_params()), std::nanf(""));
        const float* src = static_cast<const float*>(s.data);
        for (int64_t i = s.write_begin; i < s.write_end; ++i) {
          EXPECT_TRUE(std::isnan(dst[size_t(i)])) << s.name << " element " << i << " written twice";
          dst[size_t(i)] = src[i - s.begin];
        }
      }
    }
  });
  return losses;
}

DataParallelOptions opts(int stage, Precision p) {
  DataParallelOptions o;
  o.stage = stage;
  o.precision = p;
  o.bucket_mb = 0.1;
  return o;
}

TEST(ZeroStateShards, WriteRangesTileTheFlatSpaceAndResumeAcrossLayouts) {
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    const std::vector<double> straight = train(2, opts(0, p), 0, 8, nullptr, nullptr);
    State saved;
    const std::vector<double> head = train(2, opts(0, p), 0, 4, nullptr, &saved);
    for (auto& [name, v] : saved)
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_FALSE(std::isnan(v[i])) << name << " element " << i << " written by no rank";
    // Resume the last 4 steps on other layouts: 3 ranks at stage 3, 4 ranks at stage 1.
    for (auto [world, stage] : {std::pair{3, 3}, std::pair{4, 1}, std::pair{2, 0}}) {
      const std::vector<double> tail = train(world, opts(stage, p), 4, 4, &saved, nullptr);
      ASSERT_EQ(tail.size(), 4u);
      for (int i = 0; i < 4; ++i)
        EXPECT_NEAR(tail[i], straight[4 + i], p == Precision::fp32 ? 1e-5 : 1e-3)
            << "step " << 4 + i << " world " << world << " stage " << stage;
    }
  }
}

}  // namespace
}  // namespace strata::ptest
