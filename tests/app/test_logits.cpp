// `qkv logits`: the text file it writes holds the logits an in-process model computes from the
// same checkpoint on the same held-out tokens (tools/bench_parity.py compares it with PyTorch).
#include <doctest/doctest.h>

#include <fstream>

#include "qkv/data/tasks.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/model/task_model.hpp"
#include "train/train_fixtures.hpp"

using namespace qkv;

TEST_CASE("cli: logits writes the checkpoint model's logits for the first held-out examples") {
  const std::string dir = test::temp_dir("cli_logits");
  const std::string qkv = QKV_CLI_PATH;
  const std::string tiny =
      " --set model.d_model=32 --set model.heads=2 --set model.layers=1 --set model.d_ff=64 --set task.vocab=8"
      " --set task.length=8 --set task.eval_size=16 --set train.batch_size=16 --set train.steps=6"
      " --set train.eval_every=100 --set train.checkpoint_every=100 --set train.threads=1"
      " --set schedule.warmup_steps=2 --set model.dropout=0.1 --quiet";
  REQUIRE(test::run_command(qkv + " train " + QKV_SOURCE_DIR + "/configs/sort.yaml --out " + dir + tiny) == 0);
  const std::string ckpt = dir + "/last.h5", out = dir + "/logits.txt";
  REQUIRE(test::run_command(qkv + " logits " + ckpt + " --count 3 --out " + out) == 0);

  // The same model, rebuilt here from the checkpoint.
  io::Checkpoint c = io::load_checkpoint(ckpt);
  config::Config cfg = config::parse_config(c.config_yaml, ckpt);
  auto task = std::shared_ptr<data::Task>(data::make_task(cfg.task));
  data::Dataset data(task, cfg.seed, cfg.task.eval_size);
  Generator gen(0);
  auto model = model::make_model(cfg, *task, gen);
  model->module().load_state_dict(c.model);
  model->module().eval();
  data::Batch b;
  b.inputs = IndexArray::from_shape({3, 8});
  std::copy(data.eval_set().inputs.data(), data.eval_set().inputs.data() + 24, b.inputs.data());
  NoGradGuard no_grad;
  const Array<float> want = model->logits(b).value();

  std::ifstream f(out);
  std::size_t N = 0, T = 0, V = 0;
  f >> N >> T >> V;
  REQUIRE(N == 3);
  REQUIRE(T == 8);
  REQUIRE(V == 8);
  for (std::size_t i = 0; i < N * T; ++i) {
    long long token = -1;
    f >> token;
    CHECK(token == b.inputs.data()[i]);
  }
  for (std::size_t i = 0; i < N * T * V; ++i) {
    float x = NAN;
    f >> x;
    CHECK(x == want.data()[i]);  // %.9g round-trips a float exactly
  }
  CHECK(test::run_command(qkv + " logits " + dir + "/missing.h5 --out " + out) != 0);
}
