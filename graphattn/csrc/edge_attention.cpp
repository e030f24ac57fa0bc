// Fused edge-restricted attention for CPU (forward + backward), OpenMP over target rows.
//
//   out[i,h] = sum_{e in rowptr[i]:rowptr[i+1]} softmax_e(s_e) * v[col[e],h]
//   s_e      = scale * q[i,h] . k[col[e],h] + bias[e,h]
//
// Forward: one sweep over each target row's incoming edges. Scores of the row are kept in a
// small per-thread buffer (deg x H), the per-head max is subtracted before exp (so scores of
// 1e4 stay finite), and the value rows are accumulated straight into `out`. Saved for
// backward: out (N,H,C) and the log-sum-exp (N,H). No (E,H,C) tensor anywhere.
//
// Backward (race-free, no atomics):
//   pass 1, target-major: recompute p_e = exp(s_e - lse_i), dp_e = dout_i . v_j,
//           ds_e = p_e (dp_e - D_i) with D_i = dout_i . out_i; grad_q_i = scale sum ds_e k_j;
//           writes p and ds side by side as (E,2H) in CSR order (ds is also grad_bias).
//   pass 2, source-major (CSC order, perm -> CSR position): grad_k_j = scale sum ds_e q_i,
//           grad_v_j = sum p_e dout_i.
//
// Rows with no incoming edge (or whose every score is -inf) give out = 0, never NaN; their
// lse is stored as +inf so that exp(s - lse) = 0 in backward.
//
// Vectorisation: the inner loops run over the C channels of one head and are written as
// plain `omp simd` loops over __restrict__ pointers so that -O3 vectorises them for the
// baseline ISA. The hot kernels are additionally cloned for AVX2/FMA via GCC's
// target_clones (runtime dispatch through ifunc), so the cached binary stays portable.
//
// Only light ATen headers are included and the ops are registered with TORCH_LIBRARY (no
// pybind11 / <torch/extension.h>), which keeps the first-use compile at a few seconds.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__) && \
    !defined(GA_NO_CLONES)
#define GA_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GA_CLONES
#endif

namespace {

constexpr int64_t kParallelMinWork = int64_t(1) << 21;  // edges*H*C below which we stay single-threaded:
// thread start-up and spin-waiting cost more than small graphs (a 128-molecule batch) gain
#ifndef GA_PREFETCH
#define GA_PREFETCH 8
#endif
constexpr int64_t kPrefetch = GA_PREFETCH;  // edges of look-ahead for software prefetch

template <typename T>
inline T dot(const T* __restrict__ a, const T* __restrict__ b, int64_t C) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += a[c] * b[c];
  return s;
}

template <typename T>
inline void axpy(T* __restrict__ y, T a, const T* __restrict__ x, int64_t C) {
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) y[c] += a * x[c];
}

template <typename T>
inline void prefetch_row(const T* p, int64_t n) {
  const char* b = reinterpret_cast<const char*>(p);
  const int64_t bytes = n * static_cast<int64_t>(sizeof(T));
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(b + off, 0, 1);
}

inline int num_threads_for(int64_t work) {
  if (work < kParallelMinWork) return 1;
  return std::max(1, at::get_num_threads());
}

