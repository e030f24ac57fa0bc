// Fused edge-restricted attention for CPU (forward + backward), OpenMP over target rows.
//
//   out[i,h] = sum_{e in rowptr[i]:rowptr[i+1]} softmax_e(s_e) * (v[col[e],h] + ev[e,h])
//   s_e      = scale * q[i,h] . (k[col[e],h] + ek[e,h]) + bias[e,h]
//
// bias (E,H), edge key ek (E,H,C) and edge value ev (E,H,C) are optional; ev may be the very
// tensor ek. Per-edge tensors are read (and their gradients written) at eid[e] for CSR
// position e (eid = the CSR permutation: the caller's edge order, so no permuted copy is
// ever made), or at e itself when eid is absent.
//
// Forward: one sweep over each target row's incoming edges. Scores of the row are kept in a
// small per-thread buffer (deg x H), the per-head max is subtracted before exp (so scores of
// 1e4 stay finite), and the value rows are accumulated straight into `out`. Saved for
// backward: the log-sum-exp (N,H) only. Optionally writes the weights (E,H).
//
// Backward (race-free, no atomics):
//   pass 1, target-major: recompute p_e = exp(s_e - lse_i) and dp_e = dout_i . (v_j + ev_e)
//           into a per-thread row buffer, D_i = sum_e p_e dp_e (= dout_i . out_i, so `out`
//           need not be saved), then ds_e = p_e (dp_e - D_i) and
//           grad_q_i = scale sum ds_e (k_j + ek_e), grad_bias_e = ds_e,
//           grad_ek_e = scale ds_e q_i, grad_ev_e = p_e dout_i (their sum when shared).
//   pass 2, source-major over a CSC copy (int32 when it fits; perm -> CSR position):
//           grad_k_j = scale sum ds_e q_i, grad_v_j = sum p_e dout_i.
//           Pass 1 stores (p, ds) as (E,2H) in CSR order (always with edge features, so the
//           (H,C) edge rows are not re-gathered; without them while E*2H <= the budget (set_pds_budget),
//           which saves two dot products and an exp per edge and head). Above that budget and
//           without edge features, p_e and ds_e are recomputed from q_i, k_j, v_j, dout_i and
//           (lse_i, D_i) saved by pass 1 as (N,2H): no per-edge buffer at all.
//
// Rows with no incoming edge (or whose every score is -inf) give out = 0, never NaN; their
// lse is stored as +inf so that exp(s - lse) = 0 in backward. A NaN or +inf score (e.g. an
// overflowed projection) makes its row NaN, as in the chunked and dense paths.
//
// Vectorisation: the inner loops run over the C channels of one head and are written as
// plain `omp simd` loops over __restrict__ pointers so that -O3 vectorises them for the
// baseline ISA. The hot kernels are additionally cloned for AVX2/FMA via GCC's
// target_clones (runtime dispatch through ifunc), so the cached binary stays portable.
//
// Dtypes: float64, float32, float16 and bfloat16 (T). Every dot product, running max, sum,
// exp and gradient accumulation runs in A = at::opmath_type<T> (float for half/bf16, T
// otherwise); outputs and gradients are stored in T, the saved lse (and the (p, ds) / (lse, D)
// buffers of backward) in A. Rows accumulated over many edges (out, grad q, grad k, grad v)
// go through a per-thread A buffer when T is narrower than A, and are cast once at the end.
//
// Only light ATen headers are included and the ops are registered with TORCH_LIBRARY (no
// pybind11 / <torch/extension.h>), which keeps the first-use compile at a few seconds.
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
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

constexpr int64_t kParallelMinWork = int64_t(1) << 18;  // edges*H*C below which we stay single-threaded:
// thread start-up and spin-waiting cost more than tiny graphs gain. Measured on an idle 2-core
// machine: a 128-molecule batch (E*H*C ~ 0.6-0.9M) is ~1.7x faster per layer with 2 threads
// (it was below the former 2^21 threshold); a 16-molecule batch (~0.1M) stays single-threaded.
// Elements (default 2^26: 256 MB in float32) of the (E, 2H) (p, ds) buffer backward keeps
// without edge features; larger graphs recompute instead. set_pds_budget changes it (tests
// use 0 to exercise the recompute path on small graphs).
std::atomic<int64_t> g_max_stored_pds{int64_t(1) << 26};
#ifndef GA_PREFETCH
#define GA_PREFETCH 8
#endif
constexpr int64_t kPrefetch = GA_PREFETCH;  // edges of look-ahead for software prefetch

