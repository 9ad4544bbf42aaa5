// Training snapshots: recorded without touching the training trajectory, continued across a
// resume, checksummed on disk, and a damaged file set aside rather than lost or trusted.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "constructed.hpp"
#include "qkv/interp/snapshots.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/io/io_error.hpp"
#include "qkv/runs/training.hpp"
#include "train/train_fixtures.hpp"

namespace qkv {
namespace fs = std::filesystem;
namespace {

void train_quiet(const config::Config& cfg, const std::string& resume = "", std::int64_t stop_after = 0) {
  train::RunOptions o;
  o.resume = resume;
  o.existing = train::ExistingRun::Overwrite;  // the tests reuse their directories
  o.loop.stop_after = stop_after;
  dist::Comm single;
  runs::train_with_snapshots(cfg, o, {}, single);
}

void check_same_snapshots(const interp::Snapshots& a, const interp::Snapshots& b) {
  CHECK(a.steps == b.steps);
  CHECK(test::bitwise_equal(a.inputs, b.inputs));
  REQUIRE(a.layers.size() == b.layers.size());
  for (std::size_t l = 0; l < a.layers.size(); ++l) {
    CHECK(a.layers[l].name == b.layers[l].name);
    CHECK(test::bitwise_equal(a.layers[l].weights, b.layers[l].weights));
    CHECK(test::bitwise_equal(a.layers[l].scores, b.layers[l].scores));
  }
}

}  // namespace

TEST_CASE("snapshots: training with snapshots follows the same trajectory, bit for bit, and records every 10 steps") {
  const std::string off = test::temp_dir("snap_off"), on = test::temp_dir("snap_on");
  train_quiet(test::tiny_config(off, {"model.dropout=0.1"}));
  train_quiet(test::tiny_config(on, {"model.dropout=0.1", "train.snapshot_every=10", "train.snapshot_examples=3"}));
  CHECK_FALSE(fs::exists(off + "/snapshots.h5"));
  const io::Checkpoint a = io::load_checkpoint(off + "/last.h5"), b = io::load_checkpoint(on + "/last.h5");
  REQUIRE(a.model.size() == b.model.size());
  for (std::size_t i = 0; i < a.model.size(); ++i) {
    INFO(a.model[i].first);
    CHECK(test::bitwise_equal(a.model[i].second, b.model[i].second));
  }

  const interp::Snapshots s = interp::load_snapshots(on + "/snapshots.h5");
  CHECK(s.steps == std::vector<std::int64_t>{0, 10, 20, 30, 40});
  CHECK(s.inputs.shape()[0] == 3);
  CHECK(s.input_labels.size() == 3 * 8);
  REQUIRE(s.layers.size() == 1);
  const auto& w = s.layers[0].weights;  // (S, N, H, Tq, Tk)
  REQUIRE(w.dimension() == 5);
  CHECK(w.shape()[0] == 5);
  CHECK(w.shape()[1] == 3);
  CHECK(w.shape()[2] == 2);
  const std::size_t Tk = w.shape()[4];
  double worst = 0;
  for (std::size_t r = 0; r < w.size() / Tk; ++r) {
    double sum = 0;
    for (std::size_t j = 0; j < Tk; ++j) sum += w.data()[r * Tk + j];
    worst = std::max(worst, std::abs(sum - 1));
  }
  CHECK(worst < 1e-5);
  // the heads change while they train: the last step's weights differ from step 0's
  const std::size_t per_step = w.size() / 5;
  CHECK_FALSE(std::equal(w.data(), w.data() + per_step, w.data() + 4 * per_step));
  CHECK(s.layers[0].scores.shape()[2] == s.score_names.size());
}

TEST_CASE("snapshots: a run stopped at step 25 and resumed has the snapshots of the run straight through") {
  const std::string straight = test::temp_dir("snap_straight"), split = test::temp_dir("snap_split");
  const std::vector<std::string> extra = {"model.dropout=0.1", "train.snapshot_every=10"};
  train_quiet(test::tiny_config(straight, extra));
  const auto cfg = test::tiny_config(split, extra);
  train_quiet(cfg, "", 25);
  CHECK(interp::load_snapshots(split + "/snapshots.h5").steps == std::vector<std::int64_t>{0, 10, 20});
  train_quiet(cfg, split + "/last.h5");
  check_same_snapshots(interp::load_snapshots(straight + "/snapshots.h5"), interp::load_snapshots(split + "/snapshots.h5"));
}

TEST_CASE("snapshots: a damaged file is an error naming it, and a resumed run moves it aside and starts again") {
  const std::string dir = test::temp_dir("snap_damaged");
  const auto cfg = test::tiny_config(dir, {"train.snapshot_every=10"});
  train_quiet(cfg, "", 25);
  const std::string path = dir + "/snapshots.h5";
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(fs::file_size(path) / 2));
    char c = 0;
    f.read(&c, 1);
    f.seekp(std::streamoff(fs::file_size(path) / 2));
    c = char(c ^ 0x10);
    f.write(&c, 1);
  }
  try {
    interp::load_snapshots(path);
    FAIL("a damaged snapshots file loaded");
  } catch (const io::IoError& e) {
    CHECK(std::string(e.what()).find(path) != std::string::npos);
  }
  train_quiet(cfg, dir + "/last.h5");
  CHECK(fs::exists(path + ".damaged-1"));  // kept, not overwritten
  const interp::Snapshots s = interp::load_snapshots(path);
  CHECK(s.steps == std::vector<std::int64_t>{30, 40});  // recorded from the resumed step on

  // snapshots of another model are set aside too (a file copied into the wrong run directory)
  const std::string other = test::temp_dir("snap_other");
  const auto cfg_other = test::tiny_config(other, {"train.snapshot_every=10", "model.heads=4"});
  train_quiet(cfg_other, "", 15);
  fs::copy_file(path, other + "/snapshots.h5", fs::copy_options::overwrite_existing);
  train_quiet(cfg_other, other + "/last.h5");
  CHECK(fs::exists(other + "/snapshots.h5.damaged-1"));
  CHECK(interp::load_snapshots(other + "/snapshots.h5").steps == std::vector<std::int64_t>{20, 30, 40});
}

