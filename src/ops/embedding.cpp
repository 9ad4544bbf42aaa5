#include "qkv/ops/embedding.hpp"
#include "qkv/tensor/parallel.hpp"

#include <algorithm>
#include <vector>

namespace qkv {
namespace {

// "(1, 3)": the multi-index of flat position `flat` in `shape`.
std::string position_str(const IndexArray::shape_type& shape, std::size_t flat) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return shape_str(Shape(idx.begin(), idx.end()));
}

}  // namespace

template <class T>
Variable<T> embedding(const Variable<T>& weight, const IndexArray& ids) {
  if (weight.ndim() != 2)
    throw ShapeError("embedding: weight of shape " + shape_str(weight.shape()) + " is not a (V, C) matrix");
  const std::size_t V = weight.dim(0), C = weight.dim(1), n = ids.size();
  const Index* id = ids.data();
  for (std::size_t i = 0; i < n; ++i)
    if (id[i] < 0 || std::size_t(id[i]) >= V)
      throw ValueError("embedding: id " + std::to_string(id[i]) + " at position " + position_str(ids.shape(), i) +
                       " of ids " + shape_str(ids.shape()) + " is outside the vocabulary [0, " + std::to_string(V) + ")");

  Shape out_shape(ids.shape().begin(), ids.shape().end());
  out_shape.push_back(C);
  Array<T> out = Array<T>::from_shape(out_shape);
  const T* W = weight.data();
  T* O = out.data();
  parallel_for(n, C, [&](std::size_t i) {
    std::copy_n(W + std::size_t(id[i]) * C, C, O + std::size_t(i) * C);
  });

  return record_op<T>("embedding", std::move(out), needs_grad(weight), [weight = weight.without_value(), ids, V, C](const Array<T>& gy) {
    // out[i] = weight[id_i], so dweight[v] = sum of dout[i] over the positions i with id_i = v.
    // Several positions may share an id, so threads split the ids, not the positions: a stable
    // counting sort groups the positions by id (in position order), then each weight row is
    // summed by one thread, in position order -- the same sums for any thread count.
    const Index* id = ids.data();
    const std::size_t n = ids.size();
    PooledVector<std::size_t> start(V + 1, 0), order(n);
    for (std::size_t i = 0; i < n; ++i) ++start[std::size_t(id[i]) + 1];
    for (std::size_t v = 0; v < V; ++v) start[v + 1] += start[v];
    PooledVector<std::size_t> next(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < n; ++i) order[next[std::size_t(id[i])]++] = i;

    Array<T> gw = zeros<T>({V, C});
    const T* G = gy.data();
    T* GW = gw.data();
    parallel_for(V, n * C / std::max<std::size_t>(V, 1) + 1, [&](std::size_t v) {
      T* dst = GW + std::size_t(v) * C;
      for (std::size_t k = start[std::size_t(v)]; k < start[std::size_t(v) + 1]; ++k) {
        const T* src = G + order[k] * C;
#pragma omp simd
        for (std::size_t j = 0; j < C; ++j) dst[j] += src[j];
      }
    });
    weight.accumulate_grad(std::move(gw), "embedding");
  });
}

template Variable<float> embedding(const Variable<float>&, const IndexArray&);
template Variable<double> embedding(const Variable<double>&, const IndexArray&);

}  // namespace qkv
