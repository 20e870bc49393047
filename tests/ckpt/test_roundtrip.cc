// Save and load on one rank: data, training state, manifest, async semantics, retention.
#include <fstream>

#include "ckpt/shard_file.h"
#include "helpers.h"

using namespace ckpt_test;

TEST(CkptRoundTrip, StatesAndTrainStateSurvive) {
  for (bool bf16 : {false, true}) {
    TempDir tmp;
    FullStates f(1001, 10, bf16);
    SaveRequest req = request(f, 10, 0, 1, 0);
    req.train.schedule_step = 9;
    req.train.tokens_seen = 123456789012;
    req.train.rng["dropout"] = {~0ull, 5, 77};
    req.train.extra = {{"best_val", 2.5}};
    Checkpointer c(options(tmp.str(), 0, 1, nullptr));
    SaveStats st = c.save(req);
    EXPECT_TRUE(st.ok) << st.error;
    EXPECT_EQ(st.step, 10);
    EXPECT_EQ(st.dir, tmp.str() + "/ckpt/step-000010");
    EXPECT_GT(st.bytes, 1001 * 4 * 3);
    EXPECT_GE(st.stall_s, st.copy_s);

    LoadResult r = load_and_check_full(tmp.str(), 10, bf16, 1001);
    EXPECT_EQ(r.train.schedule_step, 9);
    EXPECT_EQ(r.train.tokens_seen, 123456789012);
    EXPECT_EQ(r.train.loader_epoch, 1);
    EXPECT_EQ(r.train.loader_consumed, 80);
    EXPECT_EQ(r.train.rng.at("dropout").seed, ~0ull);
    EXPECT_EQ(r.train.rng.at("dropout").counter, 77u);
    EXPECT_EQ(r.train.rng.at("init").seed, 42u);
    EXPECT_EQ(r.train.config.at("psi"), 1001);
    EXPECT_EQ(r.train.precision, bf16 ? "bf16" : "fp32");
    EXPECT_EQ(r.train.extra.at("best_val"), 2.5);
    // The manifest lists the tensors and states with their dtypes.
    EXPECT_EQ(r.manifest.tensors.size(), 3u);
    EXPECT_EQ(r.manifest.tensors[1].name, "h.0.weight");
    EXPECT_EQ(r.manifest.find_state("params")->dtype, bf16 ? DType::bf16 : DType::f32);
    EXPECT_EQ(r.manifest.find_state("master") != nullptr, bf16);
    EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000010");
  }
}

TEST(CkptRoundTrip, Bf16ParamsLoadBitExactAndConvert) {
  TempDir tmp;
  FullStates f(300, 4, true);
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  c.save(request(f, 4, 0, 1, 0));
  std::vector<uint16_t> raw(300);
  std::vector<uint16_t> as_bf16(300);
  load_latest(tmp.str(), {{"params", DType::bf16, {0, 300}, raw.data(), {}},
                         {"exp_avg", DType::bf16, {0, 300}, as_bf16.data(), {}}});
  EXPECT_EQ(raw, f.params_bf16);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(bf16_to_f32(as_bf16[size_t(i)]), value(1, 4, i));
  // A state missing from the checkpoint can come from a fallback (fp32 run -> master).
  TempDir tmp2;
  FullStates g(300, 4, false);
  Checkpointer c2(options(tmp2.str(), 0, 1, nullptr));
  c2.save(request(g, 4, 0, 1, 0));
  std::vector<float> master(300);
  EXPECT_THROW(load_latest(tmp2.str(), {{"master", DType::f32, {0, 300}, master.data(), {}}}), Error);
  load_latest(tmp2.str(), {{"master", DType::f32, {0, 300}, master.data(), {"params"}}});
  for (int i = 0; i < 300; ++i) EXPECT_EQ(master[size_t(i)], value(0, 4, i));
}