template <typename T>
using acc_t = at::opmath_type<T>;  // float for half / bfloat16, T otherwise

// x widened to the accumulator type (widen) and rounded back to storage (narrow). float16 goes
// through the compiler's _Float16 where it has one: the AVX2 clones then convert 8 values per
// F16C instruction instead of c10::Half's scalar bit manipulation (2.5x faster fp16 kernels).
template <typename A, typename T>
inline A widen(T x) {
  return static_cast<A>(x);
}
template <typename T, typename A>
inline T narrow(A x) {
  return static_cast<T>(x);
}
#if defined(__FLT16_MAX__)
template <>
inline float widen<float, c10::Half>(c10::Half x) {
  _Float16 h;
  std::memcpy(&h, &x, sizeof(h));
  return static_cast<float>(h);
}
template <>
inline c10::Half narrow<c10::Half, float>(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  c10::Half r;
  std::memcpy(&r, &h, sizeof(r));
  return r;
}
#endif

template <typename T, typename A = acc_t<T>>
inline A dot(const T* __restrict__ a, const T* __restrict__ b, int64_t C) {
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c) s += widen<A>(a[c]) * widen<A>(b[c]);
  return s;
}

// a . (b + b2); b2 may be null
template <typename T, typename A = acc_t<T>>
inline A dot2(const T* __restrict__ a, const T* __restrict__ b, const T* __restrict__ b2, int64_t C) {
  if (!b2) return dot<T, A>(a, b, C);
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t c = 0; c < C; ++c)
    s += widen<A>(a[c]) * (widen<A>(b[c]) + widen<A>(b2[c]));
  return s;
}

// y += a * (x + x2); x2 may be null
template <typename T, typename A>
inline void axpy2(A* __restrict__ y, A a, const T* __restrict__ x, const T* __restrict__ x2, int64_t C) {
  if (!x2) {
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) y[c] += a * widen<A>(x[c]);
    return;
  }
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) y[c] += a * (widen<A>(x[c]) + widen<A>(x2[c]));
}

// Accumulator of one output row of n elements: the row itself when T is A, else a per-thread
// A buffer that store_row casts into the row once it is complete.
template <typename T, typename A>
inline A* acc_row(T* row, std::vector<A>& buf, int64_t n) {
  if constexpr (std::is_same_v<T, A>) {
    return row;
  } else {
    if (static_cast<int64_t>(buf.size()) < n) buf.resize(n);
    return buf.data();
  }
}

template <typename T, typename A>
inline void store_row(T* __restrict__ row, const A* __restrict__ acc, int64_t n) {
  if constexpr (!std::is_same_v<T, A>) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) row[c] = narrow<T>(acc[c]);
  }
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

// Optional per-edge inputs, looked up at eid[e] for CSR position e.
template <typename T>
struct EdgeIn {
  const T* bias;        // (E, H)
  const T* ek;          // (E, H, C)
  const T* ev;          // (E, H, C), may equal ek
  const int64_t* eid;   // (E,) CSR position -> edge id; null = identity
  inline int64_t id(int64_t e) const { return eid ? eid[e] : e; }
};

