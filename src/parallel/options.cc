#include "parallel/options.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "parallel/parallel_layout.h"

namespace strata::parallel {

Precision parse_precision(std::string_view s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  fail("unknown precision '", std::string(s), "' (expected fp32 or bf16)");
}

const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "fp32"; }

int parse_zero_stage(std::string_view s) {
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '3') return s[0] - '0';
  fail_setting(setting("zero"), " ", std::string(s), ": ZeRO stage must be 0, 1, 2 or 3");
}

void DataParallelOptions::validate() const {
  STRATA_CHECK_SETTING(stage >= 0 && stage <= 3, setting("zero"), " ", stage,
                       ": ZeRO stage must be 0, 1, 2 or 3");
  STRATA_CHECK(precision == Precision::fp32 || precision == Precision::bf16, "unknown precision ",
               int(precision), " (expected fp32 or bf16)");
  STRATA_CHECK_SETTING(std::isfinite(bucket_mb) && bucket_mb > 0, setting("bucket-mb"), " ",
                       bucket_mb, ": the gradient bucket size must be a positive number of MiB");
  STRATA_CHECK_SETTING(prefetch >= 0, setting("prefetch"), " ", prefetch,
                       ": prefetch depth must be >= 0");
}

std::string DataParallelOptions::describe() const {
  std::ostringstream os;
  os << "zero " << stage << ", " << precision_name(precision) << ", bucket " << bucket_mb << " MiB";
  if (reduce() != precision) os << ", reduce in " << precision_name(reduce());
  if (stage == 3)
    os << ", prefetch " << prefetch << (reshard_after_forward ? "" : ", no reshard after forward");
  return os.str();
}

static int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;  // unknown: no check
}

void check_memory_fits(int64_t psi, int world, int ranks_on_host, const DataParallelOptions& opts,
                       int64_t other_bytes_per_rank, int64_t available_bytes, int64_t psi_experts,
                       int expert_world) {
  STRATA_CHECK(world >= 1, "data-parallel world size ", world, " must be >= 1");
  if (available_bytes <= 0) available_bytes = mem_available_bytes();
  if (available_bytes <= 0) return;
  const int64_t states = moe_model_state_bytes(psi, world, psi_experts, expert_world, opts.stage,
                                               opts.precision)
                             .total();
  const int64_t need = int64_t(ranks_on_host) * (states + other_bytes_per_rank);
  STRATA_CHECK_SETTING(need <= available_bytes, ranks_on_host, " ranks of ", psi,
                       psi_experts > 0 ? cat(" dense + ", psi_experts, " expert") : std::string(),
                       " parameters at ZeRO stage ", opts.stage, " (",
                       precision_name(opts.precision), ") need ", need / (1 << 20), " MiB (",
                       states / (1 << 20), " MiB model states + ", other_bytes_per_rank / (1 << 20),
                       " MiB other per rank), but only ", available_bytes / (1 << 20),
                       " MiB are available: use fewer ranks on this host or a higher ",
                       setting("zero"), " stage");
}

void check_batch_split(int global_batch, int micro_batch, int world) {
  STRATA_CHECK(world >= 1, "data-parallel world size ", world, " must be >= 1");
  STRATA_CHECK_SETTING(global_batch >= world, setting("batch"), " ", global_batch,
                       " is smaller than the ", world,
                       " data-parallel ranks: every rank needs at least one sequence per step");
  const int b = micro_batch > 0 ? micro_batch : global_batch / world;
  STRATA_CHECK_SETTING(b >= 1 && batch_splits(global_batch, world, b), setting("batch"), " ",
                       global_batch, " does not split into ", world, " ranks x micro-batch ", b,
                       " x a whole number of accumulation steps");
}

}  // namespace strata::parallel
