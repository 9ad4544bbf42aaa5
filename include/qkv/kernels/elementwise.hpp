#pragma once
/// @file
/// Elementwise kernels over raw pointers: flat maps, NumPy-broadcast binary maps, strided copies
/// and sum / max reductions along collapsed axes. No autograd here.
///
/// Every kernel splits its work by the output elements each thread writes, and reductions add in
/// a fixed order, so results are bitwise identical for any thread count. Loops run through
/// parallel_for (kernels/parallel.hpp), which forks only above kParallelMin elements of work.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "qkv/tensor/parallel.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::kernels {

/// Elements per parallel work item of the flat and broadcast maps.
inline constexpr std::size_t kChunk = 8192;

/// out[i] = f(a[i]) for i < n (out may alias a).
template <class TA, class TO, class F>
void map(const TA* a, TO* out, std::size_t n, F f) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, kChunk, [&](std::size_t c) {
    const std::size_t lo = std::size_t(c) * kChunk, hi = std::min(n, lo + kChunk);
    for (std::size_t i = lo; i < hi; ++i) out[i] = f(a[i]);
  });
}

/// out[i] = f(a[i], b[i]) for i < n (out may alias a or b).
template <class TA, class TB, class TO, class F>
void zip(const TA* a, const TB* b, TO* out, std::size_t n, F f) {
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, kChunk, [&](std::size_t c) {
    const std::size_t lo = std::size_t(c) * kChunk, hi = std::min(n, lo + kChunk);
    for (std::size_t i = lo; i < hi; ++i) out[i] = f(a[i], b[i]);
  });
}

/// GELU over n values, vectorised with xsimd (erf and tanh have no vectorised libm form):
/// exact y = x/2 (1 + erf(x / sqrt 2)), or with `tanh_approx`
/// y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); PyTorch's formulas.
template <class T>
void gelu_forward(const T* x, T* y, std::size_t n, bool tanh_approx);
/// gx = g * dGELU/dx(x) for the same two forms.
template <class T>
void gelu_backward(const T* g, const T* x, T* gx, std::size_t n, bool tanh_approx);

/// How two operands map onto a broadcast output, with dimensions collapsed: output dimensions of
/// size 1 are dropped and neighbours that both operands treat alike are merged, so (B, T, C) + (C)
/// becomes (B*T, C) with strides (0, 1) for the second operand, and equal shapes become one flat
/// dimension. Strides are in elements; 0 marks a broadcast dimension.
struct BroadcastPlan {
  std::size_t n = 0;          ///< output elements
  Shape dims;                 ///< collapsed output dimensions (at least one)
  Shape stride_a, stride_b;   ///< per collapsed dimension
};

/// Plan for operands of shapes `a` and `b` broadcast to `out` (the caller checked they broadcast).
BroadcastPlan broadcast_plan(const Shape& a, const Shape& b, const Shape& out);

/// out[i] = f(a[ia(i)], b[ib(i)]) over the (contiguous) output described by `p`.
template <class TA, class TB, class TO, class F>
void broadcast_map(const TA* a, const TB* b, TO* out, const BroadcastPlan& p, F f) {
  const std::size_t n = p.n, rank = p.dims.size(), inner = p.dims.back();
  const std::size_t sa = p.stride_a.back(), sb = p.stride_b.back();
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, kChunk, [&](std::size_t c) {
    std::size_t i = std::size_t(c) * kChunk;
    const std::size_t end = std::min(n, i + kChunk);
    while (i < end) {
      // One run along the innermost dimension: find where it starts in a and b.
      std::size_t row = i / inner;
      const std::size_t j = i % inner, len = std::min(inner - j, end - i);
      std::size_t oa = j * sa, ob = j * sb;
      for (std::size_t k = rank - 1; k-- > 0;) {
        const std::size_t idx = row % p.dims[k];
        row /= p.dims[k];
        oa += idx * p.stride_a[k];
        ob += idx * p.stride_b[k];
      }
      const TA* pa = a + oa;
      const TB* pb = b + ob;
      TO* po = out + i;
      if (sa && sb) {
        for (std::size_t t = 0; t < len; ++t) po[t] = f(pa[t], pb[t]);
      } else if (sa) {
        const TB vb = *pb;
        for (std::size_t t = 0; t < len; ++t) po[t] = f(pa[t], vb);
      } else if (sb) {
        const TA va = *pa;
        for (std::size_t t = 0; t < len; ++t) po[t] = f(va, pb[t]);
      } else {
        const TO v = f(*pa, *pb);
        std::fill(po, po + len, v);
      }
      i += len;
    }
  });
}

/// out (shape `out_shape`) = src (shape `src_shape`, which broadcasts to it) times `scale`.
template <class T>
void broadcast_to(const T* src, const Shape& src_shape, T* out, const Shape& out_shape, T scale);

/// out = sum of `in` (shape `shape`) over the dimensions d with reduce[d] (shape.size() flags);
/// out holds the kept dimensions in order. Fixed order of additions (independent of the thread
/// count).
template <class T>
void sum_axes(const T* in, const Shape& shape, const bool* reduce, T* out);

/// in (O, R, I) -> out (O, I): out[o, i] = sum over r of in[o, r, i], r ascending. For I == 1 the
/// order is fixed differently: blocks of 1024 values, each summed as 16 interleaved lanes.
template <class T>
void sum_middle(const T* in, T* out, std::size_t O, std::size_t R, std::size_t I);

/// in (O, R, I) -> out (O, I) maximum over r, arg[o, i] = the first r reaching it (NaN counts as
/// the maximum, like torch.max). R >= 1.
template <class T>
void max_middle(const T* in, T* out, std::int64_t* arg, std::size_t O, std::size_t R, std::size_t I);

/// O rows of `len` elements: dst[o * dst_stride + t] = src[o * src_stride + t].
template <class T>
void copy_rows(const T* src, std::size_t src_stride, T* dst, std::size_t dst_stride, std::size_t O,
               std::size_t len);

/// out = in (shape `shape`) with dimensions reordered: out.shape[i] = shape[perm[i]], for the
/// shape.size() entries of perm.
template <class T>
void permute(const T* in, const Shape& shape, const std::size_t* perm, T* out);

}  // namespace qkv::kernels
