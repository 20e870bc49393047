// strata's own bf16 GEMM kernel (gemm_bf16_on(bf16_kernel_path()): the best the CPU offers)
// against oneDNN's matmul primitive called directly (bf16 x bf16 -> fp32, the primitive
// created once per shape), gemm_bf16's onednn path as the model calls it (B in fp32, rounded
// on each call), and
// strata's fp32 GEMM and the emulated bf16 path (fp32 operands rounded, then the fp32 GEMM)
// for scale, per shape class of a training step: forward (A B^T), input
// gradient (A B), weight gradient (A^T B) at the `tiny` (N = 2048 rows, C = 256) and
// 12-layer 768-wide (N = 1024 rows) shapes, plus 1024^3. Both bf16 GEMMs get the same
// bf16 inputs. Interleaved rounds (strata bf16, oneDNN, strata fp32, emulated, onednn path), best CPU time per
// call of each; prints GFLOP/s, the ratio strata / oneDNN and emulated / fp32 speed.
//
//   build/bench/bench_bf16_gemm [rounds=5]   (OMP_NUM_THREADS sets both libraries' threads)
#include <omp.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/dtype.h"
#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"

namespace k = strata::kernels;

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

struct Shape {
  const char* name;
  k::Op opa, opb;
  int M, N, K;
};

