// Resharding matrix: written by N ranks at ZeRO stage s, loaded by M ranks at stage s'.
#include "helpers.h"

using namespace ckpt_test;

namespace {

// Rank r of m at stage s' loads what it would hold and checks every element, including the
// zero padding past Ψ of the last shard.
void load_as(const std::string& run, int64_t psi, bool bf16, int64_t step, int m, int stage) {
  Group g(m);
  g.run([&](int r) {
    const int nstates = bf16 ? 4 : 3;
    const int64_t S = shard_elems(psi, m);
    std::vector<std::vector<float>> buf(static_cast<size_t>(nstates));
    std::vector<uint16_t> params16;
    std::vector<StateTarget> targets;
    for (int s = 0; s < nstates; ++s) {
      const bool sharded = zero_shards_state(stage, s == 0);
      Range want = sharded ? Range{r * S, (r + 1) * S} : Range{0, psi};
      if (s == 0 && bf16) {
        params16.assign(size_t(want.size()), 0xFFFF);
        targets.push_back({kStates[s], DType::bf16, want, params16.data(), {}});
      } else {
        buf[size_t(s)].assign(size_t(want.size()), -999.f);
        targets.push_back({kStates[s], DType::f32, want, buf[size_t(s)].data(), {}});
      }
    }
    LoadOptions o;
    o.expected_tensors = table_for(psi);
    o.all_ok = [&](bool ok) { return g.all_ok(r, ok); };
    auto res = load_latest(run, targets, o);
    ASSERT_TRUE(res.has_value());
    ASSERT_EQ(res->train.step, step);
    for (int s = 0; s < nstates; ++s) {
      const Range want = targets[size_t(s)].want;
      for (int64_t i = want.begin; i < want.end; ++i) {
        const float expect = i < psi ? value(s, step, i) : 0.0f;
        const float got = (s == 0 && bf16) ? bf16_to_f32(params16[size_t(i - want.begin)])
                                           : buf[size_t(s)][size_t(i - want.begin)];
        ASSERT_EQ(got, expect) << kStates[s] << "[" << i << "] rank " << r << " of " << m
                               << " stage " << stage;
      }
    }
  });
}

}  // namespace

TEST(CkptReshard, MatrixNStageToMStage) {
  const int64_t psi = 1001;  // divisible by none of 2, 3, 4
  for (int n = 1; n <= 4; ++n) {
    for (int s = 0; s <= 3; ++s) {
      TempDir tmp;
      const bool bf16 = (n + s) % 2 == 1;  // half the cells with bf16 params + fp32 master
      FullStates f(psi, 100 + n * 10 + s, bf16);
      save_step(tmp.str(), f, 100 + n * 10 + s, n, s);
      // Every rank wrote one shard file, whatever the stage (replicated states are split).
      Manifest man = read_manifest(tmp.str() + "/ckpt/" + step_dir_name(100 + n * 10 + s));
      EXPECT_EQ(int(man.shards.size()), n);
      EXPECT_EQ(man.train.world, n);
      EXPECT_EQ(man.train.zero_stage, s);
      for (int m = 1; m <= 4; ++m)
        for (int s2 = 0; s2 <= 3; ++s2) {
          SCOPED_TRACE(testing::Message() << "N=" << n << " s=" << s << " -> M=" << m << " s'=" << s2);
          load_as(tmp.str(), psi, bf16, 100 + n * 10 + s, m, s2);
        }
    }
  }
}

TEST(CkptReshard, SmallStatesOverManyRanks) {
  for (int64_t psi : {1, 2, 3, 5}) {
    for (int n : {1, 4, 7}) {
      TempDir tmp;
      FullStates f(psi, 9, false);
      save_step(tmp.str(), f, 9, n, 3);
      for (int m : {1, 2, 5, 8}) {
        SCOPED_TRACE(testing::Message() << "psi=" << psi << " N=" << n << " M=" << m);
        load_as(tmp.str(), psi, false, 9, m, 3);
      }
    }
  }
}

TEST(CkptReshard, ResumeAfterResaveOnAnotherWorldSize) {
  // 4 ranks at stage 3 save step 10; 3 ranks at stage 1 load it and save step 20; 2 ranks at
  // stage 0 load step 20.
  TempDir tmp;
  FullStates f10(777, 10, true);
  save_step(tmp.str(), f10, 10, 4, 3);
  load_as(tmp.str(), 777, true, 10, 3, 1);
  FullStates f20(777, 20, true);
  save_step(tmp.str(), f20, 20, 3, 1);
  load_as(tmp.str(), 777, true, 20, 2, 0);
  EXPECT_EQ(list_steps(tmp.str() + "/ckpt"), (std::vector<int64_t>{10, 20}));
}

TEST(CkptReshard, ExplicitWriteRangesAreHonoured) {
  // Replicated states with caller-chosen write ranges: rank 0 writes [0, 100), rank 1 the rest.
  TempDir tmp;
  FullStates f(1001, 5, false);
  Group g(2);
  g.run([&](int r) {
    Checkpointer c(options(tmp.str(), r, 2, &g));
    SaveRequest req = request(f, 5, r, 2, 0);
    for (StateSlice& s : req.states) s.write = r == 0 ? Range{0, 100} : Range{100, 1001};
    c.save(req);
  });
  Manifest m = read_manifest(tmp.str() + "/ckpt/step-000005");
  // Rank 0's range ends inside the first tensor (333 elements), rank 1's crosses all three.
  EXPECT_EQ(m.shards[0].pieces[0].tensor, "wte");
  EXPECT_EQ(m.shards[0].pieces[0].flat, (Range{0, 100}));
  EXPECT_EQ(m.shards[1].pieces[0].tensor, "wte");
  EXPECT_EQ(m.shards[1].pieces[0].flat, (Range{100, 333}));
  EXPECT_EQ(m.shards[1].pieces[1].tensor, "h.0.weight");
  EXPECT_EQ(m.shards[1].pieces[1].flat, (Range{0, 333}));
  load_as(tmp.str(), 1001, false, 5, 3, 2);
  // Overlapping write ranges cannot be committed.
  Group g2(2);
  std::vector<std::string> errors(2);
  g2.run([&](int r) {
    Checkpointer c(options(tmp.str(), r, 2, &g2));
    SaveRequest req = request(f, 6, r, 2, 0);
    for (StateSlice& s : req.states) s.write = r == 0 ? Range{0, 500} : Range{400, 1001};
    c.save_async(req);
    try {
      c.wait();
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("saved twice"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("not committed"), std::string::npos) << errors[1];
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000005");
}
