#pragma once
/// @file
/// Gradient clipping by global norm.

#include <vector>

#include "qkv/autograd/variable.hpp"

namespace qkv::optim {

/// Scale the gradients of `params` so that their global L2 norm sqrt(sum_p sum_i g_pi^2) is at
/// most `max_norm` (> 0): when norm > max_norm, every gradient is multiplied by
/// max_norm / (norm + 1e-6), as torch.nn.utils.clip_grad_norm_. Parameters without a gradient are
/// skipped. Returns the norm before clipping (non-finite when a gradient is: check it). Sums are
/// in double, in fixed-size chunks added in a fixed order (the same bits for any thread count).
/// `gains` (empty, or one per parameter: Optimizer::gains_of) counts params[i]'s gradient times
/// gains[i] in the norm, the gradient of the parameter it reparameterises (ParamGroup::gain).
template <class T>
double clip_grad_norm(const std::vector<Variable<T>>& params, double max_norm, const std::vector<double>& gains = {});

/// The global L2 norm of the gradients alone (no clipping), same summation and gains.
template <class T>
double grad_norm(const std::vector<Variable<T>>& params, const std::vector<double>& gains = {});

}  // namespace qkv::optim
