// qkv compile: a rasp program into a checkpoint and its circuit file, checked before it is written.
#include <cstdio>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/io/files.hpp"
#include "qkv/compile/compile.hpp"
#include "qkv/data/program_task.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {

namespace {

std::string thousands(std::size_t n) {
  std::string s = std::to_string(n);
  for (std::size_t i = s.size(); i > 3; i -= 3) s.insert(i - 3, ",");
  return s;
}

}  // namespace

int compile(const CompileArgs& args) {
  return guarded([&] {
    if (args.threads > 0) set_num_threads(args.threads);
    const std::string text = io::read_file(args.program, io::kMaxTextFileBytes, "program");
    const std::string circuit = compile::circuit_path(args.out);
    io::check_output_path(args.out, {args.program}, "--out");
    io::check_output_path(circuit, {args.program, args.out}, "--out (its circuit file)");
    const rasp::Program program = rasp::parse_program(text, args.program);
    compile::CompileOptions options;
    options.attention_scale = args.scale;
    const compile::CompiledModel c = compile::compile_program(program, options);

    // The model as every command will load it (config, task and weights back from the checkpoint).
    const model::LoadedModel l = model::load_model(c.checkpoint, args.out, {}, false);
    const compile::CheckResult r = compile::check_model(*l.model, program, args.check);
    const auto& m = c.config.model;
    std::printf("%s: output %s, %s of %zu layer%s x %zu head%s, d_model %zu, d_ff %zu%s, attention scale %g\n",
                args.program.c_str(), c.info.output.c_str(), program.causal ? "a decoder (causal)" : "an encoder",
                m.layers, m.layers == 1 ? "" : "s", m.attn.num_heads, m.attn.num_heads == 1 ? "" : "s", m.d_model,
                m.ff.hidden, m.attn_only ? " (attention only)" : "", args.scale);
    for (const auto& op : c.info.ops)
      std::printf("  %-6s %-22s %-12s line %zu: %s\n", op.component.c_str(), op.op.c_str(), op.sop.c_str(), op.line,
                  op.expr.c_str());
    const std::string what = r.exhaustive ? "every input of the domain (" + thousands(r.inputs) + ", lengths 1.." +
                                                std::to_string(program.max_len) + ")"
                                          : thousands(r.inputs) + " random inputs (the domain has " +
                                                (r.domain ? thousands(r.domain) : std::string("more than 2^63")) + ")";
    std::printf("checked on %s: %s of %s positions right (%s positions where the output is None or Undefined not scored)\n",
                what.c_str(), percent(r.positions ? double(r.correct) / double(r.positions) : 1.0).c_str(),
                thousands(r.positions).c_str(), thousands(r.skipped).c_str());
    if (!r.ok())
      throw Error("the compiled model disagrees with its program (" + r.first_error +
                  "); nothing was written. Try a larger --scale, and report the program");
    io::save_checkpoint(args.out, c.checkpoint);
    io::write_file_atomic(circuit, c.circuit_json);
    std::printf("wrote %s and %s\n", args.out.c_str(), circuit.c_str());
    return 0;
  });
}

}  // namespace qkv::app
