// Creating world groups: from the environment, with explicit coordinates, or as threads.
#include <cctype>
#include <exception>
#include <thread>

#include "comm/bootstrap.h"
#include "comm/flight_recorder.h"
#include "comm/hier/hier_transport.h"
#include "comm/mpi/mpi_transport.h"
#include "comm/process_group.h"
#include "comm/runtime.h"
#include "comm/shm/shm_transport.h"
#include "comm/tcp/store.h"
#include "comm/tcp/tcp_transport.h"
#include "comm/watchdog.h"
#include "core/env.h"
#include "core/error.h"
#include "core/timer.h"

namespace strata::comm {

static const EnvVar kBackend("STRATA_BACKEND", "shm",
                             "communication backend of init_from_env: shm, mpi or tcp (set by strata launch)");

static double resolve_timeout(const Options& opt) {
  return opt.timeout_s > 0 ? opt.timeout_s : detail::default_timeout_s();
}

// Characters safe in a POSIX shm name.
static std::string sanitize_job(const std::string& job) {
  std::string s;
  for (char ch : job.substr(0, 100))
    s += (std::isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '-') ? ch : '_';
  return s;
}

static std::vector<int> iota_ranks(int n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}

static GroupPtr wrap(std::unique_ptr<detail::Transport> t, int size, const Options& opt) {
  auto rt = std::make_unique<detail::GroupRuntime>(std::move(t), "world", iota_ranks(size), opt);
  return std::make_shared<ProcessGroup>(std::move(rt));
}

GroupPtr connect_shm(const std::string& job_id, int rank, int size, const Options& opt) {
  STRATA_CHECK(size >= 1, "world size must be at least 1, got ", size);
  STRATA_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside a world of ", size);
  STRATA_CHECK(!job_id.empty(), "the shm backend needs a job id (STRATA_JOB_ID)");
  std::string job = sanitize_job(job_id);
  int64_t deadline = now_ns() + int64_t(resolve_timeout(opt) * 1e9);
  auto t = shm::ShmTransport::open(job, "world", "w", rank, size, opt, deadline);
  t->wait_attached(deadline);
  flight_recorder().set_identity(rank, size);
  return wrap(std::move(t), size, opt);
}

GroupPtr connect_tcp(const std::string& store_addr, const std::string& job, int rank, int size,
                     const Options& options) {
  STRATA_CHECK(size >= 1, "world size must be at least 1, got ", size);
  STRATA_CHECK(rank >= 0 && rank < size, "rank ", rank, " is outside a world of ", size);
  STRATA_CHECK(!job.empty(), "the tcp backend needs a job id (STRATA_JOB_ID)");
  Options opt = options;
  opt.backend = Backend::tcp;
  int64_t deadline = now_ns() + int64_t(resolve_timeout(opt) * 1e9);
  auto t = tcp::make_tcp_world(store_addr, job, rank, size, opt, deadline);
  flight_recorder().set_identity(rank, size);
  return wrap(std::move(t), size, opt);
}

GroupPtr init_from_env(const Options& options) {
  Options opt = options;
  if (kBackend.is_set()) opt.backend = parse_backend(kBackend.get());
  if (opt.backend == Backend::mpi) {
    auto t = detail::make_mpi_world_for_hosts(opt);
    int size = t->size();
    flight_recorder().set_identity(t->rank(), size);
    return wrap(std::move(t), size, opt);
  }
  RankEnv env = detect_rank_env();
  if (opt.backend == Backend::tcp) {
    std::string job = !opt.job_id.empty() ? opt.job_id : env.job_id;
    if (job.empty() && env.world_size == 1) job = new_job_id();
    STRATA_CHECK(env.world_size == 1 || !tcp::store_address().empty(), "rank ", env.rank, " of ",
                 env.world_size, ": the tcp backend needs a rendezvous store, but STRATA_STORE is "
                 "unset (start the ranks with `strata launch --backend tcp`)");
    return connect_tcp(tcp::store_address(), job, env.rank, env.world_size, opt);
  }
  STRATA_CHECK(env.local_world_size == env.world_size,
               "the shm backend runs on one host, but the environment (", env.source,
               ") places ", env.local_world_size, " of ", env.world_size,
               " ranks on this host; use the mpi backend across hosts");
  std::string job = !opt.job_id.empty() ? opt.job_id : env.job_id;
  if (job.empty()) {
    STRATA_CHECK(env.world_size == 1, "rank ", env.rank, " of ", env.world_size,
                 ": no job id in the environment; set STRATA_JOB_ID or start the ranks with "
                 "`strata launch`");
    job = new_job_id();
  }
  return connect_shm(job, env.rank, env.world_size, opt);
}

std::vector<GroupPtr> make_thread_world(int world_size, const Options& opt) {
  STRATA_CHECK(world_size >= 1, "world size must be at least 1, got ", world_size);
  STRATA_CHECK(opt.backend == Backend::shm, "thread worlds use the shm backend (MPI is one rank "
                                            "per process)");
  std::string job = sanitize_job(opt.job_id.empty() ? new_job_id() : opt.job_id);
  int64_t deadline = now_ns() + int64_t(resolve_timeout(opt) * 1e9);
  std::vector<std::unique_ptr<shm::ShmTransport>> ts;
  for (int r = 0; r < world_size; ++r)
    ts.push_back(shm::ShmTransport::open(job, "world", "w", r, world_size, opt, deadline));
  for (auto& t : ts) t->wait_attached(deadline);
  std::vector<GroupPtr> groups;
  for (auto& t : ts) groups.push_back(wrap(std::move(t), world_size, opt));
  return groups;
}

void run_threads(int world_size, const std::function<void(ProcessGroup&)>& fn, const Options& opt) {
  std::vector<GroupPtr> groups = make_thread_world(world_size, opt);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world_size));
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(*groups[size_t(r)]);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
        // Peers blocked on this rank (in the world or any sub-group) fail at once instead
        // of waiting for the timeout.
        auto& rt = groups[size_t(r)]->runtime();
        std::string msg = cat("rank ", r, " failed");
        rt.fail_from_watchdog("error", msg);
        watchdog().notify_failure(&rt, "error", msg);
      }
    });
  }
  for (auto& t : threads) t.join();
  groups.clear();
  for (int r = 0; r < world_size; ++r) {
    if (!errors[size_t(r)]) continue;
    try {
      std::rethrow_exception(errors[size_t(r)]);
    } catch (const TimeoutError& e) {
      throw TimeoutError(cat("rank ", r, ": ", e.what()));
    } catch (const std::exception& e) {
      throw Error(cat("rank ", r, ": ", e.what()));
    }
  }
}

}  // namespace strata::comm
