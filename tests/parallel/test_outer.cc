// The outer step of replica groups (parallel/outer.h) against a reference written from the
// paper's definition: groups (threads of this process, one rank each) whose engines move their
// parameters by known amounts; after every H steps each group's parameters must be the
// reference's global parameters, Nesterov momentum included, and every group must hold the same.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "comm/process_group.h"
#include "core/error.h"
#include "parallel/outer.h"
#include "parallel/outer_codec.h"

namespace strata::parallel {
namespace {

// An engine of n fp32 parameters whose step adds a fixed, group- and step-dependent amount.
class ShiftEngine final : public StepEngine {
 public:
  ShiftEngine(int n, int group) : params_(size_t(n)), group_(group) {
    for (int i = 0; i < n; ++i) params_[size_t(i)] = 0.5f - 0.01f * float(i);
  }
  static float shift(int group, int64_t step, int i) { return 0.001f * float((group + 1) * (i % 5 + 1)) * float(step % 3 + 1); }
  bool same_shift = false;  // every group moves alike
  void begin_step() override {}
  void end_backward() override {}
  float step(float) override {
    ++steps_;
    for (size_t i = 0; i < params_.size(); ++i) params_[i] -= shift(same_shift ? 0 : group_, steps_, int(i));
    return 0;
  }
  float step_if(float lr, const std::function<bool(float)>&) override { return step(lr); }
  int64_t step_count() const override { return steps_; }
  std::vector<StateShard> state_shards() override {
    const int64_t n = int64_t(params_.size());
    return {{"params", DType::f32, 0, n, 0, n, params_.data()}};
  }
  void state_loaded(int64_t s) override { loaded_ = s; }
  std::vector<float> params_;
  int group_;
  int64_t steps_ = 0, loaded_ = -1;
};

TEST(OuterSync, NesterovStepEqualsTheReference) {
  constexpr int R = 2, n = 37, H = 3, steps = 8;  // syncs after steps 3, 6 and 8 (the last)
  OuterOptions o;
  o.groups = R;
  o.inner_steps = H;
  o.lr = 0.7;
  o.momentum = 0.9;
  // The reference in double: the groups' parameters move by their shifts; at a sync
  // Δ = θ - mean, m = μm + Δ, θ -= lr (Δ + μm), and every group restarts from θ.
  std::vector<double> theta(n), m(n, 0.0);
  std::vector<std::vector<double>> x(R, std::vector<double>(n));
  for (int i = 0; i < n; ++i) theta[size_t(i)] = double(0.5f - 0.01f * float(i));
  for (auto& g : x) g = theta;
  for (int64_t s = 1; s <= steps; ++s) {
    for (int g = 0; g < R; ++g)
      for (int i = 0; i < n; ++i) x[size_t(g)][size_t(i)] -= ShiftEngine::shift(g, s, i);
    if (s % H != 0 && s != steps) continue;
    for (int i = 0; i < n; ++i) {
      double mean = 0;
      for (int g = 0; g < R; ++g) mean += x[size_t(g)][size_t(i)] / R;
      const double delta = theta[size_t(i)] - mean;
      m[size_t(i)] = o.momentum * m[size_t(i)] + delta;
      theta[size_t(i)] -= o.lr * (delta + o.momentum * m[size_t(i)]);
      for (int g = 0; g < R; ++g) x[size_t(g)][size_t(i)] = theta[size_t(i)];
    }
  }
  std::mutex mu;
  std::vector<std::vector<float>> got(R);
  std::vector<int64_t> syncs(R), loaded(R);
  comm::run_threads(R, [&](comm::ProcessGroup& pg) {
    auto inner = std::make_unique<ShiftEngine>(n, pg.rank());
    ShiftEngine* e = inner.get();
    OuterSyncEngine outer(std::move(inner), o, &pg, pg.rank(), steps);
    for (int s = 1; s <= steps; ++s) outer.step(1e-3f);
    std::lock_guard lk(mu);
    got[size_t(pg.rank())] = e->params_;
    syncs[size_t(pg.rank())] = outer.stats().syncs;
    loaded[size_t(pg.rank())] = e->loaded_;
    // The checkpoint states: the inner ones per group, the global ones written by group 0.
    std::vector<StateShard> st = outer.state_shards();
    ASSERT_EQ(st.size(), 4u);
    for (int g = 0; g < R; ++g) {
      EXPECT_EQ(st[size_t(g)].name, "group" + std::to_string(g) + ".params");
      EXPECT_EQ(st[size_t(g)].end - st[size_t(g)].begin, g == pg.rank() ? n : 0);  // its own group's
    }
    EXPECT_EQ(st[2].name, "outer.params");
    EXPECT_EQ(st[3].name, "outer.momentum");
    EXPECT_EQ(st[2].write_end - st[2].write_begin, pg.rank() == 0 ? n : 0);
  });
  for (int g = 0; g < R; ++g) {
    EXPECT_EQ(syncs[size_t(g)], 3);
    EXPECT_EQ(loaded[size_t(g)], steps);  // the working copies were refreshed after the sync
    EXPECT_EQ(got[size_t(g)], got[0]) << "group " << g << " left the last sync with other parameters";
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(got[size_t(g)][size_t(i)], theta[size_t(i)], 1e-6) << "group " << g << ", parameter " << i;
  }
}

TEST(OuterSync, OneGroupAtOuterLrOneAndNoMomentumChangesNothing) {
  OuterOptions o;
  o.inner_steps = 1;
  o.lr = 1;
  o.momentum = 0;
  auto inner = std::make_unique<ShiftEngine>(11, 0);
  ShiftEngine* e = inner.get();
  ShiftEngine plain(11, 0);
  OuterSyncEngine outer(std::move(inner), o, nullptr, 0, 5);
  for (int s = 0; s < 5; ++s) {
    outer.step(0);
    plain.step(0);
    EXPECT_EQ(e->params_, plain.params_) << "after step " << s + 1;  // the same bits
  }
  EXPECT_EQ(outer.stats().syncs, 5);
  EXPECT_EQ(outer.stats().bytes_sent, 0);  // nothing crosses with one group
}

TEST(OuterSync, RefusesImpossibleSettings) {
  OuterOptions o;
  o.inner_steps = 2;
  auto make = [&](OuterOptions oo, comm::ProcessGroup* across = nullptr) {
    return OuterSyncEngine(std::make_unique<ShiftEngine>(3, 0), oo, across, 0, 4);
  };
  OuterOptions bad = o;
  bad.lr = 0;
  EXPECT_THROW(make(bad), Error);
  bad = o;
  bad.momentum = 1;
  EXPECT_THROW(make(bad), Error);
  bad = o;
  bad.groups = 2;  // and no group across them
  EXPECT_THROW(make(bad), Error);
  EXPECT_EQ(parse_group_data("same"), GroupData::same);
  EXPECT_THROW(parse_group_data("shared"), Error);
}

// Streaming: two fragments at staggered steps, each exchange merged τ = 1 step after it
// started with mix α = 0.5, against the same schedule written out in double.
TEST(OuterSync, StaggeredFragmentsMergedOneStepLaterEqualTheReference) {
  constexpr int R = 2, n = 37, H = 4, steps = 10, split = 20;
  OuterOptions o;
  o.groups = R;
  o.inner_steps = H;
  o.fragments = 2;
  o.overlap = 1;
  o.mix = 0.5;
  const std::vector<FlatRanges> frags = {{{0, split}}, {{split, n}}};
  std::vector<double> theta(n), m(n, 0.0);
  std::vector<std::vector<double>> x(R, std::vector<double>(n)), sent(R, std::vector<double>(n));
  for (int i = 0; i < n; ++i) theta[size_t(i)] = double(0.5f - 0.01f * float(i));
  for (auto& g : x) g = theta;
  auto lo = [&](int f) { return f == 0 ? 0 : split; };
  auto hi = [&](int f) { return f == 0 ? split : n; };
  auto merge = [&](int f, bool replace) {  // the outer step of fragment f from what was sent
    for (int i = lo(f); i < hi(f); ++i) {
      double mean = 0;
      for (int g = 0; g < R; ++g) mean += sent[size_t(g)][size_t(i)] / R;
      const double delta = theta[size_t(i)] - mean;
      m[size_t(i)] = o.momentum * m[size_t(i)] + delta;
      theta[size_t(i)] -= o.lr * (delta + o.momentum * m[size_t(i)]);
      for (int g = 0; g < R; ++g)
        x[size_t(g)][size_t(i)] = replace ? theta[size_t(i)] : 0.5 * x[size_t(g)][size_t(i)] + 0.5 * theta[size_t(i)];
    }
  };
  auto send = [&](int f) {
    for (int g = 0; g < R; ++g)
      for (int i = lo(f); i < hi(f); ++i) sent[size_t(g)][size_t(i)] = x[size_t(g)][size_t(i)];
  };
  std::vector<int> pending_since(2, -1);
  for (int s = 1; s <= steps; ++s) {
    for (int g = 0; g < R; ++g)
      for (int i = 0; i < n; ++i) x[size_t(g)][size_t(i)] -= ShiftEngine::shift(g, s, i);
    for (int f = 0; f < 2; ++f)
      if (pending_since[size_t(f)] >= 0 && (pending_since[size_t(f)] + 1 <= s || s == steps)) {
        merge(f, s == steps);
        pending_since[size_t(f)] = -1;
      }
    for (int f = 0; f < 2; ++f) {
      const int offset = f * H / 2;  // fragment 1 meets at steps 2, 6, 10
      if (s != steps && s % H != offset) continue;
      send(f);
      if (s == steps) merge(f, true);
      else pending_since[size_t(f)] = s;
    }
  }
  std::mutex mu;
  std::vector<std::vector<float>> got(R);
  std::vector<int64_t> syncs(R);
  comm::run_threads(R, [&](comm::ProcessGroup& pg) {
    auto inner = std::make_unique<ShiftEngine>(n, pg.rank());
    ShiftEngine* e = inner.get();
    OuterSyncEngine outer(std::move(inner), o, &pg, pg.rank(), steps, frags);
    for (int s = 1; s <= steps; ++s) outer.step(1e-3f);
    std::lock_guard lk(mu);
    got[size_t(pg.rank())] = e->params_;
    syncs[size_t(pg.rank())] = outer.stats().syncs;
  });
  for (int g = 0; g < R; ++g) {
    EXPECT_EQ(syncs[size_t(g)], 2 + 2 + 2);  // fragment 0 at 4, 8; fragment 1 at 2, 6; both at 10
    for (int i = 0; i < n; ++i)
      EXPECT_NEAR(got[size_t(g)][size_t(i)], theta[size_t(i)], 1e-6) << "group " << g << ", parameter " << i;
  }
}

// Quantized exchanges: each group sends its outer gradient encoded (with error feedback, plus
// what its last encoding rounded away); the mean of the decoded ones drives the same Nesterov
// step. Groups that move alike send the same codes.
TEST(OuterSync, QuantizedOuterGradientsDriveTheSameStep) {
  constexpr int R = 2, n = 150, H = 3, steps = 9;
  for (bool ef : {false, true})
  for (OuterDType t : {OuterDType::bf16, OuterDType::int8, OuterDType::int4}) {
    OuterOptions o;
    o.groups = R;
    o.inner_steps = H;
    o.dtype = t;
    o.error_feedback = ef;
    std::vector<float> theta(n), m(n, 0.0f), x(n), residual(n, 0.0f);
    for (int i = 0; i < n; ++i) theta[size_t(i)] = x[size_t(i)] = 0.5f - 0.01f * float(i);
    for (int s = 1; s <= steps; ++s) {
      for (int i = 0; i < n; ++i) x[size_t(i)] -= ShiftEngine::shift(0, s, i);
      if (s % H != 0) continue;
      std::vector<float> delta(n), dq(n, 0.0f), own(n, 0.0f);
      for (int i = 0; i < n; ++i) delta[size_t(i)] = theta[size_t(i)] - x[size_t(i)] + (ef ? residual[size_t(i)] : 0.0f);
      std::vector<uint8_t> code(size_t(encoded_bytes(n, t)));
      encode(delta.data(), n, t, code.data());
      decode_add(code.data(), n, t, 1.0f, own.data());
      for (int i = 0; i < n; ++i) residual[size_t(i)] = delta[size_t(i)] - own[size_t(i)];
      for (int g = 0; g < R; ++g) decode_add(code.data(), n, t, 1.0f / R, dq.data());
      for (int i = 0; i < n; ++i) {
        m[size_t(i)] = float(o.momentum) * m[size_t(i)] + dq[size_t(i)];
        theta[size_t(i)] -= float(o.lr) * (dq[size_t(i)] + float(o.momentum) * m[size_t(i)]);
        x[size_t(i)] = theta[size_t(i)];
      }
    }
    std::mutex mu;
    std::vector<std::vector<float>> got(R);
    std::vector<int64_t> bytes(R);
    comm::run_threads(R, [&](comm::ProcessGroup& pg) {
      auto inner = std::make_unique<ShiftEngine>(n, pg.rank());
      inner->same_shift = true;
      ShiftEngine* e = inner.get();
      OuterSyncEngine outer(std::move(inner), o, &pg, pg.rank(), steps);
      for (int s = 1; s <= steps; ++s) outer.step(0);
      std::lock_guard lk(mu);
      got[size_t(pg.rank())] = e->params_;
      bytes[size_t(pg.rank())] = outer.stats().bytes_sent;
    });
    for (int g = 0; g < R; ++g) {
      EXPECT_EQ(bytes[size_t(g)], 3 * encoded_bytes(n, t)) << outer_dtype_name(t);
      for (int i = 0; i < n; ++i)
        EXPECT_NEAR(got[size_t(g)][size_t(i)], theta[size_t(i)], 1e-6) << outer_dtype_name(t) << (ef ? " with error feedback" : "");
    }
  }
}

// The codes: sizes, and each value within half a step of its block's scale.
TEST(OuterCodec, BlocksRoundWithinHalfAStep) {
  const int64_t n = 200;  // 3 full blocks and one of 8
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = std::sin(0.37f * float(i)) * (i < 64 ? 1e-3f : 2.0f);
  EXPECT_EQ(encoded_bytes(n, OuterDType::fp32), 800);
  EXPECT_EQ(encoded_bytes(n, OuterDType::bf16), 400);
  EXPECT_EQ(encoded_bytes(n, OuterDType::int8), 3 * (4 + 64) + (4 + 8));
  EXPECT_EQ(encoded_bytes(n, OuterDType::int4), 3 * (4 + 32) + (4 + 4));
  for (OuterDType t : {OuterDType::bf16, OuterDType::int8, OuterDType::int4}) {
    std::vector<uint8_t> code(size_t(encoded_bytes(n, t)));
    encode(v.data(), n, t, code.data());
    std::vector<float> back(n, 0.0f);
    decode_add(code.data(), n, t, 1.0f, back.data());
    for (int64_t b = 0; b < n; b += kOuterBlock) {
      float absmax = 0;
      for (int64_t i = b; i < std::min(n, b + kOuterBlock); ++i) absmax = std::max(absmax, std::fabs(v[size_t(i)]));
      for (int64_t i = b; i < std::min(n, b + kOuterBlock); ++i) {
        const double bound = t == OuterDType::bf16 ? std::fabs(v[size_t(i)]) / 256.0
                                                   : absmax / (t == OuterDType::int8 ? 127.0 : 7.0) / 2 * 1.0001;
        EXPECT_LE(std::fabs(back[size_t(i)] - v[size_t(i)]), bound) << outer_dtype_name(t) << " value " << i;
      }
    }
  }
  EXPECT_EQ(parse_outer_dtype("int4"), OuterDType::int4);
  EXPECT_THROW(parse_outer_dtype("fp8"), Error);
}

}  // namespace
}  // namespace strata::parallel
