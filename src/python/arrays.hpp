#pragma once
// numpy arrays and qkv arrays, both ways, for the Python module.
//
// Out of qkv: no copy. A numpy array is made over the buffer of a qkv value, and its base object
// (a capsule) holds what owns that buffer (a Variable handle, or the Array itself moved to the
// heap), so the buffer lives exactly as long as Python uses it and then goes back to qkv's pool.
// Into qkv: one copy into pooled memory (qkv's ops own their inputs), with the dtype converted.
// Every function here needs the GIL.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file of the module: one meaning for each converted type

#include <string>
#include <utility>

#include "qkv/autograd/variable.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv::python {
namespace py = pybind11;

/// Row-major strides in bytes of `shape` for elements of `itemsize` bytes.
std::vector<py::ssize_t> c_strides(const Shape& shape, std::size_t itemsize);

/// A numpy float32 array over v's value, without a copy; its base keeps a handle to v (so the
/// value stays alive while the array does). `writeable` false makes a read-only view.
py::array_t<float> view(const Variable<float>& v, bool writeable = true);

/// `a` moved into a numpy array (its buffer, without a copy).
template <class T, class A>
py::array_t<T> adopt(A&& a) {
  using Owned = std::decay_t<A>;
  auto* owned = new Owned(std::forward<A>(a));
  py::capsule base(owned, [](void* p) { delete static_cast<Owned*>(p); });
  return py::array_t<T>(std::vector<py::ssize_t>(owned->shape().begin(), owned->shape().end()),
                        c_strides(Shape(owned->shape().begin(), owned->shape().end()), sizeof(T)), owned->data(), base);
}

/// A qkv float array holding a copy of `a` (any numeric dtype; converted to float32).
Array<float> float_array(const py::array& a);

/// A (rows, T) int64 array from a Python object: a numpy integer array or nested sequences of
/// ints, of `ndim` dimensions (1 is taken as one row). TypeError/ValueError naming `what`, the
/// expected and the found dtype or shape.
IndexArray index_array(const py::handle& obj, const std::string& what);

/// The shape as Python writes it: "(1, 4, 5, 32)".
std::string shape_text(const std::vector<py::ssize_t>& shape);

}  // namespace qkv::python
