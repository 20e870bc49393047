// Shared fixtures of the checkpoint tests: temporary run directories, synthetic flat states
// whose every element is a known function of (state, step, index), and ranks as threads.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/checkpointer.h"
#include "ckpt/load.h"
#include "core/dtype.h"
#include "support/temp_dir.h"

namespace ckpt_test {

using namespace strata;
using namespace strata::ckpt;
namespace fs = std::filesystem;

using test::TempDir;

// Exactly representable in fp32 and bf16: small integers and halves.
inline float value(int state, int64_t step, int64_t i) {
  return float(((i * 7 + state * 13 + step * 3) % 251) - 125) * 0.5f;
}

// A model-like table: three tensors tiling psi elements (the tests only need names + ranges).
inline std::vector<TensorInfo> table_for(int64_t psi) {
  const int64_t a = psi / 3, b = psi / 3;
  return {{"wte", {a}, 0}, {"h.0.weight", {b}, a}, {"ln_f.bias", {psi - a - b}, a + b}};
}

inline const char* kStates[] = {"params", "exp_avg", "exp_avg_sq", "master"};

// Every state of a run in full (what stage 0 holds on every rank).
struct FullStates {
  int64_t psi;
  bool bf16;  // params in bf16 plus an fp32 master copy
  std::vector<std::vector<float>> f32;  // exp_avg, exp_avg_sq, master (or params when !bf16)
  std::vector<uint16_t> params_bf16;
  FullStates(int64_t psi_, int64_t step, bool bf16_) : psi(psi_), bf16(bf16_) {
    for (int s = 0; s < 4; ++s) {
      std::vector<float> v(static_cast<size_t>(psi));
      for (int64_t i = 0; i < psi; ++i) v[size_t(i)] = value(s, step, i);
      if (s == 0 && bf16) {
        params_bf16.resize(size_t(psi));
        for (int64_t i = 0; i < psi; ++i) params_bf16[size_t(i)] = f32_to_bf16(v[size_t(i)]);
      }
      f32.push_back(std::move(v));
    }
  }
  int num_states() const { return bf16 ? 4 : 3; }
};

// The slices rank r holds at ZeRO stage `stage` over n ranks (padding included in the range).
inline std::vector<StateSlice> slices(const FullStates& f, int rank, int n, int stage) {
  std::vector<StateSlice> out;
  const int64_t S = shard_elems(f.psi, n);
  for (int s = 0; s < f.num_states(); ++s) {
    StateSlice sl;
    sl.name = kStates[s];
    sl.numel = f.psi;
    const bool sharded = zero_shards_state(stage, s == 0);
    sl.held = sharded ? Range{rank * S, (rank + 1) * S} : Range{0, f.psi};
    if (s == 0 && f.bf16) {
      sl.dtype = DType::bf16;
      sl.data = f.params_bf16.data() + std::min(sl.held.begin, f.psi);
    } else {
      sl.data = f.f32[size_t(s)].data() + std::min(sl.held.begin, f.psi);
    }
    out.push_back(sl);
  }
  return out;
}

inline SaveRequest request(const FullStates& f, int64_t step, int rank, int n, int stage) {
  SaveRequest r;
  r.step = step;
  r.tensors = table_for(f.psi);
  r.states = slices(f, rank, n, stage);
  r.train.world = n;
  r.train.zero_stage = stage;
  r.train.precision = f.bf16 ? "bf16" : "fp32";
  r.train.loader_epoch = 1;
  r.train.loader_consumed = step * 8;
  r.train.rng["init"] = {42, 0, uint64_t(step)};
  r.train.config = {{"model", "synthetic"}, {"psi", f.psi}};
  return r;
}

// A safetensors file split as the format defines it (8-byte length, JSON header, data), by a
// parser written here, independent of the library's reader.
struct ParsedSafetensors {
  nlohmann::json header;
  std::string data;
  uint64_t header_len = 0;
};

inline ParsedSafetensors parse_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ParsedSafetensors p;
  EXPECT_GE(all.size(), 8u);
  for (int i = 0; i < 8; ++i) p.header_len |= uint64_t(uint8_t(all[size_t(i)])) << (8 * i);
  p.header = nlohmann::json::parse(all.substr(8, p.header_len));
  p.data = all.substr(8 + p.header_len);
  return p;
}

