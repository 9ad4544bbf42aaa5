#include "arrays.hpp"

#include <algorithm>
#include <cstring>

namespace qkv::python {

std::vector<py::ssize_t> c_strides(const Shape& shape, std::size_t itemsize) {
  std::vector<py::ssize_t> strides(shape.size());
  py::ssize_t s = py::ssize_t(itemsize);
  for (std::size_t d = shape.size(); d-- > 0;) {
    strides[d] = s;
    s *= py::ssize_t(shape[d]);
  }
  return strides;
}

std::string shape_text(const std::vector<py::ssize_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

py::array_t<float> view(const Variable<float>& v, bool writeable) {
  auto* handle = new Variable<float>(v);  // one more handle on the same value: no copy
  py::capsule base(handle, [](void* p) { delete static_cast<Variable<float>*>(p); });
  const Array<float>& a = handle->value();
  const Shape shape(a.shape().begin(), a.shape().end());
  py::array_t<float> out(std::vector<py::ssize_t>(shape.begin(), shape.end()), c_strides(shape, sizeof(float)),
                         a.data(), base);
  if (!writeable) py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return out;
}

Array<float> float_array(const py::array& a) {
  auto c = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!c) throw py::type_error("expected an array of numbers, found dtype " + std::string(py::str(a.dtype())));
  Shape shape(c.shape(), c.shape() + c.ndim());
  Array<float> out = Array<float>::from_shape(shape);
  if (c.size()) std::memcpy(out.data(), c.data(), std::size_t(c.size()) * sizeof(float));
  return out;
}

IndexArray index_array(const py::handle& obj, const std::string& what) {
  py::array raw = py::array::ensure(obj);
  if (!raw) throw py::type_error(what + ": expected token ids (a list of ints or an integer array), found " +
                                 std::string(py::str(py::type::of(obj).attr("__name__"))));
  if (raw.size() > 0 && !(raw.dtype().kind() == 'i' || raw.dtype().kind() == 'u'))
    throw py::type_error(what + ": expected integer token ids, found dtype " + std::string(py::str(raw.dtype())));
  if (raw.ndim() != 1 && raw.ndim() != 2)
    throw py::value_error(what + ": expected token ids of shape (T,) or (B, T), found shape " +
                          shape_text(std::vector<py::ssize_t>(raw.shape(), raw.shape() + raw.ndim())));
  auto ids = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>::ensure(raw);
  const std::size_t B = raw.ndim() == 2 ? std::size_t(raw.shape(0)) : 1;
  const std::size_t T = std::size_t(raw.shape(raw.ndim() - 1));
  if (B == 0 || T == 0)
    throw py::value_error(what + ": expected at least one token, found shape " +
                          shape_text(std::vector<py::ssize_t>(raw.shape(), raw.shape() + raw.ndim())));
  IndexArray out = IndexArray::from_shape({B, T});
  std::memcpy(out.data(), ids.data(), B * T * sizeof(std::int64_t));
  return out;
}

}  // namespace qkv::python
