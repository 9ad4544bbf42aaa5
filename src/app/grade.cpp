// qkv grade: the shelf of known circuits built, and every instrument graded on it.
#include "grade.hpp"

#include <cstdio>
#include <filesystem>

#include "loaded.hpp"
#include "qkv/compile/shelf.hpp"
#include "qkv/data/contrast.hpp"
#include "qkv/interp/grade.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/io/files.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {

namespace {

bool is_checkpoint(const std::string& name) { return name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0; }

// A model to grade, and for a trained one how many positions it got right before the widening.
struct Graded {
  compile::ShelfModel s;
  bool trained = false;
  std::size_t correct_before = 0;
};

// A trained model of a program's task, widened with a mimic of each circuit head (the residual of
// a trained model has no labelled dimensions for the other patterns).
Graded trained_model(const std::string& path, const std::string& circuit, std::uint64_t seed) {
  if (circuit.empty()) throw ValueError(path + ": a checkpoint is graded against its circuit file: give --circuit FILE");
  const Loaded l = load(path, {}, false);
  if (l.cfg.task.name != "program")
    throw ValueError(path + ": qkv grade reads models of a program's task (task.name program), found task.name " +
                     l.cfg.task.name);
  Graded g;
  g.trained = true;
  compile::ShelfModel& s = g.s;
  const std::filesystem::path file(path);  // runs/NAME/best.h5 is NAME
  const std::string stem = file.stem().string(), dir = file.parent_path().filename().string();
  s.entry = {(stem == "best" || stem == "last") && !dir.empty() ? dir : stem, "trained, graded against " + circuit};
  s.program = l.cfg.task.program.empty() ? rasp::load_program(l.cfg.task.path)
                                         : rasp::parse_program(l.cfg.task.program, path + ":/config/task.program");
  compile::CompiledModel c;
  c.config = l.cfg;
  c.checkpoint = io::load_checkpoint(path);
  c.circuit_json = io::read_file(circuit, io::kMaxTextFileBytes, "--circuit");
  s.compiled = compile::add_distractors(c, s.program, compile::shelf_distractors(c, true));
  g.correct_before = compile::check_model(*l.model, s.program, 2000, seed).correct;
  return g;
}

}  // namespace

int grade(const GradeArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    if (!a.csv.empty()) io::check_output_path(a.csv, {}, "--csv");
    std::vector<const compile::ShelfEntry*> entries;
    if (a.models.empty())
      for (auto& e : compile::shelf()) entries.push_back(&e);
    for (auto& name : a.models)
      if (!is_checkpoint(name)) entries.push_back(&compile::shelf_entry(name));
    interp::GradeRequest request;
    for (auto& name : a.instruments) request.instruments.push_back(interp::instrument_names().parse(name, "--instruments"));
    request.examples = a.examples;
    request.steps = a.steps;
    if (!a.write.empty()) std::filesystem::create_directories(a.write);

    std::vector<Graded> models;
    for (const compile::ShelfEntry* e : entries) models.push_back({compile::build_shelf_model(*e, a.programs)});
    for (auto& name : a.models)
      if (is_checkpoint(name)) models.push_back(trained_model(name, a.circuit, a.seed));

    std::vector<interp::GradeResult> results;
    for (const Graded& g : models) {
      const compile::ShelfModel& s = g.s;
      const compile::ShelfEntry* e = &s.entry;
      const std::string path = (a.write.empty() ? e->name : a.write + "/" + e->name) + ".h5";
      model::LoadedModel l = model::load_model(s.compiled.checkpoint, path, {}, true);
      // The distractors change no output: the widened model computes its program (a trained one as
      // well as it did before).
      const compile::CheckResult check = compile::check_model(*l.model, s.program, 2000, a.seed);
      if (g.trained ? check.correct != g.correct_before : !check.ok())
        throw Error(e->name + ": the widened model disagrees with " + (g.trained ? "the trained one" : "its program") +
                    " (" + check.first_error + ")");
      if (!a.write.empty()) {
        io::save_checkpoint(path, s.compiled.checkpoint);
        io::write_file_atomic(compile::circuit_path(path), s.compiled.circuit_json);
      }
      request.truth = interp::read_circuit(s.compiled.circuit_json, e->name + ".circuit.json");
      request.pairs = data::program_contrast_pairs(s.program, a.pairs, a.seed);
      results.push_back(interp::grade(l, request, e->name));
      if (!a.json) {
        const auto& m = s.compiled.config.model;
        std::fprintf(stderr, "%s: %zu layers x %zu heads (%zu in the circuit), checked on %zu inputs: %s right\n",
                     e->name.c_str(), m.layers, m.attn.num_heads, request.truth.heads.size(), check.inputs,
                     percent(check.positions ? double(check.correct) / double(check.positions) : 1.0).c_str());
      }
    }
    if (a.json) {
      print_json(interp::to_json(results));
    } else {
      std::printf("%s", interp::format_grades(results).c_str());
      std::printf("heads: circuit/all; AUROC 1 = every circuit head scored above every other head, 0.5 = chance; "
                  "top-k: precision of the k best-scored, k = the circuit's size (docs/grade.md)\n");
    }
    if (!a.csv.empty()) {
      io::write_file_atomic(a.csv, interp::grades_csv(results));
      if (!a.json) std::printf("wrote %s\n", a.csv.c_str());
    }
    if (!a.write.empty() && !a.json) std::printf("wrote the shelf's checkpoints and circuit files to %s\n", a.write.c_str());
    return 0;
  });
}

}  // namespace qkv::app
