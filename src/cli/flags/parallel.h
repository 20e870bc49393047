// The parallel-layout family, TOML section [parallelism]: ranks and the device mesh
// (parallel/mesh.h), context and pipeline parallelism, the data-parallel engine (ZeRO), the
// backend and threads. The hosts a job spans are the hosts family (cli/flags/hosts.h), in the
// same section.
//   --nproc 8 --tp 2 --cp 2 --cp-mode ulysses --pp 2 --schedule interleaved --virtual-stages 2
//   --zero 3 --bucket-mb 4 --prefetch 1 --backend tcp --threads 1
#pragma once
#include <string>

#include "cli/flags/family.h"
#include "cli/flags/hosts.h"
#include "train/config.h"

namespace strata::cli {

struct ParallelFlags {
  train::ParallelConfig parallel;  // the fields flags fill directly
  int threads = 0;                 // 0: OMP_NUM_THREADS
  double max_activation_mb = 0;    // 0: no limit
  std::string cp_mode = "ring", cp_chunks = "zigzag";
  std::string schedule = "1f1b", pp_split;
  std::string backend = "shm", zero = "0";

  void add_to(CLI::App& app, const Only& only = {});
  // After parsing: the layout with its names parsed (--zero, --backend, --cp-mode,
  // --cp-chunks, --schedule, --pp-split) on `hosts` (HostFlags::resolve; none: this host
  // alone), whose slots give the rank count unless --nproc says otherwise; throws one line
  // naming the flag.
  train::ParallelConfig resolve(const CLI::App& app, const HostFlags::Resolved& hosts) const;
};

}  // namespace strata::cli
