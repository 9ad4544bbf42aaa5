#pragma once
/// @file
/// Variable: a tensor value, its gradient, and whether it requires one. A Variable is a handle
/// (copies share the same value and gradient, like a torch.Tensor).
///
/// Ops build their output with record_op(): the forward math produces the value, and the backward
/// closure, written right under it, adds (+=) into the gradients of the inputs that require one.
///
/// A closure captures only what its backward needs (Flashlight's withoutData()): an input whose
/// value the backward does not read is captured as x.without_value(), a handle that routes the
/// gradient but does not keep the value alive. A value lives while some handle holding it does
/// (the forward's Variables, closures that read it); then its buffer returns to the pool, even
/// though the gradient node lives on until backward has passed through it.

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "qkv/autograd/tape.hpp"
#include "qkv/tensor/tensor.hpp"

namespace qkv {

namespace detail {
template <class T>
struct Node {
  Array<T> value;  // freed when value_refs drops to 0
  Shape shape;     // of the value, also once it is freed
  std::uint32_t value_refs = 0;  // handles that hold the value
  Array<T> grad;
  bool has_grad = false;
  bool requires_grad = false;
  bool retain_grad = false;
  const char* op = nullptr;       // the op that produced it; nullptr for a leaf
  std::uint64_t generation = 0;   // tape generation at the time it was recorded
};

// Nodes (with their shared_ptr control block) come from the tensor pool: a step creates the same
// nodes as the previous one, so they come back from its exact-size free lists.
template <class T>
std::shared_ptr<Node<T>> make_node() {
  return std::allocate_shared<Node<T>>(Allocator<Node<T>>());
}
}  // namespace detail

template <class T>
class Variable {
 public:
  using value_type = T;

  /// An undefined Variable (defined() is false).
  Variable() = default;
  /// A leaf holding `value`.
  explicit Variable(Array<T> value, bool requires_grad = false) : node_(detail::make_node<T>()), holds_value_(true) {
    node_->value = std::move(value);
    node_->shape = node_->value.shape();
    node_->value_refs = 1;
    node_->requires_grad = requires_grad;
  }
  Variable(const Variable& other) : node_(other.node_), holds_value_(other.holds_value_) {
    if (holds_value_) ++node_->value_refs;
  }
  Variable(Variable&& other) noexcept : node_(std::move(other.node_)), holds_value_(other.holds_value_) {
    other.holds_value_ = false;
  }
  Variable& operator=(const Variable& other) {
    Variable copy(other);
    return *this = std::move(copy);
  }
  Variable& operator=(Variable&& other) noexcept {
    if (this != &other) {
      release_value();
      node_ = std::move(other.node_);
      holds_value_ = other.holds_value_;
      other.holds_value_ = false;
    }
    return *this;
  }
  ~Variable() { release_value(); }

  /// The same gradient node without the value: backward can add into its gradient, but reading
  /// value(), data() or item() throws, and the value is freed once no other handle holds it.
  Variable without_value() const {
    Variable v;
    v.node_ = node_;
    return v;
  }
  /// Whether this handle holds the value (false after without_value()).
  bool holds_value() const { return holds_value_; }

  bool defined() const { return node_ != nullptr; }
  /// The value (shared by every copy of this handle).
  Array<T>& value() const {
    if (!holds_value_)
      throw Error(std::string("Variable: the value of this ") + (node().op ? node().op : "leaf") + " of shape " +
                  shape_str(node().shape) + " was not kept (a without_value() handle: a backward that reads it "
                  "must capture the Variable itself)");
    return node().value;
  }
  const Shape& shape() const { return holds_value_ ? node().value.shape() : node().shape; }
  std::size_t ndim() const { return shape().size(); }
  std::size_t size() const { return numel(shape()); }
  /// Size of dimension `d`; negative `d` counts from the end.
  std::size_t dim(int d) const {
    const int n = static_cast<int>(ndim());
    if (d < -n || d >= n)
      throw ShapeError("dim: dimension " + std::to_string(d) + " out of range for shape " +
                       shape_str(shape()));
    return shape()[static_cast<std::size_t>(d < 0 ? d + n : d)];
  }
  T* data() const { return value().data(); }
  /// The single value of a one-element tensor.
  T item() const {
    if (size() != 1)
      throw ShapeError("item: tensor of shape " + shape_str(shape()) + " has " +
                       std::to_string(size()) + " elements, expected 1");
    return *data();
  }