TEST_CASE("snapshots: the recorder keeps the model's mode, wants increasing steps, and the config checks its keys") {
  const std::string dir = test::temp_dir("snap_recorder");
  const config::Config cfg = test::tiny_config(dir);
  std::shared_ptr<data::Task> task = data::make_task(cfg.task);
  Generator gen(1);
  auto model = model::make_model(cfg, *task, gen);
  data::Dataset data(task, cfg.seed, 4);
  interp::SnapshotRecorder rec(*model, *task, data.eval_set());
  model->module().train();
  rec.record(0);
  CHECK(model->module().is_training());
  CHECK_THROWS_WITH_AS(rec.record(0), doctest::Contains("steps must increase"), ValueError);
  CHECK_FALSE(rec.record_if_due(5, 10));
  CHECK(rec.record_if_due(5, 10, true));
  CHECK(rec.snapshots().steps == std::vector<std::int64_t>{0, 5});
  rec.truncate(3);
  CHECK(rec.snapshots().steps == std::vector<std::int64_t>{0});
  CHECK(rec.snapshots().layers[0].weights.shape()[0] == 1);

  CHECK_THROWS_WITH_AS(test::tiny_config(dir, {"train.snapshot_every=10", "train.snapshot_examples=500"}),
                       doctest::Contains("snapshot_examples"), config::ConfigError);
  CHECK_THROWS_WITH_AS(test::tiny_config(dir, {"train.snapshot_examples=0"}), doctest::Contains("snapshot_examples"),
                       config::ConfigError);
}

TEST_CASE("snapshots: those of this model fit it, those of another model are refused naming the layer") {
  test::Constructed m = test::constructed_decoder();
  const data::Batch b = test::previous_token_batch(2, m.T, m.V, 5);
  interp::SnapshotRecorder rec(*m.model, *m.task, b);
  rec.record(0);
  CHECK_NOTHROW(interp::check_snapshots_fit(rec.snapshots(), *m.model));
  interp::Snapshots other = rec.snapshots();
  other.layers[0].name = "blocks.9.attn";
  CHECK_THROWS_WITH_AS(interp::check_snapshots_fit(other, *m.model),
                       doctest::Contains("layer 0 is blocks.9.attn (causal, 2 heads), the model's is blocks.0.attn"), ValueError);
  other = rec.snapshots();
  other.layers.pop_back();
  CHECK_THROWS_WITH_AS(interp::check_snapshots_fit(other, *m.model), doctest::Contains("snapshots of another model"), ValueError);
}

}  // namespace qkv