// ----------------------------------------------------------------------------- forward
template <typename T, typename A = acc_t<T>>
GA_CLONES void forward_kernel(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, EdgeIn<T> ed,
                              const int64_t* __restrict__ rowptr, const int64_t* __restrict__ col,
                              int64_t N, int64_t H, int64_t C, A scale, T* __restrict__ out,
                              A* __restrict__ lse, T* __restrict__ w, int nthreads) {
  const int64_t HC = H * C, E = rowptr[N];
  const A inf = std::numeric_limits<A>::infinity();
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<A> sbuf, obuf;
    std::vector<A> mx(H), sum(H);
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t beg = rowptr[i], end = rowptr[i + 1], deg = end - beg;
      A* __restrict__ o = acc_row(out + i * HC, obuf, HC);
      for (int64_t c = 0; c < HC; ++c) o[c] = A(0);
      if (deg <= 0) {
        store_row(out + i * HC, o, HC);
        for (int64_t h = 0; h < H; ++h) lse[i * H + h] = inf;
        continue;
      }
      if (static_cast<int64_t>(sbuf.size()) < deg * H) sbuf.resize(deg * H);
      A* __restrict__ s = sbuf.data();
      const T* __restrict__ qi = q + i * HC;
      for (int64_t h = 0; h < H; ++h) mx[h] = -inf;
      for (int64_t e = beg; e < end; ++e) {  // scores and per-head max
        if (kPrefetch > 0 && e + kPrefetch < E) prefetch_row(k + col[e + kPrefetch] * HC, HC);
        const int64_t ee = ed.id(e);
        const T* __restrict__ kj = k + col[e] * HC;
        const T* __restrict__ eke = ed.ek ? ed.ek + ee * HC : nullptr;
        A* __restrict__ se = s + (e - beg) * H;
        for (int64_t h = 0; h < H; ++h) {
          A x = scale * dot2(qi + h * C, kj + h * C, eke ? eke + h * C : nullptr, C);
          if (ed.bias) x += static_cast<A>(ed.bias[ee * H + h]);
          se[h] = x;
          mx[h] = (x > mx[h] || x != x) ? x : mx[h];  // a NaN score makes the row's max NaN
        }
      }
      for (int64_t h = 0; h < H; ++h) sum[h] = A(0);
      for (int64_t e = beg; e < end; ++e) {  // weights and value accumulation
        if (kPrefetch > 0 && e + kPrefetch < E) prefetch_row(v + col[e + kPrefetch] * HC, HC);
        const T* __restrict__ vj = v + col[e] * HC;
        const T* __restrict__ eve = ed.ev ? ed.ev + ed.id(e) * HC : nullptr;
        const A* __restrict__ se = s + (e - beg) * H;
        for (int64_t h = 0; h < H; ++h) {
          if (mx[h] == -inf) continue;  // every score of this head is -inf (masked)
          const A p = std::exp(se[h] - mx[h]);
          sum[h] += p;
          axpy2(o + h * C, p, vj + h * C, eve ? eve + h * C : nullptr, C);
        }
      }
      for (int64_t h = 0; h < H; ++h) {
        A* __restrict__ oh = o + h * C;
        // only a row whose scores are all -inf (masked) is zero; a NaN or +inf score (overflow)
        // gives NaN, as the chunked and dense paths do, never a silently dead head
        const bool ok = mx[h] != -inf;
        if (ok) {
          const A inv = A(1) / sum[h];
#pragma omp simd
          for (int64_t c = 0; c < C; ++c) oh[c] *= inv;
          lse[i * H + h] = mx[h] + std::log(sum[h]);
        } else {
          for (int64_t c = 0; c < C; ++c) oh[c] = A(0);
          lse[i * H + h] = inf;
        }
        if (w) {
          for (int64_t e = beg; e < end; ++e)
            w[ed.id(e) * H + h] =
                static_cast<T>(ok ? std::exp(s[(e - beg) * H + h] - mx[h]) / sum[h] : A(0));
        }
      }
      store_row(out + i * HC, o, HC);
    }
  }
}

