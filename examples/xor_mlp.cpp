// The engine on its own: a 2-layer MLP learns XOR-like data (the label is the sign of x0 * x1),
// which no linear model can fit (a linear model stays near 50%). Run: ./build/example_xor_mlp
#include <cstdio>

#include "qkv/qkv.hpp"

using namespace qkv;

int main() {
  Generator gen(42);
  const std::size_t N = 256;
  // Points in [-1, 1]^2; class 1 where x0 * x1 > 0.
  Array<float> x = Array<float>::from_shape({N, 2});
  IndexArray y = IndexArray::from_shape({N});
  for (std::size_t i = 0; i < N; ++i) {
    x(i, 0) = float(gen.uniform(-1, 1));
    x(i, 1) = float(gen.uniform(-1, 1));
    y(i) = x(i, 0) * x(i, 1) > 0 ? 1 : 0;
  }
  Variable<float> input(x);

  // W1 (16, 2), b1 (16), W2 (2, 16), b2 (2), initialised like torch.nn.Linear.
  auto param = [&](Shape shape, double bound) {
    Array<float> a = Array<float>::from_shape(shape);
    for (auto& v : a) v = float(gen.uniform(-bound, bound));
    return Variable<float>(a, true);
  };
  Variable<float> w1 = param({16, 2}, 0.7), b1 = param({16}, 0.7), w2 = param({2, 16}, 0.25), b2 = param({2}, 0.25);
  optim::AdamOptions adam;
  adam.lr = 0.05;
  optim::Adam<float> opt({{"w1", w1}, {"b1", b1}, {"w2", w2}, {"b2", b2}}, adam);

  double first_loss = 0, last_loss = 0, accuracy = 0;
  for (int step = 0; step <= 300; ++step) {
    Variable<float> logits = linear(tanh(linear(input, w1, b1)), w2, b2);  // (N, 2)
    Variable<float> loss = cross_entropy(logits, y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    std::size_t correct = 0;
    for (std::size_t i = 0; i < N; ++i) correct += (logits.value()(i, 1) > logits.value()(i, 0)) == (y(i) == 1);
    accuracy = double(correct) / N;
    last_loss = loss.item();
    if (step == 0) first_loss = last_loss;
    if (step % 50 == 0) std::printf("step %3d  loss %.4f  accuracy %.1f%%\n", step, last_loss, 100 * accuracy);
  }
  // Exit status says whether it learned: used by tests/examples/test_examples.cpp.
  return last_loss < 0.5 * first_loss && accuracy > 0.9 ? 0 : 1;
}
