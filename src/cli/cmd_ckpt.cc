// strata ckpt ls|verify|export|import|advise: inspect, check and convert checkpoints.
#include <cstdio>
#include <filesystem>

#include "CLI/CLI.hpp"
#include "ckpt/fsutil.h"
#include "ckpt/hf.h"
#include "ckpt/interval.h"
#include "ckpt/listing.h"
#include "ckpt/load.h"
#include "ckpt/safetensors.h"
#include "cli/command.h"
#include "core/error.h"
#include "cost/reliability.h"

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

std::string human_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1 << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1 << 20));
  else if (b >= (1 << 10)) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%lld B", (long long)b);
  return buf;
}

void setup_ls(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("path", *path, "run directory, its ckpt/ directory, or one step-* directory")
      ->check(dir_path())
      ->required();
  app.callback([path] {
    const ckpt::CheckpointListing l = ckpt::list_checkpoints(*path);
    std::printf("%s (latest -> %s)\n", l.root.c_str(),
                !l.latest_error.empty() ? "DAMAGED" : l.latest.empty() ? "none" : l.latest.c_str());
    if (!l.latest_error.empty()) std::printf("  %s\n", l.latest_error.c_str());
    std::printf("  %-8s %-14s %11s %6s %5s %3s %3s %3s %3s %3s %4s %-5s %-3s %s\n", "STEP", "DIR", "SIZE",
                "SHARDS", "WORLD", "TP", "DP", "PP", "CP", "EP", "ZERO", "PREC", "FMT", "STATUS");
    for (const ckpt::CheckpointEntry& e : l.entries) {
      char layout[96];
      std::snprintf(layout, sizeof layout, "%5s %3s %3s %3s %3s %3s %4s %-5s %-3s", "-", "-", "-", "-", "-",
                    "-", "-", "-", "-");
      const ckpt::TrainState& t = e.train;
      if (e.ok)
        std::snprintf(layout, sizeof layout, "%5d %3d %3d %3d %3d %3d %4d %-5s v%-2d", t.world, t.tp, e.dp(),
                      t.pp, t.cp, t.ep, t.zero_stage, t.precision.c_str(), e.version);
      std::string status = e.ok ? "ok" : "DAMAGED: " + e.problem;
      if (e.latest) status += " (latest)";
      std::printf("  %-8lld %-14s %11s %6d %s %s\n", (long long)e.step, e.name.c_str(),
                  human_bytes(e.bytes).c_str(), e.shards, layout, status.c_str());
    }
    for (const ckpt::IncompleteSave& s : l.incomplete)
      std::printf("  %-8s %-14s %11s  incomplete save (never committed; removed by the next save)\n", "-",
                  s.name.c_str(), human_bytes(s.bytes).c_str());
    if (l.entries.empty()) std::printf("  (no checkpoints)\n");
  });
}

void setup_verify(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto quick = std::make_shared<bool>(false);
  app.add_option("path", *path, "run directory, its ckpt/ directory, or one step-* directory")
      ->check(dir_path())
      ->required();
  app.add_flag("--quick", *quick, "check manifests, sizes and headers only, not checksums");
  app.callback([path, quick] {
    const ckpt::CheckpointListing l = ckpt::list_checkpoints(*path, false);
    STRATA_CHECK(!l.entries.empty(), *path, ": no checkpoints to verify");
    int bad = 0;
    for (const ckpt::CheckpointEntry& e : l.entries) {
      const std::string& dir = e.dir;
      try {
        ckpt::CheckpointReader r(dir);
        const int64_t n = r.verify(!*quick);
        std::printf("ok       %s  (step %lld, %d shards, %s checksummed)\n", dir.c_str(),
                    (long long)r.manifest().step, int(r.manifest().shards.size()), human_bytes(n).c_str());
      } catch (const std::exception& e) {
        std::printf("DAMAGED  %s\n", e.what());
        ++bad;
      }
    }
    // The pointer is not a checkpoint: its damage is told apart from theirs.
    std::error_code ec;
    const bool dangling = !l.latest.empty() && !fs::is_directory(l.root + "/" + l.latest, ec);
    if (dangling) std::printf("DAMAGED  %s/latest names %s, which does not exist\n", l.root.c_str(), l.latest.c_str());
    if (!l.latest_error.empty()) std::printf("DAMAGED  %s\n", l.latest_error.c_str());
    const bool latest_bad = dangling || !l.latest_error.empty();
    if (bad)
      fail(bad, " of ", l.entries.size(), " checkpoints in ", l.root, " damaged",
           latest_bad ? cat(", and ", l.root, "/latest too") : "");
    if (latest_bad)
      fail(l.root, "/latest is damaged; the ", l.entries.size(), " checkpoint(s) are ok (the next "
           "`train --resume auto` rewrites it)");
  });
}