// ---------------------------------------------------------------- backward, target-major
// Outputs (each may be null): gq (N,H,C); gb (E,H), gek / gev (E,H,C) at edge ids (gek gets
// the sum when `shared`); PDS (E,2H) = (p, ds) in CSR order; LD (N,2H) = (lse, D).
template <typename T, typename A = acc_t<T>>
GA_CLONES void backward_rows_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                    const T* __restrict__ v, EdgeIn<T> ed,
                                    const int64_t* __restrict__ rowptr,
                                    const int64_t* __restrict__ col, const A* __restrict__ lse,
                                    const T* __restrict__ dout, int64_t N, int64_t H, int64_t C,
                                    A scale, T* __restrict__ gq, T* __restrict__ gb,
                                    T* __restrict__ gek, T* __restrict__ gev, bool shared,
                                    A* __restrict__ PDS, A* __restrict__ LD, int nthreads) {
  const int64_t HC = H * C, E = rowptr[N];
  const bool per_edge = gq || gb || gek || gev || PDS;
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<A> buf, gbuf, D(H);
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < N; ++i) {
      const int64_t beg = rowptr[i], end = rowptr[i + 1], deg = end - beg;
      A* __restrict__ g = gq ? acc_row(gq + i * HC, gbuf, HC) : nullptr;
      if (g)
        for (int64_t c = 0; c < HC; ++c) g[c] = A(0);
      const A* __restrict__ li = lse + i * H;
      for (int64_t h = 0; h < H; ++h) D[h] = A(0);
      if (deg > 0) {
        if (static_cast<int64_t>(buf.size()) < deg * 2 * H) buf.resize(deg * 2 * H);
        const T* __restrict__ qi = q + i * HC;
        const T* __restrict__ doi = dout + i * HC;
        for (int64_t e = beg; e < end; ++e) {  // p, dp and D
          if (kPrefetch > 0 && e + kPrefetch < E) {
            prefetch_row(k + col[e + kPrefetch] * HC, HC);
            prefetch_row(v + col[e + kPrefetch] * HC, HC);
          }
          const int64_t ee = ed.id(e);
          const T* __restrict__ kj = k + col[e] * HC;
          const T* __restrict__ vj = v + col[e] * HC;
          const T* __restrict__ eke = ed.ek ? ed.ek + ee * HC : nullptr;
          const T* __restrict__ eve = ed.ev ? ed.ev + ee * HC : nullptr;
          A* __restrict__ be = buf.data() + (e - beg) * 2 * H;
          for (int64_t h = 0; h < H; ++h) {
            A x = scale * dot2(qi + h * C, kj + h * C, eke ? eke + h * C : nullptr, C);
            if (ed.bias) x += static_cast<A>(ed.bias[ee * H + h]);
            const A p = std::exp(x - li[h]);
            const A dp = dot2(doi + h * C, vj + h * C, eve ? eve + h * C : nullptr, C);
            be[h] = p;
            be[H + h] = dp;
            D[h] += p * dp;
          }
        }
        for (int64_t e = beg; per_edge && e < end; ++e) {  // ds and everything that needs it
          const int64_t ee = ed.id(e);
          const T* __restrict__ kj = k + col[e] * HC;
          const T* __restrict__ eke = ed.ek ? ed.ek + ee * HC : nullptr;
          const A* __restrict__ be = buf.data() + (e - beg) * 2 * H;
          for (int64_t h = 0; h < H; ++h) {
            const A p = be[h], ds = p * (be[H + h] - D[h]);
            if (g) axpy2(g + h * C, ds, kj + h * C, eke ? eke + h * C : nullptr, C);
            if (gb) gb[ee * H + h] = static_cast<T>(ds);
            const T* __restrict__ qh = qi + h * C;
            const T* __restrict__ dh = doi + h * C;
            if (gek) {
              T* __restrict__ y = gek + ee * HC + h * C;
              const A a = scale * ds;
              if (shared) {
#pragma omp simd
                for (int64_t c = 0; c < C; ++c)
                  y[c] = narrow<T>(a * widen<A>(qh[c]) + p * widen<A>(dh[c]));
              } else {
#pragma omp simd
                for (int64_t c = 0; c < C; ++c) y[c] = narrow<T>(a * widen<A>(qh[c]));
              }
            }
            if (gev) {
              T* __restrict__ y = gev + ee * HC + h * C;
#pragma omp simd
              for (int64_t c = 0; c < C; ++c) y[c] = narrow<T>(p * widen<A>(dh[c]));
            }
            if (PDS) {
              PDS[e * 2 * H + h] = p;
              PDS[e * 2 * H + H + h] = ds;
            }
          }
        }
        if (g) {
#pragma omp simd
          for (int64_t c = 0; c < HC; ++c) g[c] *= scale;
        }
      }
      if (g) store_row(gq + i * HC, g, HC);
      if (LD)
        for (int64_t h = 0; h < H; ++h) {
          LD[i * 2 * H + h] = li[h];
          LD[i * 2 * H + H + h] = D[h];
        }
    }
  }
}

