#include "qkv/kernels/elementwise.hpp"
#include "qkv/tensor/parallel.hpp"

#include <cmath>
#include <cstring>

#include "simd.hpp"

namespace qkv::kernels {

BroadcastPlan broadcast_plan(const Shape& a, const Shape& b, const Shape& out) {
  BroadcastPlan p;
  p.n = numel(out);
  const std::size_t rank = out.size();
  // Per kept output dimension: whether a / b span it (else they repeat along it).
  xt::svector<std::pair<bool, bool>, 4> full;
  for (std::size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    const std::size_t da = d + a.size() >= rank ? a[d + a.size() - rank] : 1;
    const std::size_t db = d + b.size() >= rank ? b[d + b.size() - rank] : 1;
    const std::pair<bool, bool> f{da != 1, db != 1};
    if (!full.empty() && full.back() == f) {
      p.dims.back() *= out[d];
    } else {
      full.push_back(f);
      p.dims.push_back(out[d]);
    }
  }
  if (p.dims.empty()) {
    p.dims = {1};
    full.push_back({false, false});
  }
  p.stride_a.resize(p.dims.size());
  p.stride_b.resize(p.dims.size());
  std::size_t acc_a = 1, acc_b = 1;
  for (std::size_t k = p.dims.size(); k-- > 0;) {
    p.stride_a[k] = full[k].first ? acc_a : 0;
    p.stride_b[k] = full[k].second ? acc_b : 0;
    if (full[k].first) acc_a *= p.dims[k];
    if (full[k].second) acc_b *= p.dims[k];
  }
  return p;
}

namespace {

// PyTorch's constants (aten/src/ATen/native/cpu/Activation.cpp).
constexpr double kAlpha = M_SQRT1_2;                    // 1 / sqrt(2)
constexpr double kPdf = M_2_SQRTPI * M_SQRT1_2 * 0.5;   // 1 / sqrt(2 pi)
constexpr double kTanhBeta = M_SQRT2 * M_2_SQRTPI * 0.5;  // sqrt(2 / pi)
constexpr double kKappa = 0.044715;

// out[i] = f(batch of a[i], batch of b[i]) in SIMD batches; the tail is a padded partial batch.
template <class T, class F>
void simd_zip(const T* a, const T* b, T* out, std::size_t n, F f) {
  using B = simd::Batch<T>;
  constexpr std::size_t W = simd::width<T>;
  const std::size_t chunks = (n + kChunk - 1) / kChunk;
  parallel_for(chunks, kChunk, [&](std::size_t c) {
    std::size_t i = std::size_t(c) * kChunk;
    const std::size_t end = std::min(n, i + kChunk);
    for (; i + W <= end; i += W)
      f(B::load_unaligned(a + i), B::load_unaligned(b + i)).store_unaligned(out + i);
    if (i < end)
      simd::store_tail(
          f(simd::load_tail(a + i, end - i, T(0)), simd::load_tail(b + i, end - i, T(0))), out + i,
          end - i);
  });
}

// erf(z) and exp(-z^2) together. float: Abramowitz and Stegun 7.1.26, |error| <= 1.5e-7 (the
// approximation PyTorch's vectorised float erf uses), whose exp(-z^2) is also the Gaussian pdf's
// factor that GELU's backward needs; one exp per element instead of xsimd::erf's two branches.
// double: xsimd::erf (to the last bits: the float64 gradient checks run on it).
template <class T>
struct ErfExp {
  simd::Batch<T> erf, exp_neg_sq;
};
template <class T>
ErfExp<T> erf_exp(const simd::Batch<T>& z) {
  using B = simd::Batch<T>;
  const B e = xsimd::exp(-(z * z));
  if constexpr (std::is_same_v<T, float>) {
    const B t = B(1.f) / xsimd::fma(B(0.3275911f), xsimd::abs(z), B(1.f));
    B p = xsimd::fma(B(1.061405429f), t, B(-1.453152027f));
    p = xsimd::fma(p, t, B(1.421413741f));
    p = xsimd::fma(p, t, B(-0.284496736f));
    p = xsimd::fma(p, t, B(0.254829592f));
    const B r = xsimd::fnma(p * t, e, B(1.f));  // 1 - poly(t) t exp(-z^2), for |z|
    return {xsimd::select(z < B(0.f), -r, r), e};
  } else {
    return {xsimd::erf(z), e};
  }
}

}  // namespace

template <class T>
void gelu_forward(const T* x, T* y, std::size_t n, bool tanh_approx) {
  using B = simd::Batch<T>;
  if (tanh_approx)
    simd_zip(x, x, y, n, [](const B& v, const B&) {
      return B(T(0.5)) * v * (B(T(1)) + xsimd::tanh(B(T(kTanhBeta)) * (v + B(T(kKappa)) * v * v * v)));
    });
  else
    simd_zip(x, x, y, n, [](const B& v, const B&) {
      return v * B(T(0.5)) * (B(T(1)) + erf_exp<T>(v * B(T(kAlpha))).erf);
    });
}

template <class T>
void gelu_backward(const T* g, const T* x, T* gx, std::size_t n, bool tanh_approx) {
  using B = simd::Batch<T>;
  const B half(T(0.5)), one(T(1));
  if (tanh_approx)
    simd_zip(g, x, gx, n, [=](const B& gv, const B& v) {
      const B t = xsimd::tanh(B(T(kTanhBeta)) * (v + B(T(kKappa)) * v * v * v));
      const B left_derivative = half * (one + t);
      const B right_derivative = half * v * (one - t * t);
      const B inner_derivative = B(T(kTanhBeta)) * (one + B(T(3)) * B(T(kKappa)) * v * v);
      return gv * (left_derivative + right_derivative * inner_derivative);
    });
  else
    simd_zip(g, x, gx, n, [=](const B& gv, const B& v) {
      const ErfExp<T> ee = erf_exp<T>(v * B(T(kAlpha)));  // exp(-(v / sqrt 2)^2) = exp(-v^2 / 2)
      const B cdf = half * (one + ee.erf);
      const B pdf = ee.exp_neg_sq * B(T(kPdf));
      return gv * (cdf + v * pdf);
    });
}

template <class T>
void broadcast_to(const T* src, const Shape& src_shape, T* out, const Shape& out_shape, T scale) {
  BroadcastPlan p = broadcast_plan(src_shape, src_shape, out_shape);
  if (scale == T(1))
    broadcast_map(src, src, out, p, [](T x, T) { return x; });
  else
    broadcast_map(src, src, out, p, [scale](T x, T) { return x * scale; });
}

template <class T>
void sum_middle(const T* in, T* out, std::size_t O, std::size_t R, std::size_t I) {
  if (R == 0) {
    std::fill(out, out + O * I, T(0));
    return;
  }
  if (I == 1) {
    // Contiguous rows. Blocks of kBlock values are summed, then the block sums in order: the same additions whether rows or blocks are spread over threads, and a smaller
    // rounding error than one running sum over a long row.
    static constexpr std::size_t kBlock = 1024;
    // Within a block, kLanes interleaved running sums (lane j takes elements j, j + kLanes, ...)
    // let the compiler vectorise without reassociating anything; lanes are added in order.
    static constexpr std::size_t kLanes = 16;
    auto block_sum = [in, R](std::size_t o, std::size_t blk) {
      const T* p = in + o * R + blk * kBlock;
      const std::size_t len = std::min(kBlock, R - blk * kBlock);
      T lanes[kLanes] = {};
      std::size_t t = 0;
      for (; t + kLanes <= len; t += kLanes)
        for (std::size_t j = 0; j < kLanes; ++j) lanes[j] += p[t + j];
      for (std::size_t j = 0; t < len; ++t, ++j) lanes[j] += p[t];
      T s = T(0);
      for (std::size_t j = 0; j < kLanes; ++j) s += lanes[j];
      return s;
    };
    const std::size_t blocks = (R + kBlock - 1) / kBlock;
    if (O == 1 && blocks > 1) {
      PooledVector<T> partial(blocks);
      parallel_for(blocks, kBlock, [&](std::size_t blk) {
        partial[std::size_t(blk)] = block_sum(0, std::size_t(blk));
      });
      T s = T(0);
      for (T v : partial) s += v;
      out[0] = s;
    } else {
      parallel_for(O, R, [&](std::size_t o) {
        T s = T(0);
        for (std::size_t blk = 0; blk < blocks; ++blk) s += block_sum(std::size_t(o), blk);
        out[o] = s;
      });
    }
    return;
  }
  // Rows of I values: out[o, :] accumulates in[o, r, :] for r ascending, in column tiles so that
  // threads can split (O, tile) pairs; the inner loop vectorises.
  static constexpr std::size_t kTile = 64;
  const std::size_t tiles = (I + kTile - 1) / kTile;
  parallel_for(O * tiles, R * kTile, [&](std::size_t w) {
    const std::size_t o = std::size_t(w) / tiles, i0 = (std::size_t(w) % tiles) * kTile;
    const std::size_t len = std::min(kTile, I - i0);
    T* dst = out + o * I + i0;
    const T* src = in + o * R * I + i0;
    std::copy(src, src + len, dst);
    for (std::size_t r = 1; r < R; ++r) {
      const T* row = src + r * I;
      for (std::size_t t = 0; t < len; ++t) dst[t] += row[t];
    }
  });
}

template <class T>
void sum_axes(const T* in, const Shape& shape, const bool* reduce, T* out) {
  // Collapse into alternating kept / reduced groups (size-1 dimensions do not matter), then sum
  // one reduced group per pass, innermost first.
  Shape sizes;
  xt::svector<bool, 4> reduced;
  std::size_t n_out = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!reduce[d]) n_out *= shape[d];
    if (shape[d] == 1) continue;
    if (!sizes.empty() && reduced.back() == reduce[d]) {
      sizes.back() *= shape[d];
    } else {
      sizes.push_back(shape[d]);
      reduced.push_back(reduce[d]);
    }
  }
  if (numel(shape) == 0) {
    std::fill(out, out + n_out, T(0));
    return;
  }
  std::size_t passes = std::count(reduced.begin(), reduced.end(), true);
  if (passes == 0) {
    std::copy(in, in + n_out, out);
    return;
  }
  Array<T> buffers[2];
  const T* src = in;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    std::size_t k = reduced.size();
    while (!reduced[--k]) {
    }
    std::size_t O = 1, I = 1;
    for (std::size_t q = 0; q < k; ++q) O *= sizes[q];
    for (std::size_t q = k + 1; q < sizes.size(); ++q) I *= sizes[q];
    T* dst = out;
    if (pass + 1 < passes) {
      buffers[pass % 2] = Array<T>::from_shape({O * I});
      dst = buffers[pass % 2].data();
    }
    sum_middle(src, dst, O, sizes[k], I);
    src = dst;
    sizes.erase(sizes.begin() + long(k));
    reduced.erase(reduced.begin() + long(k));
  }
}

