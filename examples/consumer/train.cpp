// Train the gated attention layer of gated_attention.hpp a few steps; exit 1 unless the held-out
// loss went down.   ./gated_train [steps]
#include <cstdio>
#include <cstdlib>

#include "gated_attention.hpp"
#include "qkv/version.hpp"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 60;
  std::printf("qkv %s: gated attention, student imitates teacher, %d Adam steps\n", QKV_VERSION, steps);
  std::vector<double> losses = consumer::train_student<float>(steps);
  for (std::size_t i = 0; i < losses.size(); i += 10)
    std::printf("step %3zu  held-out mse %.5f\n", i, losses[i]);
  std::printf("held-out mse %.5f -> %.5f\n", losses.front(), losses.back());
  return losses.back() < 0.5 * losses.front() ? 0 : 1;
}