void setup_export(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto hf = std::make_shared<std::string>();
  auto dtype = std::make_shared<std::string>();
  auto step = std::make_shared<int64_t>(-1);
  app.add_option("path", *path, "run directory, its ckpt/ directory, or one step-* directory")
      ->check(dir_path())
      ->required();
  // Exactly one output; none or both is a usage error, as a missing required flag is.
  CLI::Option_group* output = app.add_option_group("output", "where to write (one of)");
  output->add_option("--safetensors", *out, "output file (Hugging Face safetensors, strata's tensor names)");
  CLI::Option* hf_opt = output->add_option("--hf", *hf,
                     "output directory: a Hugging Face GPT2LMHeadModel or LlamaForCausalLM "
                     "(config.json, model.safetensors)");
  output->require_option(1);
  CLI::Option* step_opt = app.add_option("--step", *step, "export this step instead of the newest good checkpoint");
  app.add_option("--dtype", *dtype, "F32 or BF16 (default: as saved)");
  app.callback([path, out, hf, dtype, step, step_opt, hf_opt] {
    const bool to_hf = hf_opt->count() > 0;  // by the flag given: `--hf ""` is not --safetensors
    STRATA_CHECK(!(to_hf ? hf : out)->empty(), to_hf ? "--hf" : "--safetensors", ": empty path; name the output ",
                 to_hf ? "directory" : "file");
    STRATA_CHECK(step_opt->count() == 0 || *step >= 0, "--step ", *step,
                 ": a checkpoint's step is the number of steps done, 0 or more");
    const ckpt::CkptLocation loc = ckpt::locate(*path);
    std::string dir = loc.step_dir;
    if (dir.empty() && step_opt->count() > 0) dir = loc.root + "/" + ckpt::step_dir_name(*step);
    // The one `train --resume auto` continues from: the newest that verifies.
    if (dir.empty()) {
      dir = ckpt::newest_good(loc.root, [](const std::string& line) {
              std::fprintf(stderr, "strata: ckpt: %s\n", line.c_str());
            }).value_or("");
      STRATA_CHECK(!dir.empty(), *path, ": no undamaged checkpoint to export in ", loc.root);
    }
    if (to_hf) {
      ckpt::HfExportResult r = ckpt::export_hf(dir, *hf, *dtype, "--hf");
      std::printf("wrote %s: Hugging Face %s, %d tensors of '%s' from %s, %s\n", hf->c_str(),
                  r.arch == "llama" ? "LlamaForCausalLM" : "GPT2LMHeadModel", r.tensors, r.state.c_str(),
                  r.source_dir.c_str(), human_bytes(r.bytes).c_str());
      return;
    }
    ckpt::ExportResult r = ckpt::export_safetensors(dir, *out, *dtype);
    std::printf("wrote %s: %d tensors of '%s' from %s, %s\n", out->c_str(), r.tensors, r.state.c_str(),
                r.source_dir.c_str(), human_bytes(r.bytes).c_str());
  });
}

