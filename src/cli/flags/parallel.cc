#include "cli/flags/parallel.h"

#include "cli/command.h"
#include "comm/bootstrap.h"
#include "core/error.h"

namespace strata::cli {

void ParallelFlags::add_to(CLI::App& app, const Only& only) {
  FamilyScope family(app, "Parallelism", "parallelism", only);
  train::ParallelConfig& p = parallel;
  app.add_option("--threads", threads, "OpenMP and BLAS threads (default: OMP_NUM_THREADS)");
  app.add_option("--nproc", p.nproc, "Ranks to start on this host (tp x dp)")->capture_default_str();
  app.add_option("--tp", p.mesh.tp, "Tensor-parallel ranks (Megatron-style; must divide the heads); ranks = tp x dp")
      ->capture_default_str();
  app.add_option("--dp", p.mesh.dp, "Data-parallel ranks (default: nproc / (tp x cp x pp))");
  app.add_option("--cp", p.mesh.cp,
                 "Context-parallel ranks: each holds seq/cp tokens of every sequence; ranks = "
                 "tp x cp x dp")
      ->capture_default_str();
  app.add_option("--cp-mode", cp_mode,
                 "Context-parallel attention: ring (K/V blocks around the cp ring) or ulysses "
                 "(all-to-all over heads)")
      ->capture_default_str();
  app.add_option("--max-activation-mb", max_activation_mb,
                 "Refuse a run whose activations per rank (model buffers and context-parallel "
                 "buffers) exceed this many MiB, before training")
      ->check(finite(NumberRange::positive()));
  app.add_option("--cp-chunks", cp_chunks,
                 "Ring chunking: zigzag (rank r holds chunks r and 2cp-1-r: balanced causal work) "
                 "or contiguous")
      ->capture_default_str();
  app.add_option("--pp", p.mesh.pp, "Pipeline stages (contiguous layers; ranks = tp x dp x pp)")->capture_default_str();
  app.add_option("--schedule", schedule, "Pipeline schedule: gpipe, 1f1b, interleaved, zb")->capture_default_str();
  app.add_option("--micro-batches", p.pipeline.micro, "Pipeline micro-batches per step (default: the accumulation count)");
  app.add_option("--virtual-stages", p.pipeline.virt, "Model chunks per stage (interleaved)")->capture_default_str();
  app.add_option("--pp-split", pp_split, "Layers per (virtual) stage, e.g. 3,5 (default: balanced by cost)");
  app.add_flag("--sp,!--no-sp", p.sequence_parallel,
               "Sequence parallelism with --tp > 1 (default on): norms and residuals hold seq/tp "
               "tokens per rank");
  app.add_option("--backend", backend,
                 "Communication backend: shm (this host), mpi (mpirun) or tcp (strata's sockets; one host or "
                 "--hosts, through the remote shell)")
      ->capture_default_str();
  app.add_option("--zero", zero, "ZeRO stage: 0 (DDP), 1 (optimizer), 2 (+gradients), 3 (+parameters)")
      ->capture_default_str();
  app.add_option("--bucket-mb", p.dp.bucket_mb, "Gradient bucket cap in MiB")->capture_default_str();
  app.add_option("--prefetch", p.dp.prefetch, "ZeRO-3: layers gathered ahead of their use")->capture_default_str();
  app.add_flag("--no-reshard-after-forward", [&p](int64_t) { p.dp.reshard_after_forward = false; },
               "ZeRO-3: keep parameters gathered between forward and backward");
  app.add_option("--ep", p.mesh.ep, "Expert-parallel ranks, carved out of dp")->capture_default_str();
}

train::ParallelConfig ParallelFlags::resolve(const CLI::App& app, const HostFlags::Resolved& hosts) const {
  train::ParallelConfig pc = parallel;
  pc.hosts = hosts.hosts, pc.hosts_source = hosts.source, pc.rsh_agent = hosts.rsh_agent, pc.ifaces = hosts.ifaces;
  // A rank (started by the launcher) takes its world from the launcher, not the hosts,
  // which an --elastic restart may have left out.
  if (!pc.hosts.empty() && !app.count("--nproc") && !comm::launched_as_rank())
    pc.nproc = launcher::total_slots(pc.hosts);
  pc.dp.stage = parallel::parse_zero_stage(zero);
  pc.backend = comm::parse_backend(backend);
  if (!pc.hosts.empty()) {
    STRATA_CHECK(!app.count("--backend") || pc.backend != comm::Backend::shm, "--backend ", backend,
                 " runs on one host; several hosts need --backend mpi or tcp");
    if (!app.count("--backend")) pc.backend = comm::Backend::mpi;
  }
  pc.cp = {model::parse_cp_mode(cp_mode), model::parse_cp_chunks(cp_chunks)};
  pc.pipeline.schedule = parallel::pipeline::parse_schedule(schedule);
  if (!pp_split.empty()) pc.pipeline.split = parallel::pipeline::parse_split(pp_split);
  return pc;
}

}  // namespace strata::cli