// ----------------------------------------------------------------------------- forward
template <typename T>
GA_CLONES void forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ bias,
                              const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                              int64_t N, int64_t H, int64_t C, T scale, T* __restrict__ out,
                              T* __restrict__ lse, int nthreads) {
  const int64_t HC = H * C, E = rowptr[N];
  const T inf = std::numeric_limits<T>::infinity();
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<T> sbuf;
    std::vector<T> mx(H), sum(H);
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t beg = rowptr[i], end = rowptr[i + 1], deg = end - beg;
      T* __restrict__ o = out + i * HC;
      for (int64_t c = 0; c < HC; ++c) o[c] = T(0);
      if (deg <= 0) {
        for (int64_t h = 0; h < H; ++h) lse[i * H + h] = inf;
        continue;
      }
      if (static_cast<int64_t>(sbuf.size()) < deg * H) sbuf.resize(deg * H);
      T* __restrict__ s = sbuf.data();
      const T* __restrict__ qi = q + i * HC;
      for (int64_t h = 0; h < H; ++h) mx[h] = -inf;
      // scores and per-head max
      for (int64_t e = beg; e < end; ++e) {
        if (kPrefetch > 0 && e + kPrefetch < E) prefetch_row(k + col[e + kPrefetch] * HC, HC);
        const T* __restrict__ kj = k + col[e] * HC;
        T* __restrict__ se = s + (e - beg) * H;
        for (int64_t h = 0; h < H; ++h) {
          T x = scale * dot(qi + h * C, kj + h * C, C);
          if (bias) x += bias[e * H + h];
          se[h] = x;
          mx[h] = x > mx[h] ? x : mx[h];
        }
      }
      for (int64_t h = 0; h < H; ++h) sum[h] = T(0);
      // weights and value accumulation
      for (int64_t e = beg; e < end; ++e) {
        if (kPrefetch > 0 && e + kPrefetch < E) prefetch_row(v + col[e + kPrefetch] * HC, HC);
        const T* __restrict__ vj = v + col[e] * HC;
        const T* __restrict__ se = s + (e - beg) * H;
        for (int64_t h = 0; h < H; ++h) {
          if (mx[h] == -inf) continue;  // every score of this head is -inf (masked)
          const T p = std::exp(se[h] - mx[h]);
          sum[h] += p;
          axpy(o + h * C, p, vj + h * C, C);
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        T* __restrict__ oh = o + h * C;
        if (sum[h] > T(0) && mx[h] != -inf) {
          const T inv = T(1) / sum[h];
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) oh[c] *= inv;
          lse[i * H + h] = mx[h] + std::log(sum[h]);
        } else {
          for (int64_t c = 0; c < C; ++c) oh[c] = T(0);
          lse[i * H + h] = inf;
        }
      }
    }
  }
}

// ---------------------------------------------------------------- backward, target-major
template <typename T>
GA_CLONES void backward_rows_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                    const T* __restrict__ v, const T* __restrict__ bias,
                                    const int64_t* __restrict__ rowptr,
                                    const int64_t* __restrict__ col, const T* __restrict__ out,
                                    const T* __restrict__ lse, const T* __restrict__ dout,
                                    int64_t N, int64_t H, int64_t C, T scale,
                                    T* __restrict__ gq, T* __restrict__ PDS, int nthreads) {
  const int64_t HC = H * C, E = rowptr[N];
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<T> D(H);
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t beg = rowptr[i], end = rowptr[i + 1];
      T* __restrict__ g = gq ? gq + i * HC : nullptr;
      if (g)
        for (int64_t c = 0; c < HC; ++c) g[c] = T(0);
      if (end <= beg) continue;
      const T* __restrict__ qi = q + i * HC;
      const T* __restrict__ doi = dout + i * HC;
      const T* __restrict__ oi = out + i * HC;
      const T* __restrict__ li = lse + i * H;
      for (int64_t h = 0; h < H; ++h) D[h] = dot(doi + h * C, oi + h * C, C);
      for (int64_t e = beg; e < end; ++e) {
        if (kPrefetch > 0 && e + kPrefetch < E) {
          prefetch_row(k + col[e + kPrefetch] * HC, HC);
          prefetch_row(v + col[e + kPrefetch] * HC, HC);
        }
        const T* __restrict__ kj = k + col[e] * HC;
        const T* __restrict__ vj = v + col[e] * HC;
        for (int64_t h = 0; h < H; ++h) {
          T x = scale * dot(qi + h * C, kj + h * C, C);
          if (bias) x += bias[e * H + h];
          const T p = std::exp(x - li[h]);
          const T dp = dot(doi + h * C, vj + h * C, C);
          const T ds = p * (dp - D[h]);
          PDS[e * 2 * H + h] = p;
          PDS[e * 2 * H + H + h] = ds;
          if (g) axpy(g + h * C, ds, kj + h * C, C);
        }
      }
      if (g) {
#pragma omp simd
        for (int64_t c = 0; c < HC; ++c) g[c] *= scale;
      }
    }
  }
}