// ---------------------------------------------------------------- backward, source-major
// Reads (p, ds) from PDS when given; otherwise recomputes them from LD = (lse, D) (only
// valid without edge key/value, which the caller guarantees).
template <typename T, typename I, typename A = acc_t<T>>
GA_CLONES void backward_cols_kernel(const T* __restrict__ q, const T* __restrict__ k,
                                    const T* __restrict__ v, EdgeIn<T> ed,
                                    const T* __restrict__ dout, const int64_t* __restrict__ cptr,
                                    const I* __restrict__ cperm, const I* __restrict__ ctgt,
                                    const A* __restrict__ PDS, const A* __restrict__ LD,
                                    int64_t N, int64_t H, int64_t C, A scale,
                                    T* __restrict__ gk, T* __restrict__ gv, int nthreads) {
  const int64_t HC = H * C, E = cptr[N];
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<A> abuf, bbuf;
#pragma omp for schedule(dynamic, 32)
    for (int64_t j = 0; j < N; ++j) {
      const int64_t beg = cptr[j], end = cptr[j + 1];
      A* __restrict__ a = acc_row(gk + j * HC, abuf, HC);
      A* __restrict__ b = acc_row(gv + j * HC, bbuf, HC);
      for (int64_t c = 0; c < HC; ++c) {
        a[c] = A(0);
        b[c] = A(0);
      }
      const T* __restrict__ kj = k + j * HC;
      const T* __restrict__ vj = v + j * HC;
      for (int64_t t = beg; t < end; ++t) {
        if (kPrefetch > 0 && t + kPrefetch < E) {
          const int64_t tp = ctgt[t + kPrefetch];
          prefetch_row(q + tp * HC, HC);
          prefetch_row(dout + tp * HC, HC);
          if (PDS)
            prefetch_row(PDS + static_cast<int64_t>(cperm[t + kPrefetch]) * 2 * H, 2 * H);
          else
            prefetch_row(LD + tp * 2 * H, 2 * H);
        }
        const int64_t pos = cperm[t], i = ctgt[t];
        const T* __restrict__ qi = q + i * HC;
        const T* __restrict__ doi = dout + i * HC;
        const A* __restrict__ li = LD ? LD + i * 2 * H : nullptr;
        const int64_t ee = (!PDS && ed.bias) ? ed.id(pos) : 0;
        for (int64_t h = 0; h < H; ++h) {
          A p, ds;
          if (PDS) {
            p = PDS[pos * 2 * H + h];
            ds = PDS[pos * 2 * H + H + h];
          } else {
            A x = scale * dot(qi + h * C, kj + h * C, C);
            if (ed.bias) x += static_cast<A>(ed.bias[ee * H + h]);
            p = std::exp(x - li[h]);
            ds = p * (dot(doi + h * C, vj + h * C, C) - li[H + h]);
          }
          axpy2(a + h * C, ds, qi + h * C, static_cast<const T*>(nullptr), C);
          axpy2(b + h * C, p, doi + h * C, static_cast<const T*>(nullptr), C);
        }
      }
#pragma omp simd
      for (int64_t c = 0; c < HC; ++c) a[c] *= scale;
      store_row(gk + j * HC, a, HC);
      store_row(gv + j * HC, b, HC);
    }
  }
}

