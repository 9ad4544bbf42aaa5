#include <doctest/doctest.h>

#include <cmath>

#include "qkv/optim/lr_schedule.hpp"
#include "qkv/tensor/tensor.hpp"

using namespace qkv;
using optim::LrSchedule;
using optim::ScheduleOptions;

TEST_CASE("LrSchedule: cosine with warmup at its key steps") {
  ScheduleOptions o;
  o.name = optim::Schedule::Cosine;
  o.warmup_steps = 10;
  o.total_steps = 110;
  o.min_lr = 0.1;
  LrSchedule s(1.0, o);
  CHECK(s.lr_at(0) == 0.0);
  CHECK(s.lr_at(5) == doctest::Approx(0.5));
  CHECK(s.lr_at(10) == doctest::Approx(1.0));                            // warmup end: the peak
  CHECK(s.lr_at(35) == doctest::Approx(0.1 + 0.9 * (1 + std::sqrt(0.5)) / 2));  // a quarter of the way
  CHECK(s.lr_at(60) == doctest::Approx(0.55));                           // mid decay
  CHECK(s.lr_at(109) > 0.1);
  CHECK(s.lr_at(110) == doctest::Approx(0.1));                           // end
  CHECK(s.lr_at(1000) == doctest::Approx(0.1));                          // beyond: the floor
  for (std::int64_t t = 10; t < 110; ++t) CHECK(s.lr_at(t + 1) <= s.lr_at(t));
}

TEST_CASE("LrSchedule: cosine without warmup starts at the base") {
  ScheduleOptions o;
  o.name = optim::Schedule::Cosine;
  o.warmup_steps = 0;
  o.total_steps = 100;
  LrSchedule s(2e-3, o);
  CHECK(s.lr_at(0) == doctest::Approx(2e-3));
  CHECK(s.lr_at(50) == doctest::Approx(1e-3));
  CHECK(s.lr_at(100) == 0.0);
}

TEST_CASE("LrSchedule: constant and step, with and without warmup") {
  ScheduleOptions constant;
  constant.name = optim::Schedule::Constant;
  constant.warmup_steps = 0;
  CHECK(LrSchedule(0.3, constant).lr_at(0) == 0.3);
  CHECK(LrSchedule(0.3, constant).lr_at(123456) == 0.3);
  ScheduleOptions warm = constant;
  warm.warmup_steps = 4;
  CHECK(LrSchedule(0.3, warm).lr_at(1) == doctest::Approx(0.075));
  CHECK(LrSchedule(0.3, warm).lr_at(4) == doctest::Approx(0.3));
  ScheduleOptions o = constant;
  o.name = optim::Schedule::Step;
  o.step_size = 10;
  o.gamma = 0.5;
  LrSchedule s(1.0, o);
  CHECK(s.lr_at(0) == 1.0);
  CHECK(s.lr_at(9) == 1.0);
  CHECK(s.lr_at(10) == doctest::Approx(0.5));
  CHECK(s.lr_at(25) == doctest::Approx(0.25));
  CHECK(s.lr_at(100) == doctest::Approx(std::pow(0.5, 10)));
}

TEST_CASE("LrSchedule: bad options throw OptionError naming the option") {
  auto make = [](const std::string& name, auto edit) {
    ScheduleOptions o;
    o.name = optim::schedule_names().parse(name, "name");
    edit(o);
    return LrSchedule(1.0, o);
  };
  auto none = [](ScheduleOptions&) {};
  CHECK_THROWS_WITH_AS(make("linear", none), doctest::Contains("name: expected one of constant, cosine, step, found 'linear'"), ValueError);
  CHECK_THROWS_WITH_AS(make("cosine", [](ScheduleOptions& o) { o.warmup_steps = -1; }), doctest::Contains("warmup_steps"), ValueError);
  CHECK_THROWS_WITH_AS(make("cosine", [](ScheduleOptions& o) { o.warmup_steps = 20, o.total_steps = 10; }),
                       doctest::Contains("total_steps"), ValueError);
  CHECK_THROWS_WITH_AS(make("cosine", [](ScheduleOptions& o) { o.min_lr = 2.0; }), doctest::Contains("min_lr"), ValueError);
  CHECK_THROWS_WITH_AS(make("step", [](ScheduleOptions& o) { o.step_size = 0; }), doctest::Contains("step_size"), ValueError);
  CHECK_THROWS_WITH_AS(make("step", [](ScheduleOptions& o) { o.gamma = 0; }), doctest::Contains("gamma"), ValueError);
  CHECK_THROWS_WITH_AS(make("cosine", [](ScheduleOptions& o) { o.min_lr = 2.0; }),
                       doctest::Contains("ScheduleOptions: min_lr: min_lr (2) must not exceed base_lr (1)"), OptionError);
  CHECK_THROWS_WITH_AS(LrSchedule(1.0, {}).lr_at(-1), doctest::Contains("step"), ValueError);
}
