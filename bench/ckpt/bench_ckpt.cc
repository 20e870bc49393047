// Checkpoint timing for one model size: each of W ranks (threads of this process) holds its
// part of 4 fp32 states of Ψ elements (params, exp_avg, exp_avg_sq, master) at a ZeRO stage
// and saves R times asynchronously; reported per save: the stall the training thread pays
// (copy into the host buffer), the writer's time (write + fsync + commit) and its bandwidth,
// then the time to load the newest checkpoint back (every rank reads its own range), and the
// time for one thread to load the whole `params` state into two layouts of the same tensors:
// whole tensors (one run each) and every matrix cut into 4 column boxes, the layout of a
// row-parallel weight under tensor parallelism (one run per row of each box).
//
//   bench_ckpt --model tiny --world 2 --stage 1 --reps 5 --dir /tmp/x --json
#include <algorithm>
#include <barrier>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "ckpt/checkpointer.h"
#include "ckpt/load.h"
#include "core/stats.h"
#include "core/timer.h"
#include "model/gpt.h"

using namespace strata;
using namespace strata::ckpt;

namespace {

const char* kNames[] = {"params", "exp_avg", "exp_avg_sq", "master"};

// Every tensor of `table` whole, except that each matrix is held as `parts` column boxes.
TensorLayout column_layout(const std::vector<TensorInfo>& table, int parts) {
  TensorLayout out;
  int64_t at = 0;
  for (const TensorInfo& t : table) {
    const int n = t.shape.size() == 2 ? parts : 1;
    for (int k = 0; k < n; ++k) {
      std::vector<int64_t> off(t.shape.size(), 0);
      Shape ext = t.shape;
      if (n > 1) {
        off[1] = t.shape[1] * k / n;
        ext[1] = t.shape[1] * (k + 1) / n - off[1];
      }
      out.push_back({t.name, t.shape, off, ext, at, true});
      at += numel(ext);
    }
  }
  return out;
}

// Seconds for one thread to load the whole params state of the newest checkpoint in `layout`;
// checks every element against `expect` (the values saved, in the tensors' global order).
double timed_whole_load(const std::string& dir, const TensorLayout& layout,
                        const std::vector<TensorInfo>& table, const std::vector<float>& expect) {
  const int64_t psi = layout_numel(layout);
  std::vector<float> got(static_cast<size_t>(psi));
  LoadOptions o;
  o.expected_tensors = table;
  o.layout = layout;
  Stopwatch clock;
  load_latest(dir, {{"params", DType::f32, {0, psi}, got.data(), ""}}, o);
  const double s = clock.seconds();
  for (const TensorPiece& p : layout) {
    const int64_t base = std::find_if(table.begin(), table.end(), [&](const TensorInfo& t) {
                           return t.name == p.name;
                         })->offset;
    int64_t k = p.local_offset;
    for_each_run(p.global_shape, p.offsets, p.extents, {0, p.numel()}, [&](int64_t, int64_t g, int64_t n) {
      STRATA_CHECK(std::equal(got.begin() + k, got.begin() + k + n, expect.begin() + base + g),
                   "bench_ckpt: load into ", p.name, " returned wrong values");
      k += n;
    });
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"checkpoint save/load timing"};
  std::string model = "tiny", dir;
  int64_t psi = 0;
  int world = 1, stage = 1, reps = 5;
  bool json = false, keep_dir = false, prepare = true;
  app.add_option("--model", model, "preset whose parameter count is used (tiny, small, gpt2)");
  app.add_option("--params", psi, "parameter count instead of a preset");
  app.add_option("--world", world, "ranks (threads)");
  app.add_option("--stage", stage, "ZeRO stage (0-3)");
  app.add_option("--reps", reps, "saves");
  app.add_option("--dir", dir, "run directory (emptied first, removed after unless --keep-dir)")->required();
  app.add_flag("--json", json, "one JSON line");
  app.add_flag("!--no-prepare", prepare, "let the first save allocate its host buffer");
  app.add_flag("--keep-dir", keep_dir, "leave the checkpoints in --dir (for `strata ckpt ls`)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (psi == 0) psi = model::GPTConfig::preset(model).num_params();
    std::vector<std::vector<float>> states(4);
    for (int s = 0; s < 4; ++s) {
      states[size_t(s)].resize(size_t(psi));
      for (int64_t i = 0; i < psi; ++i) states[size_t(s)][size_t(i)] = float(i % 1000) * 1e-3f + float(s);
    }
    // The preset's tensors (a --params count is one flat tensor).
    std::vector<TensorInfo> table = {{"flat", {psi}, 0}};
    if (psi == model::GPTConfig::preset(model).num_params()) {
      table.clear();
      for (const model::ParamView& v : model::build_param_table(model::GPTConfig::preset(model)))
        table.push_back({v.name, v.shape, v.offset});
    }
    std::filesystem::remove_all(dir);

    std::barrier<> bar(world);
    std::vector<std::vector<SaveStats>> stats(static_cast<size_t>(world));
    std::vector<double> load_s(static_cast<size_t>(world));
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r)
      ranks.emplace_back([&, r] {
        CheckpointerOptions o;
        o.run_dir = dir;
        o.rank = r;
        o.world = world;
        o.barrier = [&] { bar.arrive_and_wait(); };
        o.keep_last = 1;
        Checkpointer c(o);
        const Range shard = zero_shard(psi, r, world);
        auto make_request = [&](int64_t step) {
          SaveRequest req;
          req.step = step;
          req.tensors = table;
          req.train.world = world;
          req.train.zero_stage = stage;
          for (int s = 0; s < 4; ++s) {
            const bool sharded = zero_shards_state(stage, s == 0);
            const Range held = sharded ? shard : Range{0, psi};
            req.states.push_back({kNames[s], DType::f32, psi, held, states[size_t(s)].data() + held.begin, {}});
          }
          return req;
        };
        if (prepare) c.prepare(make_request(0));
        for (int rep = 1; rep <= reps; ++rep) {
          c.save_async(make_request(rep));
          stats[size_t(r)].push_back(c.wait());
        }
        bar.arrive_and_wait();
        std::vector<std::vector<float>> back(4, std::vector<float>(size_t(shard.size())));
        std::vector<StateTarget> targets;
        for (int s = 0; s < 4; ++s) targets.push_back({kNames[s], DType::f32, shard, back[size_t(s)].data(), ""});
        Stopwatch clock;
        load_latest(dir, targets);
        load_s[size_t(r)] = clock.seconds();
      });
    for (auto& t : ranks) t.join();
    // Without prepare() the first save allocates and first-touches the host buffer; later
    // saves reuse it, so the first stall is reported apart from the steady state.
    std::vector<double> first_stall, stall, write, commit;
    for (const auto& per_rank : stats)
      for (const SaveStats& s : per_rank) {
        (&s == &per_rank.front() && reps > 1 ? first_stall : stall).push_back(s.stall_s);
        write.push_back(s.write_s);
        commit.push_back(s.commit_s);
      }
    const double bytes = double(stats[0].back().total_bytes);
    // The writers run in parallel: a save takes as long as its slowest rank.
    std::vector<double> save_s;
    for (int rep = 0; rep < reps; ++rep) {
      double worst = 0;
      for (int r = 0; r < world; ++r)
        worst = std::max(worst, stats[size_t(r)][size_t(rep)].write_s + stats[size_t(r)][size_t(rep)].commit_s);
      save_s.push_back(worst);
    }
    const double med_save = median(save_s);
    const double max_stall = *std::max_element(stall.begin(), stall.end());
    const double load_slowest = *std::max_element(load_s.begin(), load_s.end());
    const double load_whole = timed_whole_load(dir, contiguous_layout(table), table, states[0]);
    const double load_columns = timed_whole_load(dir, column_layout(table, 4), table, states[0]);
    if (!keep_dir) std::filesystem::remove_all(dir);
    if (json) {
      std::printf("{\"model\": \"%s\", \"params\": %lld, \"world\": %d, \"stage\": %d, \"reps\": %d, "
                  "\"bytes\": %.0f, \"stall_ms_first\": %.3f, \"stall_ms_median\": %.3f, \"stall_ms_max\": %.3f, "
                  "\"save_s_median\": %.4f, \"write_s_median\": %.4f, \"commit_s_median\": %.4f, "
                  "\"save_gb_per_s\": %.3f, \"load_s\": %.4f, \"load_params_whole_s\": %.4f, "
                  "\"load_params_columns_s\": %.4f}\n",
                  model.c_str(), (long long)psi, world, stage, reps, bytes, median(first_stall) * 1e3,
                  median(stall) * 1e3,
                  max_stall * 1e3, med_save, median(write), median(commit), bytes / med_save / 1e9,
                  load_slowest, load_whole, load_columns);
    } else {
      std::printf("%s: %lld params x 4 fp32 states = %.1f MB per save, %d rank(s), stage %d, %d saves\n",
                  model.c_str(), (long long)psi, bytes / 1e6, world, stage, reps);
      std::printf("  stall (training thread): median %.2f ms, max %.2f ms; first save %.2f ms\n",
                  median(stall) * 1e3, max_stall * 1e3, median(first_stall) * 1e3);
      std::printf("  save (writer, slowest rank): median %.3f s = %.2f GB/s (write+fsync %.3f s, commit %.3f s)\n",
                  med_save, bytes / med_save / 1e9, median(write), median(commit));
      std::printf("  load (slowest rank, checksums verified): %.3f s\n", load_slowest);
      std::printf("  load of params by one thread: whole tensors %.3f s, matrices as 4 column boxes %.3f s\n",
                  load_whole, load_columns);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ckpt: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