// ------------------------------------------------------------------------------ checks
void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& rowptr, const at::Tensor& col) {
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(),
              "fused edge attention: CPU tensors expected");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && q.sizes() == v.sizes(),
              "q, k, v must all be (N, H, C)");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "q, k, v dtypes differ");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && v.is_contiguous(),
              "q, k, v must be contiguous");
  TORCH_CHECK(rowptr.scalar_type() == at::kLong && col.scalar_type() == at::kLong &&
                  rowptr.is_contiguous() && col.is_contiguous(),
              "rowptr/col must be contiguous int64");
  TORCH_CHECK(rowptr.numel() == q.size(0) + 1, "rowptr must have N + 1 entries");
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  TORCH_CHECK(rp[0] == 0 && rp[q.size(0)] == col.numel(), "rowptr does not match col");
}

template <typename T>
const T* opt_ptr(const c10::optional<at::Tensor>& t, const at::Tensor& q, at::IntArrayRef shape,
                 const char* name) {
  if (!t.has_value()) return nullptr;
  TORCH_CHECK(t->sizes() == shape, name, " has the wrong shape");
  TORCH_CHECK(t->scalar_type() == q.scalar_type() && t->is_contiguous(), name,
              " must be contiguous with the dtype of q");
  return t->data_ptr<T>();
}

template <typename T>
EdgeIn<T> edge_inputs(const at::Tensor& q, int64_t E, const c10::optional<at::Tensor>& bias,
                      const c10::optional<at::Tensor>& ek, const c10::optional<at::Tensor>& ev,
                      const c10::optional<at::Tensor>& eid) {
  const int64_t H = q.size(1), C = q.size(2);
  const int64_t* ids = nullptr;
  if (eid.has_value()) {
    TORCH_CHECK(eid->numel() == E && eid->scalar_type() == at::kLong && eid->is_contiguous(),
                "eid must be a contiguous int64 (E,) permutation");
    ids = eid->data_ptr<int64_t>();
  }
  return {opt_ptr<T>(bias, q, {E, H}, "bias"), opt_ptr<T>(ek, q, {E, H, C}, "edge_key"),
          opt_ptr<T>(ev, q, {E, H, C}, "edge_value"), ids};
}

// ------------------------------------------------------------------------------ ops
// dtype of the saved lse and of backward's (p, ds) / (lse, D) buffers: float64 for float64
// inputs, float32 otherwise (at::opmath_type)
at::ScalarType acc_dtype(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

#define GA_DISPATCH(TYPE, NAME, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, NAME, __VA_ARGS__)

std::tuple<at::Tensor, at::Tensor, at::Tensor> forward(
    at::Tensor q, at::Tensor k, at::Tensor v, c10::optional<at::Tensor> bias,
    c10::optional<at::Tensor> ek, c10::optional<at::Tensor> ev, c10::optional<at::Tensor> eid,
    at::Tensor rowptr, at::Tensor col, double scale, bool need_weights) {
  check_inputs(q, k, v, rowptr, col);
  const int64_t N = q.size(0), H = q.size(1), C = q.size(2), E = col.numel();
  auto out = at::empty_like(q);
  auto lse = at::empty({N, H}, q.options().dtype(acc_dtype(q.scalar_type())));
  auto w = at::empty({need_weights ? E : 0, H}, q.options());
  const int nt = num_threads_for(E * H * C);
  GA_DISPATCH(q.scalar_type(), "graphattn_fused_forward", [&] {
    using A = acc_t<scalar_t>;
    forward_kernel<scalar_t>(q.data_ptr<scalar_t>(), k.data_ptr<scalar_t>(),
                             v.data_ptr<scalar_t>(), edge_inputs<scalar_t>(q, E, bias, ek, ev, eid),
                             rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), N, H, C,
                             static_cast<A>(scale), out.data_ptr<scalar_t>(), lse.data_ptr<A>(),
                             need_weights ? w.data_ptr<scalar_t>() : nullptr, nt);
  });
  return {out, lse, w};
}

