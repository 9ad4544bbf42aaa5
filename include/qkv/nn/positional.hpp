#pragma once
/// @file
/// Positional encodings, added to a (B, T, C) sequence of embeddings.

#include "qkv/nn/module.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/random.hpp"

namespace qkv::nn {

struct PositionalOptions {
  std::size_t max_len = 1024;  ///< longest sequence accepted
  std::size_t dim = 0;         ///< C
  double init_std = 1.0;       ///< learned only: table ~ N(0, init_std^2), like an nn.Embedding
  /// max_len and dim positive, init_std >= 0; throws OptionError.
  void validate() const;
};

/// Base of both encodings: forward(x (B, T, C), offset) -> x + P[offset : offset + T] (B, T, C);
/// offset + T <= max_len (ShapeError otherwise). offset > 0 continues a sequence (decoding).
template <class T>
class PositionalEncoding : public Module<T> {
 public:
  virtual Variable<T> forward(const Variable<T>& x, std::size_t offset = 0) const = 0;
  Variable<T> operator()(const Variable<T>& x, std::size_t offset = 0) const { return forward(x, offset); }
};

/// A learned table of positions: y[b, t, :] = x[b, t, :] + weight[t, :].
/// x (B, T, C) with T <= max_len -> (B, T, C). Parameter: "weight" (max_len, C).
/// Init: N(0, init_std^2) from `gen`. T > max_len throws ShapeError.
template <class T>
class LearnedPositionalEncoding : public PositionalEncoding<T> {
 public:
  explicit LearnedPositionalEncoding(const PositionalOptions& options, Generator& gen = default_generator());

  Variable<T> forward(const Variable<T>& x, std::size_t offset = 0) const override;

  const PositionalOptions& options() const { return options_; }
  Variable<T> weight;  ///< (max_len, C)

 private:
  PositionalOptions options_;
};

/// Fixed sinusoids ("Attention Is All You Need", section 3.5): y = x + PE[:T], with
///   PE[t, 2i]   = sin(t / 10000^(2i / C))
///   PE[t, 2i+1] = cos(t / 10000^(2i / C)).
/// x (B, T, C) with T <= max_len -> (B, T, C). No parameters (the table is a constant, not saved).
template <class T>
class SinusoidalPositionalEncoding : public PositionalEncoding<T> {
 public:
  explicit SinusoidalPositionalEncoding(const PositionalOptions& options);

  Variable<T> forward(const Variable<T>& x, std::size_t offset = 0) const override;

  /// The (max_len, C) table PE.
  const Array<T>& table() const { return table_; }
  const PositionalOptions& options() const { return options_; }

 private:
  PositionalOptions options_;
  Array<T> table_;
};

}  // namespace qkv::nn