// oneDNN matmul for C (M,N) = op(A) op(B): transposes are expressed as strides.
struct DnnlGemm {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  DnnlGemm(const Shape& s, uint16_t* A, uint16_t* B, float* C) {
    using dt = dnnl::memory::data_type;
    const dnnl::memory::dims as = s.opa == k::Op::N ? dnnl::memory::dims{s.K, 1}
                                                    : dnnl::memory::dims{1, s.M};
    const dnnl::memory::dims bs = s.opb == k::Op::N ? dnnl::memory::dims{s.N, 1}
                                                    : dnnl::memory::dims{1, s.K};
    dnnl::memory::desc ad({s.M, s.K}, dt::bf16, as), bd({s.K, s.N}, dt::bf16, bs),
        cd({s.M, s.N}, dt::f32, dnnl::memory::dims{s.N, 1});
    prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(ad, bd, cd), eng));
    a = dnnl::memory(ad, eng, A);
    b = dnnl::memory(bd, eng, B);
    c = dnnl::memory(cd, eng, C);
  }
  void run() {
    prim.execute(strm, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    strm.wait();
  }
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const Shape shapes[] = {
      {"tiny qkv fwd     A B^T", k::Op::N, k::Op::T, 2048, 768, 256},
      {"tiny fc fwd      A B^T", k::Op::N, k::Op::T, 2048, 1024, 256},
      {"tiny fcproj fwd  A B^T", k::Op::N, k::Op::T, 2048, 256, 1024},
      {"tiny fc dinp     A B", k::Op::N, k::Op::N, 2048, 256, 1024},
      {"tiny fc dW       A^T B", k::Op::T, k::Op::N, 1024, 256, 2048},
      {"L12 fc fwd       A B^T", k::Op::N, k::Op::T, 1024, 3072, 768},
      {"L12 fcproj dinp  A B", k::Op::N, k::Op::N, 1024, 3072, 768},
      {"L12 fc dW        A^T B", k::Op::T, k::Op::N, 3072, 768, 1024},
      {"square 1024^3    A B", k::Op::N, k::Op::N, 1024, 1024, 1024},
      // The backward products in the forward's layout (A B^T), for choosing operand layouts.
      {"tiny fc dinp     A B^T", k::Op::N, k::Op::T, 2048, 256, 1024},
      {"tiny fc dW       A B^T", k::Op::N, k::Op::T, 1024, 256, 2048},
      {"L12 fcproj dinp  A B^T", k::Op::N, k::Op::T, 1024, 3072, 768},
      {"L12 fc dW        A B^T", k::Op::N, k::Op::T, 3072, 768, 1024},
      {"L12 fc dW        A B", k::Op::N, k::Op::N, 3072, 768, 1024},
  };
  const k::GemmPath path = k::bf16_kernel_path();
  std::printf("threads %d; strata bf16 path %s; oneDNN %d.%d.%d; best CPU time per call of %d "
              "interleaved rounds\n",
              omp_get_max_threads(), k::gemm_path_name(path), dnnl_version()->major,
              dnnl_version()->minor, dnnl_version()->patch, rounds);
  std::printf("%-40s %13s %13s %13s %13s %14s %14s\n", "shape (M x N x K)", "strata bf16",
              "oneDNN bf16", "onednn path", "strata fp32", "strata/oneDNN", "emulated/fp32");
  for (const Shape& s : shapes) {
    const int ar = s.opa == k::Op::N ? s.M : s.K, ac = s.opa == k::Op::N ? s.K : s.M;
    const int br = s.opb == k::Op::N ? s.K : s.N, bc = s.opb == k::Op::N ? s.N : s.K;
    std::vector<float> A(size_t(ar) * ac), B(size_t(br) * bc), C(size_t(s.M) * s.N);
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(i % 13) * 0.01f - 0.06f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(i % 11) * 0.02f - 0.1f;
    std::vector<uint16_t> Ah(A.size()), Bh(B.size());
    for (size_t i = 0; i < A.size(); ++i) Ah[i] = strata::f32_to_bf16(A[i]);
    for (size_t i = 0; i < B.size(); ++i) Bh[i] = strata::f32_to_bf16(B[i]);
    DnnlGemm dnnl(s, Ah.data(), Bh.data(), C.data());
    auto own = [&] {
      k::gemm_bf16_on(path, s.opa, s.opb, s.M, s.N, s.K, 1.0f, k::Mat(Ah.data(), ac),
                      k::Mat(Bh.data(), bc), 0.0f, C.data(), s.N);
    };
    // gemm_bf16's onednn path as the model calls it: A in bf16, B (a weight) in fp32, rounded
    // into scratch on every call; the primitive comes from the path's cache.
    auto via = [&] {
      k::gemm_bf16_on(k::GemmPath::onednn, s.opa, s.opb, s.M, s.N, s.K, 1.0f,
                      k::Mat(Ah.data(), ac), k::Mat(B.data(), bc), 0.0f, C.data(), s.N);
    };
    auto f32 = [&] {
      k::gemm(s.opa, s.opb, s.M, s.N, s.K, 1.0f, A.data(), ac, B.data(), bc, 0.0f, C.data(), s.N);
    };
    auto lib = [&] { dnnl.run(); };
    auto emu = [&] {  // the path of a CPU without bf16 units
      k::gemm_bf16_on(k::GemmPath::fp32, s.opa, s.opb, s.M, s.N, s.K, 1.0f, k::Mat(A.data(), ac),
                      k::Mat(B.data(), bc), 0.0f, C.data(), s.N);
    };
    const double flops = 2.0 * s.M * s.N * s.K;
    const int reps = std::max(2, int(1e9 / flops));
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    own(), lib(), f32(), emu(), via();  // warm-up
    for (int r = 0; r < rounds; ++r) {
      int i = 0;
      auto time = [&](auto& g) {
        const double t0 = cpu_seconds();
        for (int q = 0; q < reps; ++q) g();
        best[i] = std::min(best[i], (cpu_seconds() - t0) / reps);
        ++i;
      };
      time(own);
      time(lib);
      time(f32);
      time(emu);
      time(via);
    }
    char name[64];
    std::snprintf(name, sizeof(name), "%s %dx%dx%d", s.name, s.M, s.N, s.K);
    std::printf("%-40s %8.1f GF/s %8.1f GF/s %8.1f GF/s %8.1f GF/s %13.2fx %13.2fx\n", name,
                flops / best[0] * 1e-9, flops / best[1] * 1e-9, flops / best[4] * 1e-9,
                flops / best[2] * 1e-9, best[1] / best[0], best[2] / best[3]);
  }
  return 0;
}
