// The library API without the trainer: build a model, train it on the sort task, save a
// checkpoint, load it into a fresh model and check that both predict the same.
//   ./build/example_sort_api [steps] [checkpoint path]
#include <cstdio>
#include <cstdlib>

#include "qkv/qkv.hpp"
#include "qkv/model/task_model.hpp"

using namespace qkv;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  const std::string path = argc > 2 ? argv[2] : "sort_api.h5";
  data::TaskOptions t;
  t.name = "sort";
  t.vocab = 8;
  t.length = 12;
  data::Dataset data(data::make_task(t), /*seed=*/1, /*eval_size=*/256);

  nn::TransformerOptions o;
  o.d_model = 32;
  o.attn.num_heads = 2;
  o.layers = 2;
  o.ff.hidden = 64;
  Generator init(1);
  nn::EncoderModel<float> model(data.task().input_vocab(), data.task().num_classes(), o, init);
  optim::AdamWOptions adamw;
  adamw.lr = 3e-3;
  optim::AdamW<float> opt(model.named_parameters(), adamw);

  for (int step = 1; step <= steps; ++step) {
    data::Batch b = data.next_train(32);
    Variable<float> loss = cross_entropy(model.forward(b.inputs), b.targets);
    loss.backward();
    optim::clip_grad_norm(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
    if (step % 100 == 0) std::printf("step %d  loss %.4f\n", step, double(loss.item()));
  }

  // Save the parameters, reload them into a new model, compare held-out predictions.
  io::Checkpoint ckpt;
  ckpt.step = steps;
  ckpt.model = model.state_dict();
  io::save_checkpoint(path, ckpt);
  Generator other(2);
  nn::EncoderModel<float> loaded(data.task().input_vocab(), data.task().num_classes(), o, other);
  loaded.load_state_dict(io::load_checkpoint(path).model);

  NoGradGuard no_grad;
  model.eval();
  loaded.eval();
  const data::Batch& eval = data.eval_set();
  IndexArray a = model::argmax_last(model.forward(eval.inputs).value());
  IndexArray b = model::argmax_last(loaded.forward(eval.inputs).value());
  std::size_t correct = 0, same = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    correct += a.data()[i] == eval.targets.data()[i];
    same += a.data()[i] == b.data()[i];
  }
  std::printf("held-out token accuracy %.1f%%; the reloaded model agrees on %zu/%zu tokens (%s)\n",
              100.0 * correct / a.size(), same, a.size(), path.c_str());
  return same == a.size() && correct > a.size() / 2 ? 0 : 1;
}