  bool requires_grad() const { return node().requires_grad; }
  /// Make a leaf require (or not) a gradient; returns *this.
  const Variable& set_requires_grad(bool r) const {
    if (!is_leaf()) throw Error("set_requires_grad: only leaves can change requires_grad");
    node().requires_grad = r;
    return *this;
  }
  bool is_leaf() const { return node().op == nullptr; }
  /// Name of the op that produced this value ("" for a leaf).
  const char* op() const { return node().op ? node().op : ""; }
  /// Keep the gradient of a non-leaf after backward (leaves always keep theirs).
  void retain_grad() const { node().retain_grad = true; }

  bool has_grad() const { return node().has_grad; }
  /// The gradient; throws when backward has not reached this value.
  const Array<T>& grad() const {
    if (!has_grad())
      throw Error("grad: this " + std::string(is_leaf() ? "leaf" : op()) + " value of shape " +
                  shape_str(shape()) + " has no gradient (backward has not reached it)");
    return node().grad;
  }
  /// Mutable gradient storage (optimizers and gradient clipping write here).
  Array<T>& grad_mut() const { return const_cast<Array<T>&>(grad()); }

  /// grad += g. Ignored when this value does not require a gradient. `op` names the caller in
  /// the shape error.
  void accumulate_grad(const Array<T>& g, const char* op = "accumulate_grad") const;
  void accumulate_grad(Array<T>&& g, const char* op = "accumulate_grad") const;
  /// grad += a gradient written in place: `write(T* dst, bool accumulate)` must store
  /// (accumulate false) or add (accumulate true) a gradient of the value's shape, contiguous, at
  /// dst. A GEMM then adds its product straight into an existing gradient (beta = 1), without a
  /// temporary, a zeroed output and a second pass.
  template <class F>
  void accumulate_grad_into(F&& write, const char* op = "accumulate_grad") const;

  /// Reverse-mode differentiation of a scalar (one-element) value: d(this)/d(x) is added to the
  /// gradient of every x on its tape that requires one. The tape is released afterwards.
  void backward() const;
  /// Same for a value of any shape, with an explicit upstream gradient of the same shape.
  void backward(const Array<T>& grad_output) const;
  /// Forget the gradient (the buffer is kept for reuse).
  void zero_grad() const { node().has_grad = false; }
  /// A new leaf with a copy of the value and no history.
  Variable detach() const { return Variable(value(), false); }

  /// Identity of the underlying value (same for copies of one handle).
  const void* id() const { return node_.get(); }

  // Used by record_op: a handle holding the node's value.
  explicit Variable(std::shared_ptr<detail::Node<T>> node) : node_(std::move(node)), holds_value_(true) {
    ++node_->value_refs;
  }
  const std::shared_ptr<detail::Node<T>>& node_ptr() const { return node_; }

