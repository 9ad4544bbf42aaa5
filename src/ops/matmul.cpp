#include "qkv/ops/matmul.hpp"

#include "qkv/kernels/bf16.hpp"
#include "qkv/kernels/blas.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv {
namespace {

using kernels::Bf16Buffer;
using kernels::gemm;
using kernels::gemm_serial;
using kernels::Operand;

// A product's operand: v's bfloat16 copy when the product is lowered (kernels/bf16.hpp), else its
// values (none when this handle does not hold them).
template <class T>
Operand<T> operand(const T* values, const Bf16Buffer& low) {
  return low.empty() ? Operand<T>{values} : Operand<T>{nullptr, low.data()};
}
template <class T>
Operand<T> operand(const Variable<T>& v, const Bf16Buffer& low) {
  return operand(v.holds_value() ? v.data() : nullptr, low);
}

enum class Batching { Equal, SharedB, SharedA };

// Run `body(i)` for every batch entry: the batch loop in parallel (one thread per GEMM) when there
// are enough entries for every thread, else one after the other with GEMMs split across threads.
template <class F>
void for_each_batch(std::size_t batch, F&& body) {
  if (batch >= std::size_t(num_threads()) && !in_parallel()) {
    parallel_for(batch, kParallelMin,
                 [&](std::size_t i) { body(i, true); });  // a GEMM per index: always worth a thread
  } else {
    for (std::size_t i = 0; i < batch; ++i) body(i, false);
  }
}

template <class T>
void mm(bool serial, bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, Operand<T> A,
        std::size_t lda, Operand<T> B, std::size_t ldb, T beta, T* C, std::size_t ldc) {
  if (serial)
    gemm_serial<T>(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
  else
    gemm<T>(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

template <class T>
Variable<T> matmul(const Variable<T>& a, const Variable<T>& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  auto fail = [&](const std::string& why) {
    throw ShapeError("matmul: cannot multiply shapes " + shape_str(sa) + " and " + shape_str(sb) +
                     ": " + why);
  };
  if (sa.size() < 2 || sb.size() < 2) fail("both operands need at least 2 dimensions");
  const std::size_t M = sa[sa.size() - 2], K = sa.back(), N = sb.back();
  if (sb[sb.size() - 2] != K)
    fail("inner dimensions " + std::to_string(K) + " and " + std::to_string(sb[sb.size() - 2]) + " differ");

  // a (..., M, K) @ b (..., K, N): batch dims equal, or one side is a plain matrix.
  Batching mode;
  Shape out_shape;
  if (sb.size() == 2) {
    mode = Batching::SharedB;
    out_shape = sa;
  } else if (sa.size() == 2) {
    mode = Batching::SharedA;
    out_shape = sb;
    out_shape[out_shape.size() - 2] = M;
  } else {
    if (sa.size() != sb.size() || !std::equal(sa.begin(), sa.end() - 2, sb.begin()))
      fail("batch dimensions must be equal, or one operand must be 2-D");
    mode = Batching::Equal;
    out_shape = sa;
  }
  out_shape.back() = N;
  std::size_t batch = 1;  // product of the leading dims (not numel / (M * N): M or N may be 0)
  for (std::size_t d = 0; d + 2 < out_shape.size(); ++d) batch *= out_shape[d];

  Array<T> c = Array<T>::from_shape(out_shape);
  const bool low = kernels::lower_products<T>();  // bf16: a and b rounded once, kept for the backward
  Bf16Buffer al = kernels::lowered(a.data(), a.size(), low), bl = kernels::lowered(b.data(), b.size(), low);
  const Operand<T> A = operand(a, al), B = operand(b, bl);
  T* C = c.data();
  if (mode == Batching::SharedB) {
    // Fold the batch into the rows: one (batch*M, K) @ (K, N) GEMM.
    gemm<T>(false, false, batch * M, N, K, T(1), A, K, B, N, T(0), C, N);
  } else {
    const std::size_t sa_step = mode == Batching::SharedA ? 0 : M * K;
    for_each_batch(batch, [&](std::size_t i, bool serial) {
      mm<T>(serial, false, false, M, N, K, A + i * sa_step, K, B + i * K * N, N, T(0), C + i * M * N, N);
    });
  }

  return record_op<T>("matmul", std::move(c), needs_grad(a, b),
                      // dA reads B, dB reads A: keep only the values a gradient needs.
                      [a = b.requires_grad() && !low ? a : a.without_value(), b = a.requires_grad() && !low ? b : b.without_value(),
                       al = b.requires_grad() ? std::move(al) : Bf16Buffer(), bl = a.requires_grad() ? std::move(bl) : Bf16Buffer(),
                       low, mode, batch, M, N, K](const Array<T>& gc) {
    // In the forward pass C = A @ B, so dA = dC @ B^T and dB = A^T @ dC, per batch entry; a shared
    // operand sums the products of every batch entry.
    const Bf16Buffer gl = kernels::lowered(gc.data(), gc.size(), low);
    const Operand<T> G = operand(gc.data(), gl), A = operand(a, al), B = operand(b, bl);
    if (a.requires_grad()) {
      Array<T> ga = Array<T>::from_shape(a.shape());
      T* GA = ga.data();
      if (mode == Batching::SharedB) {
        gemm<T>(false, true, batch * M, K, N, T(1), G, N, B, N, T(0), GA, K);
      } else if (mode == Batching::Equal) {
        for_each_batch(batch, [&](std::size_t i, bool serial) {
          mm<T>(serial, false, true, M, K, N, G + i * M * N, N, B + i * K * N, N, T(0), GA + i * M * K, K);
        });
      } else {  // SharedA: sum over the batch, in order
        for (std::size_t i = 0; i < batch; ++i)
          gemm<T>(false, true, M, K, N, T(1), G + i * M * N, N, B + i * K * N, N, T(i ? 1 : 0), GA, K);
      }
      a.accumulate_grad(std::move(ga), "matmul");
    }
    if (b.requires_grad()) {
      Array<T> gb = Array<T>::from_shape(b.shape());
      T* GB = gb.data();
      if (mode == Batching::SharedB) {
        gemm<T>(true, false, K, N, batch * M, T(1), A, K, G, N, T(0), GB, N);
      } else {
        const std::size_t sa_step = mode == Batching::SharedA ? 0 : M * K;
        for_each_batch(batch, [&](std::size_t i, bool serial) {
          mm<T>(serial, true, false, K, N, M, A + i * sa_step, K, G + i * M * N, N, T(0), GB + i * K * N, N);
        });
      }
      b.accumulate_grad(std::move(gb), "matmul");
    }
  });
}

template <class T>
Variable<T> linear(const Variable<T>& x, const Variable<T>& weight, const Variable<T>& bias) {
  const Shape& sx = x.shape();
  const Shape& sw = weight.shape();
  if (sw.size() != 2 || sx.empty() || sx.back() != sw[1])
    throw ShapeError("linear: input of shape " + shape_str(sx) + " does not fit weight of shape " +
                     shape_str(sw) + " (expected input (..., " + (sw.size() == 2 ? std::to_string(sw[1]) : "in") +
                     ") and weight (out, in))");
  const std::size_t in = sw[1], out = sw[0], rows = numel(Shape(sx.begin(), sx.end() - 1));  // in may be 0
  if (bias.defined() && (bias.ndim() != 1 || bias.dim(0) != out))
    throw ShapeError("linear: bias of shape " + shape_str(bias.shape()) + " does not fit weight of shape " +
                     shape_str(sw) + " (expected (" + std::to_string(out) + "))");

  Shape out_shape = sx;
  out_shape.back() = out;
  Array<T> y = Array<T>::from_shape(out_shape);
  const bool low = kernels::lower_products<T>();  // bf16: x and W rounded once, kept for the backward
  T beta = T(0);
  if (bias.defined() && !low) {  // (bf16 products add the bias themselves)
    const T* b = bias.data();
    T* Y = y.data();
    parallel_for(rows, out, [&](std::size_t r) { std::copy(b, b + out, Y + r * out); });
    beta = T(1);
  }
  Bf16Buffer xl = kernels::lowered(x.data(), x.size(), low), wl = kernels::lowered(weight.data(), weight.size(), low);
  gemm<T>(false, true, rows, out, in, T(1), operand(x, xl), in, operand(weight, wl), in, beta, y.data(), out,
          low && bias.defined() ? bias.data() : nullptr);

  const bool grad = bias.defined() ? needs_grad(x, weight, bias) : needs_grad(x, weight);
  return record_op<T>("linear", std::move(y), grad,
                      // dx reads W, dW reads x, db reads neither: keep only the values a gradient needs.
                      [x = weight.requires_grad() && !low ? x : x.without_value(),
                       weight = x.requires_grad() && !low ? weight : weight.without_value(),
                       xl = weight.requires_grad() ? std::move(xl) : Bf16Buffer(),
                       wl = x.requires_grad() ? std::move(wl) : Bf16Buffer(), low,
                       bias = bias.defined() ? bias.without_value() : bias, rows, in, out](const Array<T>& gy) {
    // y = x W^T + b: dx = dy W, dW = dy^T x, db = sum of dy over rows (bf16: summed as dy is rounded).
    const T* G = gy.data();
    const bool db = bias.defined() && bias.requires_grad();
    Array<T> gb = db ? zeros<T>(bias.shape()) : Array<T>();
    const Bf16Buffer gl = kernels::lowered(G, rows, out, low, db ? gb.data() : nullptr);
    // Both products go straight into the gradients (beta 1 when one is there already: the
    // input of the q, k and v projections collects three).
    x.accumulate_grad_into([&](T* dx, bool add) {
      gemm<T>(false, false, rows, in, out, T(1), operand(G, gl), out, operand(weight, wl), in, T(add), dx, in);
    }, "linear");
    weight.accumulate_grad_into([&](T* dw, bool add) {
      gemm<T>(true, false, out, in, rows, T(1), operand(G, gl), out, operand(x, xl), in, T(add), dw, in);
    }, "linear");
    if (db) {
      T* GB = gb.data();
      for (std::size_t r = 0; r < rows && !low; ++r)
        for (std::size_t j = 0; j < out; ++j) GB[j] += G[r * out + j];
      bias.accumulate_grad(std::move(gb), "linear");
    }
  });
}

template Variable<float> matmul(const Variable<float>&, const Variable<float>&);
template Variable<double> matmul(const Variable<double>&, const Variable<double>&);
template Variable<float> linear(const Variable<float>&, const Variable<float>&, const Variable<float>&);
template Variable<double> linear(const Variable<double>&, const Variable<double>&, const Variable<double>&);

}  // namespace qkv
