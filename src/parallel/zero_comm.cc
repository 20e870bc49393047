#include "parallel/zero_comm.h"

#include "core/error.h"
#include "core/timer.h"
#include "core/trace.h"

namespace strata::parallel {

// `t` is taken before the operation is handed to the communicator, which may start it at
// once: the marker then precedes the operation's span.
static void mark_issue(const comm::WorkPtr& w, const std::string& what, int64_t t) {
  if (!tracer().enabled()) return;
  tracer().add(cat("issue ", comm::op_name(w->op()), " #", w->seq(), " ", what), "comm_issue", t, 0,
               cat("{\"seq\":", w->seq(), ",\"what\":\"", what, "\"}"));
}

static char* bytes_at(void* p, int64_t elems, DType t) {
  return static_cast<char*>(p) + elems * int64_t(dtype_size(t));
}

comm::WorkPtr reduce_range_async(comm::ProcessGroup& pg, const ShardLayout& layout, void* data,
                                 Range r, DType dtype, bool scatter, const std::string& what) {
  const int64_t t = now_ns();
  comm::WorkPtr w;
  if (!scatter) {
    w = pg.all_reduce_async(data, data, size_t(r.size()), dtype, comm::ReduceOp::sum);
  } else {
    void* mine = bytes_at(data, layout.own_offset_in(r), dtype);
    w = pg.reduce_scatter_v_async(data, mine, layout.split_counts(r), dtype, comm::ReduceOp::sum);
  }
  mark_issue(w, what, t);
  return w;
}

comm::WorkPtr gather_range_async(comm::ProcessGroup& pg, const ShardLayout& layout,
                                 const void* own_part, void* dst, Range r, DType dtype,
                                 const std::string& what) {
  const int64_t t = now_ns();
  comm::WorkPtr w = pg.all_gather_v_async(own_part, dst, layout.split_counts(r), dtype);
  mark_issue(w, what, t);
  return w;
}

double sum_over_ranks(comm::ProcessGroup& pg, double x) {
  if (pg.size() == 1) return x;
  pg.all_reduce(&x, 1, comm::ReduceOp::sum);
  return x;
}

}  // namespace strata::parallel