 private:
  detail::Node<T>& node() const {
    if (!node_) throw Error("Variable: use of an undefined Variable");
    return *node_;
  }
  void release_value() noexcept {
    if (holds_value_ && node_ && --node_->value_refs == 0) node_->value = Array<T>();
    holds_value_ = false;
  }
  std::shared_ptr<detail::Node<T>> node_;
  bool holds_value_ = false;
};

/// True when any of the Variables requires a gradient and recording is enabled.
template <class T, class... Rest>
bool needs_grad(const Variable<T>& first, const Rest&... rest) {
  if (!autograd::grad_enabled()) return false;
  return first.requires_grad() || (... || rest.requires_grad());
}

/// Wrap `value` as the output of op `op`. When `requires_grad` (and recording is on), the output
/// requires a gradient and `backward(grad_out)` is recorded on the tape; it runs during
/// Variable::backward() if the output received a gradient. A backward that needs the output
/// itself (softmax, attention) takes it as a second argument, `backward(grad_out, out)`, instead
/// of keeping a copy: the record then holds the output's value until it has run. (Like PyTorch,
/// this assumes nobody modifies the output in place before backward.)
template <class T, class F>
Variable<T> record_op(const char* op, Array<T> value, bool requires_grad, F&& backward) {
  auto node = detail::make_node<T>();
  node->value = std::move(value);
  node->shape = node->value.shape();
  Variable<T> out(node);
  if (requires_grad && autograd::grad_enabled()) {
    auto& tape = autograd::Tape::current();
    node->requires_grad = true;
    node->op = op;
    node->generation = tape.generation();
    // Runs fn once the output has its gradient, then frees that gradient: passed on to the inputs,
    // it is not needed any more, so backward does not hold a gradient for every intermediate.
    auto run = [](detail::Node<T>& n, auto& fn, const Array<T>* y) {
      if (!n.has_grad) return;
      if constexpr (std::is_invocable_v<decltype(fn)&, const Array<T>&, const Array<T>&>)
        fn(static_cast<const Array<T>&>(n.grad), *y);
      else
        fn(static_cast<const Array<T>&>(n.grad));
      if (!n.retain_grad) {
        n.has_grad = false;
        n.grad = Array<T>();
      }
    };
    // The record owns its output's node (not its value) until it has run: the consumers'
    // records, which add into that node's gradient, may be destroyed before it runs.
    if constexpr (std::is_invocable_v<F&, const Array<T>&, const Array<T>&>) {
      // The backward reads the output: the record holds its value too.
      tape.record([self = out, run, fn = std::forward<F>(backward)]() mutable {
        run(*self.node_ptr(), fn, &self.value());
      });
    } else {
      tape.record([self = out.without_value(), run, fn = std::forward<F>(backward)]() mutable {
        run(*self.node_ptr(), fn, nullptr);
      });
    }
  }
  return out;
}

// ---- implementation ----

namespace detail {
// A gradient arriving at a non-leaf whose tape was released can go no further (its backward
// closure is gone): fail instead of silently dropping the gradient of everything before it.
template <class T>
void check_live(const Node<T>& n, const char* op) {
  if (n.op && n.generation != autograd::Tape::current().generation())
    throw Error(std::string(op) + ": the tape that recorded this " + n.op + " value of shape " +
                shape_str(n.shape) +
                " was already released (backward ran through it before, or it was computed on "
                "another thread); recompute it, or detach() it to use it as a constant");
}
}  // namespace detail

template <class T>
void Variable<T>::accumulate_grad(const Array<T>& g, const char* op) const {
  detail::Node<T>& n = node();
  if (!n.requires_grad) return;
  detail::check_live(n, op);
  const Shape& shape = n.value_refs ? n.value.shape() : n.shape;
  if (g.shape() != shape)
    throw ShapeError(std::string(op) + ": gradient of shape " + shape_str(g.shape()) +
                     " does not match the value's shape " + shape_str(shape));
  const T* src = g.data();
  const std::size_t count = g.size();
  accumulate_grad_into([&](T* dst, bool add) {
    if (!add) return void(std::copy(src, src + count, dst));
    for (std::size_t i = 0; i < count; ++i) dst[i] += src[i];
  }, op);
}

template <class T>
void Variable<T>::accumulate_grad(Array<T>&& g, const char* op) const {
  detail::Node<T>& n = node();
  if (!n.requires_grad) return;
  detail::check_live(n, op);
  if (!n.has_grad && g.shape() == (n.value_refs ? n.value.shape() : n.shape)) {
    n.grad = std::move(g);
    n.has_grad = true;
    return;
  }
  accumulate_grad(static_cast<const Array<T>&>(g), op);
}

template <class T>
template <class F>
void Variable<T>::accumulate_grad_into(F&& write, const char* op) const {
  detail::Node<T>& n = node();
  if (!n.requires_grad) return;
  detail::check_live(n, op);
  if (n.has_grad) return write(n.grad.data(), true);
  const Shape& shape = n.value_refs ? n.value.shape() : n.shape;
  if (n.grad.shape() != shape) n.grad = Array<T>::from_shape(shape);
  write(n.grad.data(), false);
  n.has_grad = true;
}

template <class T>
void Variable<T>::backward(const Array<T>& grad_output) const {
  detail::Node<T>& n = node();
  if (!n.requires_grad)
    throw Error("backward: this value of shape " + shape_str(shape()) +
                " does not require grad (no input of its computation requires one, or it was "
                "computed under NoGradGuard)");
  if (grad_output.shape() != shape())
    throw ShapeError("backward: upstream gradient of shape " + shape_str(grad_output.shape()) +
                     " does not match the output's shape " + shape_str(shape()));
  auto& tape = autograd::Tape::current();
  if (n.op && n.generation != tape.generation())
    throw Error(std::string("backward: the tape that recorded this ") + n.op +
                " value was already released (backward ran on it before, or it was computed on "
                "another thread)");
  const bool keep = n.retain_grad;
  n.retain_grad = true;  // the root keeps the gradient it was seeded with
  accumulate_grad(grad_output, "backward");
  if (n.op) tape.run_backward();
  n.retain_grad = keep;
}

template <class T>
void Variable<T>::backward() const {
  if (size() != 1)
    throw ShapeError("backward: output of shape " + shape_str(shape()) +
                     " is not a scalar; pass an upstream gradient of that shape");
  backward(full<T>(shape(), T(1)));
}

}  // namespace qkv
