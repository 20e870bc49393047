// The mpi backend's collectives: each maps onto the MPI-3 non-blocking collective of the
// same name and is polled by MpiTransport::wait_request (so it can time out).
//   all_reduce -> MPI_Iallreduce        reduce_scatter(_v) -> MPI_Ireduce_scatter
//   all_gather(_v) -> MPI_Iallgatherv   broadcast -> MPI_Ibcast      reduce -> MPI_Ireduce
//   all_to_all(_v) -> MPI_Ialltoallv    barrier -> MPI_Ibarrier
// bf16 goes through fp32 scratch buffers (summed in fp32, rounded once); avg is a sum then a
// division by the group size. MPI counts are int: larger counts are refused with an Error.
#ifdef STRATA_HAVE_MPI

#include <climits>
#include <cstring>
#include <optional>
#include <vector>

#include "comm/mpi/mpi_internal.h"
#include "comm/reduce_kernels.h"
#include "core/error.h"

namespace strata::comm::detail {

namespace {

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::bf16: return MPI_FLOAT;  // reduced through fp32 scratch
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

int to_int(size_t n, const char* what, const OpDesc& op) {
  STRATA_CHECK(n <= size_t(INT_MAX), op_name(op.op), " #", op.seq, ": ", what, " of ", n,
               " elements is too large for MPI (int counts)");
  return int(n);
}

std::vector<float> to_f32(const void* p, size_t n) {
  std::vector<float> v(n);
  auto src = static_cast<const uint16_t*>(p);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_to_f32(src[i]);
  return v;
}

void from_f32(const std::vector<float>& v, void* p, size_t n, size_t offset = 0) {
  auto dst = static_cast<uint16_t*>(p);
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(v[offset + i]);
}

std::vector<int> offsets(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

std::vector<int> int_counts(const std::vector<size_t>& c, const OpDesc& op) {
  std::vector<int> v;
  size_t total = 0;
  for (size_t x : c) {
    v.push_back(to_int(x, "a block", op));
    total += x;
  }
  to_int(total, "the buffer", op);
  return v;
}

}  // namespace

void MpiTransport::run_collective(OpDesc& op) {
  size_t es = dtype_size(op.dtype);
  bool bf16 = op.dtype == DType::bf16;
  MPI_Datatype type = mpi_type(op.dtype);
  MPI_Request req = MPI_REQUEST_NULL;
  std::vector<float> a, b;  // bf16 scratch
  std::vector<char> tmp;
  auto start = [&](int rc, const char* what) {
    mpi_check(rc, what, *this, &op);
  };
  std::optional<MpiLock> lk;  // held while posting, released before waiting
  lk.emplace();
  auto unlock = [&] { lk.reset(); };
  try {
    switch (op.op) {
      case OpType::allreduce: {
        int n = to_int(op.count, "count", op);
        if (bf16) {
          a = to_f32(op.send, op.count);
          start(MPI_Iallreduce(MPI_IN_PLACE, a.data(), n, type, mpi_op(op.redop), comm_, &req),
                "MPI_Iallreduce");
        } else {
          start(MPI_Iallreduce(op.send == op.recv ? MPI_IN_PLACE : op.send, op.recv, n, type,
                               mpi_op(op.redop), comm_, &req), "MPI_Iallreduce");
        }
        break;
      }
      case OpType::reduce: {
        int n = to_int(op.count, "count", op);
        bool root = rank_ == op.root;
        if (bf16) {
          a = to_f32(op.send, op.count);
          b.resize(root ? op.count : 0);
          start(MPI_Ireduce(a.data(), b.data(), n, type, mpi_op(op.redop), op.root, comm_, &req),
                "MPI_Ireduce");
        } else {
          const void* s = (root && op.send == op.recv) ? MPI_IN_PLACE : op.send;
          start(MPI_Ireduce(s, op.recv, n, type, mpi_op(op.redop), op.root, comm_, &req), "MPI_Ireduce");
        }
        break;
      }
      case OpType::reduce_scatter: {
        std::vector<int> counts = int_counts(op.counts, op);
        size_t own = op.counts[size_t(rank_)];
        size_t total = 0;
        for (size_t x : op.counts) total += x;
        if (bf16) {
          a = to_f32(op.send, total);
          b.resize(own);
          start(MPI_Ireduce_scatter(a.data(), b.data(), counts.data(), type, mpi_op(op.redop), comm_, &req),
                "MPI_Ireduce_scatter");
        } else {
          tmp.resize(own * es);  // recv may alias send (in place at the own block)
          start(MPI_Ireduce_scatter(op.send, tmp.data(), counts.data(), type, mpi_op(op.redop),
                                    comm_, &req), "MPI_Ireduce_scatter");
        }
        break;
      }
      case OpType::allgather:
      case OpType::allgatherv: {
        std::vector<int> counts = int_counts(op.counts, op);
        for (int& c : counts) c *= int(es);
        std::vector<int> displs = offsets(counts);
        char* own = static_cast<char*>(op.recv) + displs[size_t(rank_)];
        const void* s = op.send == own ? MPI_IN_PLACE : op.send;
        start(MPI_Iallgatherv(s, counts[size_t(rank_)], MPI_BYTE, op.recv, counts.data(),
                              displs.data(), MPI_BYTE, comm_, &req), "MPI_Iallgatherv");
        break;
      }
      case OpType::broadcast:
        start(MPI_Ibcast(op.recv, to_int(op.count * es, "count", op), MPI_BYTE, op.root, comm_, &req),
              "MPI_Ibcast");
        break;
      case OpType::alltoall:
      case OpType::alltoallv: {
        std::vector<int> sc = int_counts(op.counts, op), rc = int_counts(op.counts2, op);
        for (int& c : sc) c *= int(es);
        for (int& c : rc) c *= int(es);
        std::vector<int> sd = offsets(sc), rd = offsets(rc);
        const void* s = op.send;
        if (op.send == op.recv) {  // in place: MPI needs distinct buffers
          size_t bytes = size_t(sd.back() + sc.back());
          tmp.assign(static_cast<const char*>(op.send), static_cast<const char*>(op.send) + bytes);
          s = tmp.data();
        }
        start(MPI_Ialltoallv(s, sc.data(), sd.data(), MPI_BYTE, op.recv, rc.data(), rd.data(),
                             MPI_BYTE, comm_, &req), "MPI_Ialltoallv");
        break;
      }
      case OpType::barrier:
        start(MPI_Ibarrier(comm_, &req), "MPI_Ibarrier");
        break;
      default:
        fail("mpi backend: ", op_name(op.op), " is not a collective");
    }
  } catch (...) {
    unlock();
    throw;
  }
  unlock();
  wait_request(req, op);
  // Results that went through scratch buffers, and avg's division.
  int div = size_;
  switch (op.op) {
    case OpType::allreduce:
      if (bf16) {
        if (op.redop == ReduceOp::avg) divide_in_place(a.data(), a.size(), DType::f32, div);
        from_f32(a, op.recv, op.count);
      } else if (op.redop == ReduceOp::avg) {
        divide_in_place(op.recv, op.count, op.dtype, div);
      }
      break;
    case OpType::reduce:
      if (rank_ != op.root) break;
      if (bf16) {
        if (op.redop == ReduceOp::avg) divide_in_place(b.data(), b.size(), DType::f32, div);
        from_f32(b, op.recv, op.count);
      } else if (op.redop == ReduceOp::avg) {
        divide_in_place(op.recv, op.count, op.dtype, div);
      }
      break;
    case OpType::reduce_scatter: {
      size_t own = op.counts[size_t(rank_)];
      if (bf16) {
        if (op.redop == ReduceOp::avg) divide_in_place(b.data(), b.size(), DType::f32, div);
        from_f32(b, op.recv, own);
      } else {
        if (op.redop == ReduceOp::avg) divide_in_place(tmp.data(), own, op.dtype, div);
        if (own) std::memcpy(op.recv, tmp.data(), own * es);
      }
      break;
    }
    default:
      break;
  }
}

}  // namespace strata::comm::detail

#endif  // STRATA_HAVE_MPI