void setup_import(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  app.add_option("file", *path, "safetensors file to validate and list")->required();
  app.callback([path] {
    ckpt::SafetensorsFile f = ckpt::read_safetensors(*path);
    int64_t elems = 0;
    for (const auto& t : f.tensors) elems += numel(t.shape);
    std::printf("%s: valid safetensors, %d tensors, %lld elements, header %lld bytes\n", path->c_str(),
                int(f.tensors.size()), (long long)elems, (long long)f.header_bytes);
    if (!f.metadata.empty()) std::printf("  metadata: %s\n", f.metadata.dump().c_str());
    for (const auto& t : f.tensors)
      std::printf("  %-36s %-5s %s\n", t.name.c_str(), t.dtype.c_str(), shape_str(t.shape).c_str());
  });
}

void setup_advise(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto mtbf = std::make_shared<std::string>();
  auto stall = std::make_shared<std::string>();
  // Unset: the restarts measured on one host, from disk and from memory (cost/reliability.h).
  auto restart = std::make_shared<std::string>();
  auto step_time = std::make_shared<std::string>("0s");
  auto mem_every = std::make_shared<int64_t>(0);
  app.add_option("path", *path, "run whose newest checkpoint's measured stall is used")->check(dir_path());
  app.add_option("--mtbf", *mtbf, "mean time between failures of the job, e.g. 4h, 30m")->required();
  app.add_option("--stall", *stall, "checkpoint stall δ, e.g. 40ms (instead of the measured one)");
  app.add_option("--step-time", *step_time, "time per training step, to express the interval in steps");
  app.add_option("--restart", *restart,
                 cat("time from a failure to training again, e.g. 3s (default: measured on one host, ",
                     cost::kMeasuredRestartDiskS, "s from disk, ", cost::kMeasuredRestartMemoryS, "s from memory)"));
  app.add_option("--mem-ckpt-every", *mem_every,
                 "also the work lost with in-memory copies every K steps (needs --step-time)");
  app.callback([path, mtbf, stall, restart, step_time, mem_every] {
    // Each duration's error names its flag ("bad duration '-4'" alone did not say which).
    auto duration = [](const char* flag, const std::string& v) {
      try {
        return ckpt::parse_duration(v);
      } catch (const Error& e) {
        fail(flag, ": ", e.what());  // which quotes the value
      }
    };
    double delta = -1;
    if (!stall->empty()) {
      delta = duration("--stall", *stall);
    } else {
      STRATA_CHECK(!path->empty(), "give a run directory (to use its measured stall) or --stall");
      const ckpt::CkptLocation loc = ckpt::locate(*path);
      std::vector<std::string> dirs =
          loc.step_dir.empty() ? ckpt::candidate_dirs(loc.root, nullptr) : std::vector{loc.step_dir};
      for (const std::string& d : dirs) {
        try {
          delta = ckpt::read_manifest(d).save.at("stall_s").get<double>();
          std::printf("measured stall of %s\n", d.c_str());
          break;
        } catch (const std::exception&) {
        }
      }
      STRATA_CHECK(delta >= 0, *path, ": no checkpoint with a measured stall; pass --stall");
    }
    const bool measured = restart->empty();
    const double r = measured ? cost::measured_restart_s(cost::Recovery::disk) : duration("--restart", *restart);
    const ckpt::IntervalAdvice a =
        ckpt::advise_interval(delta, duration("--mtbf", *mtbf), r, duration("--step-time", *step_time),
                              *mem_every, measured ? cost::measured_restart_s(cost::Recovery::memory) : r,
                              measured ? cost::measured_restart_s(cost::Recovery::live) : -1);
    std::printf("%s", a.text().c_str());
  });
}

static Register ls_reg("ckpt ls", "List checkpoints: steps, sizes, valid or not", setup_ls);
static Register verify_reg("ckpt verify", "Verify checkpoint checksums (exit 1 when damaged)", setup_verify);
static Register export_reg("ckpt export",
                           "Export model parameters as safetensors or a Hugging Face GPT-2 / Llama",
                           setup_export);
static Register import_reg("ckpt import", "Validate and list a safetensors file", setup_import);
static Register advise_reg("ckpt advise", "Optimal checkpoint interval (Young, Daly) for an MTBF", setup_advise);

}  // namespace
}  // namespace strata::cli
