#pragma once
/// @file
/// Compiling rasp programs into the weights of a qkv transformer (Tracr's construction, Lindner et
/// al. 2023; docs/compile.md has the maths): a residual stream of named one-hot and numerical
/// dimensions, an attention head per aggregate and selector_width, an MLP per map, layers
/// allocated by the longest path from the inputs, written as an ordinary checkpoint (an encoder,
/// or a decoder for a causal program; no LayerNorm, ReLU, learned positions) whose task is the
/// program's (data/program_task.hpp).

#include <cstdint>
#include <string>

#include "qkv/config/config.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/model/compiled.hpp"
#include "qkv/model/task_model.hpp"
#include "qkv/rasp/program.hpp"

namespace qkv::compile {

struct CompileOptions {
  /// lambda, the attention's softmax scale (model.scale): a selected key scores lambda, BOS
  /// lambda / 2, the others 0, so a selection's weights are within e^(-lambda/2) of hard ones.
  double attention_scale = 100;
  /// The output layer's weight on the output's one-hot: the right class's logit, the others 0.
  double output_gain = 20;
  /// > 0, finite; throws OptionError.
  void validate() const;
};

/// A compiled program: its config (the model's sizes; task.name program with task.program the
/// source), the checkpoint to save (weights, config, /compiled) and what the parts mean.
struct CompiledModel {
  config::Config config;
  io::Checkpoint checkpoint;
  model::CompiledInfo info;
  /// The circuit as JSON (docs/compile.md, "The circuit file"): components, ops and edges.
  std::string circuit_json;
};

/// Compiles the operations the output needs (the others are left out). ValueError when a
/// numerical S-op's values are too close together to tell apart in float32 (a map of it needs
/// thresholds between them), naming it.
CompiledModel compile_program(const rasp::Program& program, const CompileOptions& options = {});

/// Where the circuit of the checkpoint `checkpoint_path` goes: "x.h5" -> "x.circuit.json"
/// (other names: the name + ".circuit.json").
std::string circuit_path(const std::string& checkpoint_path);

/// A compiled model checked against its program's reference interpreter.
struct CheckResult {
  std::size_t inputs = 0;     ///< inputs run
  bool exhaustive = false;    ///< every input of the domain (lengths 1..max_len)
  std::size_t domain = 0;     ///< how many inputs the domain has (0 when more than 2^63)
  std::size_t positions = 0;  ///< positions whose output is a value (scored)
  std::size_t skipped = 0;    ///< positions whose output is None or Undefined (not scored)
  std::size_t correct = 0;    ///< scored positions where the model's argmax is the output
  std::string first_error;    ///< the first wrong position: its input, expected and found
  bool ok() const { return correct == positions; }
};

/// Runs `model` (whose task is `program`'s) on every input of the domain when it has at most
/// `limit` inputs, else on `limit` inputs drawn from `seed` (lengths and tokens uniform), in
/// batches of `batch` rows, and compares its argmax with rasp::run at every position.
CheckResult check_model(model::TaskModel& model, const rasp::Program& program, std::size_t limit,
                        std::uint64_t seed = 0, std::size_t batch = 256);

}  // namespace qkv::compile