// ---------------------------------------------------------------- backward, source-major
template <typename T>
GA_CLONES void backward_cols_kernel(const T* __restrict__ q, const T* __restrict__ dout,
                                    const int64_t* __restrict__ cptr,
                                    const int64_t* __restrict__ cperm,
                                    const int64_t* __restrict__ ctgt, const T* __restrict__ PDS,
                                    int64_t N, int64_t H, int64_t C,
                                    T scale, T* __restrict__ gk, T* __restrict__ gv,
                                    int nthreads) {
  const int64_t HC = H * C, E = cptr[N];
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 32)
  for (int64_t j = 0; j < N; ++j) {
    const int64_t beg = cptr[j], end = cptr[j + 1];
    T* __restrict__ a = gk + j * HC;
    T* __restrict__ b = gv + j * HC;
    for (int64_t c = 0; c < HC; ++c) {
      a[c] = T(0);
      b[c] = T(0);
    }
    for (int64_t t = beg; t < end; ++t) {
      if (kPrefetch > 0 && t + kPrefetch < E) {
        prefetch_row(q + ctgt[t + kPrefetch] * HC, HC);
        prefetch_row(dout + ctgt[t + kPrefetch] * HC, HC);
        prefetch_row(PDS + cperm[t + kPrefetch] * 2 * H, 2 * H);
      }
      const int64_t pos = cperm[t];
      const T* __restrict__ qi = q + ctgt[t] * HC;
      const T* __restrict__ doi = dout + ctgt[t] * HC;
      const T* __restrict__ pe = PDS + pos * 2 * H;
      for (int64_t h = 0; h < H; ++h) {
        axpy(a + h * C, pe[H + h], qi + h * C, C);
        axpy(b + h * C, pe[h], doi + h * C, C);
      }
    }
#pragma omp simd
    for (int64_t c = 0; c < HC; ++c) a[c] *= scale;
  }
}

// ------------------------------------------------------------------------------ checks
void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& rowptr, const at::Tensor& col) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(),
              "fused edge attention: CPU tensors expected");
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3, "q, k, v must be (N, H, C)");
  TORCH_CHECK(q.sizes() == k.sizes() && q.sizes() == v.sizes(), "q, k, v shapes differ");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v dtypes differ");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(),
              "q, k, v must be contiguous");
  TORCH_CHECK(rowptr.scalar_type() == at::kLong && col.scalar_type() == at::kLong,
              "rowptr/col must be int64");
  TORCH_CHECK(rowptr.is_contiguous() && col.is_contiguous(), "rowptr/col must be contiguous");
  TORCH_CHECK(rowptr.numel() == q.size(0) + 1, "rowptr must have N + 1 entries");
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  TORCH_CHECK(rp[0] == 0 && rp[q.size(0)] == col.numel(), "rowptr does not match col");
}