// Returns (gq, gk, gv, grad_bias, grad_ek, grad_ev); those not requested are empty. With
// `shared` (ev is ek), grad_ek is the sum of both roles and grad_ev is empty.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> backward(
    at::Tensor q, at::Tensor k, at::Tensor v, c10::optional<at::Tensor> bias,
    c10::optional<at::Tensor> ek, c10::optional<at::Tensor> ev, c10::optional<at::Tensor> eid,
    at::Tensor rowptr, at::Tensor col, at::Tensor cptr, at::Tensor cperm, at::Tensor ctgt,
    at::Tensor lse, at::Tensor dout, double scale, bool need_q, bool need_kv, bool need_bias,
    bool need_ek, bool need_ev, bool shared) {
  check_inputs(q, k, v, rowptr, col);
  TORCH_CHECK(dout.sizes() == q.sizes() && dout.is_contiguous() && lse.is_contiguous() &&
                  dout.scalar_type() == q.scalar_type(),
              "dout must be a contiguous (N, H, C) tensor with the dtype of q");
  TORCH_CHECK(lse.scalar_type() == acc_dtype(q.scalar_type()),
              "lse must be float64 for float64 q and float32 otherwise");
  const int64_t N = q.size(0), H = q.size(1), C = q.size(2), E = col.numel();
  TORCH_CHECK(lse.numel() == N * H, "lse must be (N, H)");
  TORCH_CHECK(!shared || (ek.has_value() && ev.has_value()), "shared needs edge_key");
  auto empty = [&] { return at::empty({0}, q.options()); };
  const bool feats = ek.has_value() || ev.has_value();
  auto gq = need_q ? at::empty_like(q) : empty();
  auto gb = need_bias && bias.has_value() ? at::empty({E, H}, q.options()) : empty();
  auto gek = need_ek && ek.has_value() ? at::empty({E, H, C}, q.options()) : empty();
  auto gev = need_ev && ev.has_value() && !shared ? at::empty({E, H, C}, q.options()) : empty();
  // (p, ds) per edge are stored by pass 1 when they fit the budget (pass 2 then reads them
  // instead of recomputing two dot products and an exp per edge and head); above that, and
  // only without edge features, pass 2 recomputes them from (lse, D) and no per-edge buffer exists.
  const bool store_pds = need_kv && (feats || E * 2 * H <= g_max_stored_pds.load());
  const auto acc_opts = q.options().dtype(acc_dtype(q.scalar_type()));
  auto PDS = store_pds ? at::empty({E, 2 * H}, acc_opts) : empty();
  auto LD = need_kv && !store_pds ? at::empty({N, 2 * H}, acc_opts) : empty();
  at::Tensor gk = empty(), gv = empty();
  const int nt = num_threads_for(E * H * C);
  auto ptr = [](at::Tensor& t, auto tag) -> decltype(tag) {
    return t.numel() ? t.data_ptr<std::remove_pointer_t<decltype(tag)>>() : nullptr;
  };
  GA_DISPATCH(q.scalar_type(), "graphattn_fused_backward", [&] {
    using T = scalar_t;
    using A = acc_t<T>;
    const EdgeIn<T> ed = edge_inputs<T>(q, E, bias, ek, ev, eid);
    backward_rows_kernel<T>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), ed,
                            rowptr.data_ptr<int64_t>(), col.data_ptr<int64_t>(), lse.data_ptr<A>(),
                            dout.data_ptr<T>(), N, H, C, static_cast<A>(scale), ptr(gq, (T*)0),
                            ptr(gb, (T*)0), ptr(gek, (T*)0), ptr(gev, (T*)0), shared,
                            ptr(PDS, (A*)0), ptr(LD, (A*)0), nt);
    if (!need_kv) return;
    TORCH_CHECK(cptr.numel() == N + 1 && cperm.numel() == E && ctgt.numel() == E &&
                    cptr.scalar_type() == at::kLong && cperm.scalar_type() == ctgt.scalar_type() &&
                    cptr.is_contiguous() && cperm.is_contiguous() && ctgt.is_contiguous(),
                "CSC arrays have wrong sizes, dtypes or layout");
    gk = at::empty_like(q);
    gv = at::empty_like(q);
    auto run = [&](auto itag) {
      using I = std::remove_pointer_t<decltype(itag)>;
      backward_cols_kernel<T, I>(q.data_ptr<T>(), k.data_ptr<T>(), v.data_ptr<T>(), ed,
                                 dout.data_ptr<T>(), cptr.data_ptr<int64_t>(), cperm.data_ptr<I>(),
                                 ctgt.data_ptr<I>(), ptr(PDS, (A*)0), ptr(LD, (A*)0), N, H, C,
                                 static_cast<A>(scale), gk.data_ptr<T>(), gv.data_ptr<T>(), nt);
    };
    if (cperm.scalar_type() == at::kInt)
      run((int32_t*)nullptr);
    else
      run((int64_t*)nullptr);
  });
  return {gq, gk, gv, gb, gek, gev};
}