template <class T>
void max_middle(const T* in, T* out, std::int64_t* arg, std::size_t O, std::size_t R, std::size_t I) {
  parallel_for(O * I, R, [&](std::size_t w) {
    const std::size_t o = std::size_t(w) / I, i = std::size_t(w) % I;
    const T* p = in + o * R * I + i;
    T best = p[0];
    std::size_t at = 0;
    for (std::size_t r = 1; r < R && !std::isnan(best); ++r) {
      const T v = p[r * I];
      if (v > best || std::isnan(v)) {
        best = v;
        at = r;
      }
    }
    out[w] = best;
    arg[w] = std::int64_t(at);
  });
}

template <class T>
void copy_rows(const T* src, std::size_t src_stride, T* dst, std::size_t dst_stride, std::size_t O,
               std::size_t len) {
  if (len == 0) return;  // empty rows: src/dst may be null, which memcpy does not allow
  parallel_for(O, len, [&](std::size_t o) {
    std::memcpy(dst + std::size_t(o) * dst_stride, src + std::size_t(o) * src_stride,
                len * sizeof(T));
  });
}

template <class T>
void permute(const T* in, const Shape& shape, const std::size_t* perm, T* out) {
  if (numel(shape) == 0) return;  // nothing to move (and the strides below would divide by 0)
  // Input strides seen in output order, with size-1 dimensions dropped and output neighbours
  // that are also neighbours in the input merged: (B, T, H, D) -> (B, H, T, D) keeps D as a
  // contiguous inner run.
  Shape in_strides(shape.size());
  std::size_t acc = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    in_strides[d] = acc;
    acc *= shape[d];
  }
  Shape dims, strides;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::size_t size = shape[perm[i]], stride = in_strides[perm[i]];
    if (size == 1) continue;
    if (!dims.empty() && strides.back() == stride * size) {
      dims.back() *= size;
      strides.back() = stride;
    } else {
      dims.push_back(size);
      strides.push_back(stride);
    }
  }
  const std::size_t n = numel(shape);
  if (dims.empty()) {
    std::copy(in, in + n, out);
    return;
  }
  const std::size_t rank = dims.size(), inner = dims.back(), s_inner = strides.back();
  if (rank >= 2 && s_inner != 1 && strides[rank - 2] == 1) {
    // A transpose of the last two (collapsed) dimensions: copy kTile x kTile tiles, so that both
    // the rows read and the rows written stay in cache.
    static constexpr std::size_t kTile = 32;
    const std::size_t A = dims[rank - 2], planes = n / (A * inner), a_tiles = (A + kTile - 1) / kTile;
    parallel_for(planes * a_tiles, kTile * inner, [&](std::size_t w) {
      std::size_t plane = std::size_t(w) / a_tiles, base = 0;
      const std::size_t a0 = (std::size_t(w) % a_tiles) * kTile, a1 = std::min(A, a0 + kTile);
      T* dst = out + (std::size_t(w) / a_tiles) * A * inner;
      for (std::size_t k = rank - 2; k-- > 0;) {
        base += (plane % dims[k]) * strides[k];
        plane /= dims[k];
      }
      for (std::size_t b0 = 0; b0 < inner; b0 += kTile) {
        const std::size_t b1 = std::min(inner, b0 + kTile);
        for (std::size_t a = a0; a < a1; ++a) {
          const T* src = in + base + a;
          T* row = dst + a * inner;
          for (std::size_t b = b0; b < b1; ++b) row[b] = src[b * s_inner];
        }
      }
    });
    return;
  }
  // Rows of `inner` elements, kRows per task: the first row's offset by division, the next ones
  // by an odometer over the outer dimensions (a division per row cost more than copying a row of
  // 16 floats, the head split of a small model).
  static constexpr std::size_t kRows = 64;
  const std::size_t rows = n / inner, outer = rank - 1;
  parallel_for((rows + kRows - 1) / kRows, kRows * inner, [&](std::size_t c) {
    const std::size_t r0 = c * kRows, r1 = std::min(rows, r0 + kRows);
    Shape idx(outer, 0);  // inline storage up to rank 4: no allocation
    std::size_t offset = 0, row = r0;
    for (std::size_t k = outer; k-- > 0;) {
      idx[k] = row % dims[k];
      offset += idx[k] * strides[k];
      row /= dims[k];
    }
    for (std::size_t r = r0; r < r1; ++r) {
      const T* src = in + offset;
      T* dst = out + r * inner;
      if (s_inner == 1) {
#pragma omp simd
        for (std::size_t t = 0; t < inner; ++t) dst[t] = src[t];
      } else {
        for (std::size_t t = 0; t < inner; ++t) dst[t] = src[t * s_inner];
      }
      for (std::size_t k = outer; k-- > 0;) {  // next row: advance the last outer index, carry
        offset += strides[k];
        if (++idx[k] < dims[k]) break;
        offset -= dims[k] * strides[k];
        idx[k] = 0;
      }
    }
  });
}

#define QKV_INSTANTIATE(T)                                                                          \
  template void gelu_forward<T>(const T*, T*, std::size_t, bool);                                   \
  template void gelu_backward<T>(const T*, const T*, T*, std::size_t, bool);                        \
  template void broadcast_to<T>(const T*, const Shape&, T*, const Shape&, T);                       \
  template void sum_middle<T>(const T*, T*, std::size_t, std::size_t, std::size_t);                 \
  template void sum_axes<T>(const T*, const Shape&, const bool*, T*);                               \
  template void max_middle<T>(const T*, T*, std::int64_t*, std::size_t, std::size_t, std::size_t);  \
  template void copy_rows<T>(const T*, std::size_t, T*, std::size_t, std::size_t, std::size_t);     \
  template void permute<T>(const T*, const Shape&, const std::size_t*, T*);
QKV_INSTANTIATE(float)
QKV_INSTANTIATE(double)
#undef QKV_INSTANTIATE

}  // namespace qkv::kernels