// Ranks as threads: barrier and logical-AND agreement like a communicator would give.
struct Group {
  int n;
  std::barrier<> bar;
  std::mutex mu;
  bool any_bad = false;
  explicit Group(int n_) : n(n_), bar(n_) {}
  std::function<void()> barrier() {
    return [this] { bar.arrive_and_wait(); };
  }
  bool all_ok(int rank, bool ok) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (!ok) any_bad = true;
    }
    bar.arrive_and_wait();
    const bool r = !any_bad;
    bar.arrive_and_wait();
    if (rank == 0) any_bad = false;
    bar.arrive_and_wait();
    return r;
  }
  // Runs fn(rank) on n threads; rethrows the first failure.
  void run(const std::function<void(int)>& fn) {
    std::vector<std::thread> ts;
    std::vector<std::string> errors(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
      ts.emplace_back([&, r] {
        try {
          fn(r);
        } catch (const std::exception& e) {
          errors[size_t(r)] = e.what();
        }
      });
    for (auto& t : ts) t.join();
    for (int r = 0; r < n; ++r)
      if (!errors[size_t(r)].empty()) throw Error(cat("rank ", r, ": ", errors[size_t(r)]));
  }
};

inline CheckpointerOptions options(const std::string& run, int rank, int n, Group* g,
                                   std::vector<std::string>* log = nullptr) {
  CheckpointerOptions o;
  o.run_dir = run;
  o.rank = rank;
  o.world = n;
  if (g) o.barrier = g->barrier();
  o.block_bytes = 256;  // many blocks even for small states
  o.log = [log](const std::string& s) {
    if (log) log->push_back(s);
  };
  return o;
}

// Saves `step` of the synthetic run on n rank threads at `stage`.
inline void save_step(const std::string& run, const FullStates& f, int64_t step, int n, int stage) {
  Group g(n);
  g.run([&](int r) {
    Checkpointer c(options(run, r, n, &g));
    c.save(request(f, step, r, n, stage));
  });
}

// Elements of a table laid out back to back (its last tensor's end).
inline int64_t table_numel(const std::vector<TensorInfo>& t) {
  return t.back().offset + numel(t.back().shape);
}

// Saves `step` of a model with tensor table `table` (values as FullStates gives them) and run
// configuration `config` on n rank threads at ZeRO `stage`; returns the step directory.
inline std::string save_model(const std::string& run, const std::vector<TensorInfo>& table,
                              const nlohmann::json& config, int n, int stage, int64_t step) {
  FullStates f(table_numel(table), step, false);
  Group g(n);
  g.run([&](int r) {
    Checkpointer c(options(run, r, n, &g));
    SaveRequest req = request(f, step, r, n, stage);
    req.tensors = table;
    req.train.config = config;
    c.save(req);
  });
  return run + "/ckpt/" + step_dir_name(step);
}

// Element i of F32 tensor `name` of a parsed safetensors file.
inline float element(const ParsedSafetensors& p, const std::string& name, int64_t i) {
  const size_t b = p.header.at(name).at("data_offsets").at(0);
  float v;
  std::memcpy(&v, p.data.data() + b + size_t(i) * 4, 4);
  return v;
}

// Loads every state whole on one rank and checks each element against `step`'s values.
inline LoadResult load_and_check_full(const std::string& run, int64_t step, bool bf16,
                                      int64_t psi, std::vector<std::string>* log = nullptr) {
  std::vector<std::vector<float>> got(4, std::vector<float>(size_t(psi), -999.f));
  std::vector<StateTarget> targets;
  for (int s = 0; s < (bf16 ? 4 : 3); ++s)
    targets.push_back({kStates[s], DType::f32, {0, psi}, got[size_t(s)].data(), {}});
  LoadOptions o;
  o.expected_tensors = table_for(psi);
  o.log = [log](const std::string& s) {
    if (log) log->push_back(s);
  };
  auto r = load_latest(run, targets, o);
  if (!r) throw Error("no checkpoint");
  EXPECT_EQ(r->train.step, step);
  for (int s = 0; s < (bf16 ? 4 : 3); ++s)
    for (int64_t i = 0; i < psi; ++i)
      if (got[size_t(s)][size_t(i)] != value(s, step, i)) {
        ADD_FAILURE() << kStates[s] << "[" << i << "] = " << got[size_t(s)][size_t(i)] << ", expected "
                      << value(s, step, i);
        return *r;
      }
  return *r;
}

}  // namespace ckpt_test