// Source-major copy of a CSR: (cptr (N+1) int64, cperm (E) CSR position, ctgt (E) target),
// by a stable counting sort (no argsort temporaries); int32 indices when E and N fit.
std::tuple<at::Tensor, at::Tensor, at::Tensor> build_csc(at::Tensor rowptr, at::Tensor col) {
  TORCH_CHECK(rowptr.scalar_type() == at::kLong && col.scalar_type() == at::kLong &&
                  rowptr.is_contiguous() && col.is_contiguous() && rowptr.numel() >= 1,
              "rowptr/col must be contiguous int64");
  const int64_t N = rowptr.numel() - 1, E = col.numel();
  const int64_t* rp = rowptr.data_ptr<int64_t>();
  const int64_t* cl = col.data_ptr<int64_t>();
  TORCH_CHECK(rp[0] == 0 && rp[N] == E, "rowptr does not match col");
  const bool small = std::max(N, E) <= std::numeric_limits<int32_t>::max();
  const auto itype = small ? at::kInt : at::kLong;
  auto cptr = at::empty({N + 1}, rowptr.options());
  auto cperm = at::empty({E}, rowptr.options().dtype(itype));
  auto ctgt = at::empty({E}, rowptr.options().dtype(itype));
  int64_t* cp = cptr.data_ptr<int64_t>();
  std::fill(cp, cp + N + 1, int64_t(0));
  for (int64_t e = 0; e < E; ++e) {
    TORCH_CHECK(cl[e] >= 0 && cl[e] < N, "col out of range");
    ++cp[cl[e] + 1];
  }
  for (int64_t j = 0; j < N; ++j) cp[j + 1] += cp[j];
  std::vector<int64_t> fill(cp, cp + N);
  auto run = [&](auto* perm, auto* tgt) {
    using I = std::remove_pointer_t<decltype(perm)>;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t e = rp[i]; e < rp[i + 1]; ++e) {
        const int64_t t = fill[cl[e]]++;
        perm[t] = static_cast<I>(e);
        tgt[t] = static_cast<I>(i);
      }
  };
  if (small)
    run(cperm.data_ptr<int32_t>(), ctgt.data_ptr<int32_t>());
  else
    run(cperm.data_ptr<int64_t>(), ctgt.data_ptr<int64_t>());
  return {cptr, cperm, ctgt};
}

}  // namespace

// torch.ops.graphattn_ea.forward(q, k, v, bias, ek, ev, eid, rowptr, col, scale, need_weights)
//     -> (out, lse, weights)
// torch.ops.graphattn_ea.backward(q, k, v, bias, ek, ev, eid, rowptr, col, cptr, cperm, ctgt,
//     lse, dout, scale, need_q, need_kv, need_bias, need_ek, need_ev, shared)
//     -> (gq, gk, gv, grad_bias, grad_ek, grad_ev)          (empty when not requested)
// torch.ops.graphattn_ea.build_csc(rowptr, col) -> (cptr, cperm, ctgt)
// torch.ops.graphattn_ea.set_pds_budget(elements) -> previous budget
int64_t set_pds_budget(int64_t elements) { return g_max_stored_pds.exchange(elements); }

TORCH_LIBRARY(graphattn_ea, m) {
  m.def("set_pds_budget", &set_pds_budget);
  m.def("forward", &forward);
  m.def("backward", &backward);
  m.def("build_csc", &build_csc);
}
