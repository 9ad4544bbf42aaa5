#include "qkv/tensor/random.hpp"

#include <cmath>

namespace qkv {

double Generator::normal() {
  // 1 - u keeps the argument of log in (0, 1].
  double u1 = 1.0 - uniform();
  double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

Generator& default_generator() {
  static Generator gen(0);
  return gen;
}

void manual_seed(std::uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace qkv
