#pragma once
/// @file
/// Gradient checking, in the spirit of torch.autograd.gradcheck: the full Jacobian from backward
/// is compared with central finite differences, element by element:
///   numeric J[j][i] = (f(x + eps e_i)_j - f(x - eps e_i)_j) / (2 eps)
///   pass when |analytic - numeric| <= atol + rtol * |numeric| for every element.
/// Float64 only: float32 rounding (~1e-7 relative) swamps a difference quotient with eps 1e-6.

#include <functional>
#include <string>
#include <vector>

#include "qkv/autograd/variable.hpp"

namespace qkv {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

/// The worst element of one input's Jacobian block.
struct GradcheckInputReport {
  std::size_t input = 0;     ///< position in the inputs list
  bool ok = true;
  std::size_t output_index = 0;  ///< flat index of the output element
  std::size_t input_index = 0;   ///< flat index of the input element
  double analytic = 0, numeric = 0;
  double error = 0;              ///< |analytic - numeric|
  double ratio = 0;              ///< error / (atol + rtol |numeric|); > 1 fails
};

struct GradcheckReport {
  bool ok = true;
  std::vector<GradcheckInputReport> inputs;
  /// One line per input: "input 0 ok: worst d out[3]/d in[5] analytic .. numeric .. error ..".
  std::string str() const;
};

/// Check f against finite differences with respect to `inputs` (float64 leaves requiring grad;
/// f reads their current values, and gradcheck perturbs them in place and restores them).
/// Module parameters can be passed as inputs. f must be deterministic (reseed any dropout
/// generator inside f).
GradcheckReport gradcheck(const std::function<Variable<double>()>& f,
                          const std::vector<Variable<double>>& inputs, const GradcheckOptions& options = {});

/// torch-style: f takes the Variables made from `inputs`.
GradcheckReport gradcheck(const std::function<Variable<double>(const std::vector<Variable<double>>&)>& f,
                          const std::vector<Array<double>>& inputs, const GradcheckOptions& options = {});

/// Float32 overloads: always throw ValueError explaining that gradient checks need float64.
GradcheckReport gradcheck(const std::function<Variable<float>()>& f,
                          const std::vector<Variable<float>>& inputs, const GradcheckOptions& options = {});
GradcheckReport gradcheck(const std::function<Variable<float>(const std::vector<Variable<float>>&)>& f,
                          const std::vector<Array<float>>& inputs, const GradcheckOptions& options = {});

}  // namespace qkv