std::tuple<at::Tensor, at::Tensor> forward(at::Tensor q, at::Tensor k, at::Tensor v,
                                   c10::optional<at::Tensor> bias, at::Tensor rowptr,
                                   at::Tensor col, double scale) {
  check_inputs(q, k, v, rowptr, col);
  const int64_t N = q.size(0), H = q.size(1), C = q.size(2), E = col.numel();
  if (bias.has_value()) {
    TORCH_CHECK(bias->sizes() == at::IntArrayRef({E, H}), "bias must be (E, H)");
    TORCH_CHECK(bias->scalar_type() == q.scalar_type() && bias->is_contiguous(),
                "bias must be contiguous with the dtype of q");
  }
  auto out = at::empty_like(q);
  auto lse = at::empty({N, H}, q.options());
  const int nt = num_threads_for(E * H * C);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "graphattn_fused_forward", [&] {
    forward_kernel<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                             v.data_ptr<scalar_t>(),
                             bias.has_value() ? bias->data_ptr<scalar_t>() : nullptr,
                             rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), N, H, C,
                             static_cast<scalar_t>(scale), out.data_ptr<scalar_t>(),
                             lse.data_ptr<scalar_t>(), nt);
  });
  return {out, lse};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(at::Tensor q, at::Tensor k, at::Tensor v,
                                    c10::optional<at::Tensor> bias, at::Tensor rowptr,
                                    at::Tensor col, at::Tensor cptr, at::Tensor cperm,
                                    at::Tensor ctgt, at::Tensor out, at::Tensor lse,
                                    at::Tensor dout, double scale, bool need_q,
                                    bool need_kv) {
  check_inputs(q, k, v, rowptr, col);
  TORCH_CHECK(out.sizes() == q.sizes() && dout.sizes() == q.sizes(), "out/dout shape");
  TORCH_CHECK(out.is_contiguous() && dout.is_contiguous() && lse.is_contiguous(),
              "out/dout/lse must be contiguous");
  TORCH_CHECK(dout.scalar_type() == q.scalar_type(), "dout dtype");
  const int64_t N = q.size(0), H = q.size(1), C = q.size(2), E = col.numel();
  auto gq = need_q ? at::empty_like(q) : at::empty({0}, q.options());
  // p and ds of each edge side by side, (E, 2H): one cache line per edge in the CSC pass
  auto PDS = at::empty({E, 2 * H}, q.options());
  at::Tensor gk = at::empty({0}, q.options()), gv = at::empty({0}, q.options());
  const int nt = num_threads_for(E * H * C);
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "graphattn_fused_backward", [&] {
    backward_rows_kernel<scalar_t>(
        q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(), v.data_ptr<scalar_t>(),
        bias.has_value() ? bias->data_ptr<scalar_t>() : nullptr, rowptr.data_ptr<int64_t>(),
        col.data_ptr<int64_t>(), out.data_ptr<scalar_t>(), lse.data_ptr<scalar_t>(),
        dout.data_ptr<scalar_t>(), N, H, C, static_cast<scalar_t>(scale),
        need_q ? gq.data_ptr<scalar_t>() : nullptr, PDS.data_ptr<scalar_t>(), nt);
  });
  if (need_kv) {
    TORCH_CHECK(cptr.numel() == N + 1 && cperm.numel() == E && ctgt.numel() == E,
                "CSC arrays have wrong sizes");
    TORCH_CHECK(cptr.scalar_type() == at::kLong && cperm.scalar_type() == at::kLong &&
                    ctgt.scalar_type() == at::kLong,
                "CSC arrays must be int64");
    TORCH_CHECK(cptr.is_contiguous() && cperm.is_contiguous() && ctgt.is_contiguous(),
                "CSC arrays must be contiguous");
    gk = at::empty_like(q);
    gv = at::empty_like(q);
    AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "graphattn_fused_backward_kv", [&] {
      backward_cols_kernel<scalar_t>(q.data_ptr<scalar_t>(), dout.data_ptr<scalar_t>(),
                                     cptr.data_ptr<int64_t>(), cperm.data_ptr<int64_t>(),
                                     ctgt.data_ptr<int64_t>(), PDS.data_ptr<scalar_t>(), N, H, C,
                                     static_cast<scalar_t>(scale), gk.data_ptr<scalar_t>(),
                                     gv.data_ptr<scalar_t>(), nt);
    });
  }
  return {gq, gk, gv, PDS.narrow(1, H, H)};  // grad_bias = ds, (E, H) view in CSR order
}

}  // namespace

// torch.ops.graphattn_ea.forward(q, k, v, bias, rowptr, col, scale) -> (out, lse)
// torch.ops.graphattn_ea.backward(q, k, v, bias, rowptr, col, cptr, cperm, ctgt, out, lse,
//                                 dout, scale, need_q, need_kv) -> (gq, gk, gv, grad_bias)
// (gq / gk / gv are empty tensors when not requested.)
TORCH_LIBRARY(graphattn_ea, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
}
