#include "comm/types.h"

#include "core/error.h"

namespace strata::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: return "min";
  }
  return "?";
}

const char* op_name(OpType op) {
  switch (op) {
    case OpType::allreduce: return "allreduce";
    case OpType::reduce_scatter: return "reducescatter";
    case OpType::allgather: return "allgather";
    case OpType::allgatherv: return "allgatherv";
    case OpType::broadcast: return "broadcast";
    case OpType::reduce: return "reduce";
    case OpType::alltoall: return "alltoall";
    case OpType::alltoallv: return "alltoallv";
    case OpType::barrier: return "barrier";
    case OpType::send: return "send";
    case OpType::recv: return "recv";
    case OpType::split: return "split";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::shm: return "shm";
    case Backend::mpi: return "mpi";
    case Backend::tcp: return "tcp";
  }
  return "?";
}

ReduceOp parse_reduce_op(std::string_view s) {
  if (s == "sum") return ReduceOp::sum;
  if (s == "avg") return ReduceOp::avg;
  if (s == "max") return ReduceOp::max;
  if (s == "min") return ReduceOp::min;
  fail("unknown reduce op '", std::string(s), "' (expected sum, avg, max or min)");
}

Backend parse_backend(std::string_view s) {
  if (s == "shm") return Backend::shm;
  if (s == "mpi") return Backend::mpi;
  if (s == "tcp") return Backend::tcp;
  fail("unknown communication backend '", std::string(s), "' (expected shm, mpi or tcp)");
}

const char* hier_algo_name(HierAlgo a) {
  switch (a) {
    case HierAlgo::automatic: return "automatic";
    case HierAlgo::flat: return "flat";
    case HierAlgo::hierarchical: return "hierarchical";
  }
  return "?";
}

HierAlgo parse_hier_algo(std::string_view s) {
  if (s == "automatic" || s == "auto") return HierAlgo::automatic;
  if (s == "flat") return HierAlgo::flat;
  if (s == "hierarchical") return HierAlgo::hierarchical;
  fail("unknown multi-host algorithm '", std::string(s), "' (expected automatic, flat or hierarchical)");
}

}  // namespace strata::comm