TEST(CkptRoundTrip, AsyncSaveCopiesAtTheCallAndWaitsForThePrevious) {
  TempDir tmp;
  FullStates f(5000, 1, false);
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  c.prepare(request(f, 0, 0, 1, 0));
  EXPECT_TRUE(c.history().empty());
  c.save_async(request(f, 1, 0, 1, 0));
  // Training goes on and changes the buffers while the writer runs: the checkpoint must hold
  // the values at the time of the call.
  for (auto& v : f.f32) std::fill(v.begin(), v.end(), 1e9f);
  FullStates g(5000, 2, false);
  c.save_async(request(g, 2, 0, 1, 0));  // waits for step 1 first
  EXPECT_EQ(c.history().size(), 1u);
  EXPECT_TRUE(c.history()[0].ok);
  SaveStats s2 = c.wait();
  EXPECT_TRUE(s2.ok);
  EXPECT_EQ(c.history().size(), 2u);
  // Step 1 is intact on disk even though its source buffers were overwritten.
  std::vector<float> p(5000);
  load_checkpoint(tmp.str() + "/ckpt/step-000001", {{"params", DType::f32, {0, 5000}, p.data(), {}}});
  for (int i = 0; i < 5000; ++i) ASSERT_EQ(p[size_t(i)], value(0, 1, i));
  load_and_check_full(tmp.str(), 2, false, 5000);
  nlohmann::json sj = c.summary_json();
  EXPECT_EQ(sj.at("saves"), 2);
  EXPECT_EQ(sj.at("failed"), 0);
  EXPECT_GE(sj.at("stall_s").at("max").get<double>(), 0.0);
  EXPECT_EQ(sj.at("per_save").size(), 2u);
}

TEST(CkptRoundTrip, ShardFileStartsWithMagicAndVersion) {
  TempDir tmp;
  FullStates f(10, 1, false);
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  c.save(request(f, 1, 0, 1, 0));
  std::ifstream in(tmp.str() + "/ckpt/step-000001/shard-00000-of-00001.bin", std::ios::binary);
  char magic[8];
  uint32_t version = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&version), 4);
  EXPECT_EQ(std::string(magic, 8), "STRATACK");
  EXPECT_EQ(version, 1u);
}

TEST(CkptRetention, KeepsLastKAndMilestonesOnDisk) {
  TempDir tmp;
  CheckpointerOptions o = options(tmp.str(), 0, 1, nullptr);
  o.keep_last = 2;
  o.keep_every = 30;
  Checkpointer c(o);
  for (int64_t step = 10; step <= 70; step += 10) {
    FullStates f(64, step, false);
    c.save_async(request(f, step, 0, 1, 0));
  }
  c.wait();
  EXPECT_EQ(list_steps(tmp.str() + "/ckpt"), (std::vector<int64_t>{30, 60, 70}));
  EXPECT_EQ(read_latest(tmp.str() + "/ckpt").value(), "step-000070");
  for (const auto& e : fs::directory_iterator(tmp.str() + "/ckpt"))
    EXPECT_EQ(e.path().filename().string().rfind(".", 0), std::string::npos)
        << "left behind: " << e.path();
  load_and_check_full(tmp.str(), 70, false, 64);
}

TEST(CkptRoundTrip, ZeroSizedAndTinyStates) {
  for (int64_t psi : {0, 1, 2}) {
    for (int n : {1, 3}) {
      TempDir tmp;
      FullStates f(psi, 3, false);
      save_step(tmp.str(), f, 3, n, 3);
      load_and_check_full(tmp.str(), 3, false, psi);
    }
  }
}

TEST(CkptRoundTrip, ResavingTheLatestStepIsRefused) {
  TempDir tmp;
  FullStates f(32, 5, false);
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  c.save(request(f, 5, 0, 1, 0));
  FullStates g(32, 6, false);
  c.save_async(request(g, 5, 0, 1, 0));
  try {
    c.wait();
    FAIL() << "overwrote the latest checkpoint";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not overwriting"), std::string::npos) << e.what();
  }
  load_and_check_full(tmp.str(), 5, false, 32);  // untouched
}

TEST(CkptRoundTrip, InconsistentRequestsAreRejected) {
  TempDir tmp;
  FullStates f(32, 5, false);
  Checkpointer c(options(tmp.str(), 0, 1, nullptr));
  SaveRequest r = request(f, 5, 0, 1, 0);
  r.states[1].name = "params";
  EXPECT_THROW(c.save_async(r), Error);
  // Holding only half of a state on a single rank: the pieces do not cover it, no commit.
  SaveRequest half = request(f, 5, 0, 1, 0);
  half.states[2].held = {0, 16};
  c.save_async(half);
  EXPECT_THROW(c.wait(), Error);
  EXPECT_FALSE(read_latest(tmp.str() + "/ckpt").has_value());
  EXPECT_TRUE(list_steps(tmp.str() + "/ckpt").empty());
}
