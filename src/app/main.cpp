// qkv: the command line. Parsing only; the commands live in commands.cpp.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "grade.hpp"
#include "qkv/tensor/names.hpp"
#include "runtime.hpp"

namespace {

// CLI11 takes an unknown first word for a positional argument and then only says "A subcommand
// is required". Returns true (after saying so) when the first word is missing or not a command,
// naming the word, the closest command and the list.
bool bad_command(const CLI::App& app, int argc, char** argv) {
  if (argc > 1 && argv[1][0] == '-') return false;  // --help and friends: CLI11's business
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(sub->get_name());
  const std::string word = argc > 1 ? argv[1] : "";
  if (std::find(names.begin(), names.end(), word) != names.end()) return false;
  std::string best, list;
  std::size_t best_d = 3;  // suggest only within two edits
  for (auto& n : names) {
    list += (list.empty() ? "" : ", ") + n;
    const std::size_t d = qkv::edit_distance(word, n);
    if (d < best_d) best_d = d, best = n;
  }
  const std::string what = argc > 1 ? "unknown command '" + word + "'" : "a command is required";
  std::fprintf(stderr, "qkv: %s%s; commands: %s (qkv --help describes them)\n", what.c_str(),
               best.empty() || argc < 2 ? "" : (" (did you mean '" + best + "'?)").c_str(), list.c_str());
  return true;
}

// Every number on the command line is checked here, as text, before CLI11 converts it: CLI11
// alone takes '' as 0, wraps -1 into 18446744073709551615 for unsigned options and 2^64 into 0,
// and says "Value many not in range 0.000000 to 1797693... (309 digits)". These say
// "--threads: expected a whole number >= 0, found 'many'".
CLI::Validator whole_number(unsigned long long min, unsigned long long max = ~0ULL) {
  const std::string range = max == ~0ULL ? ">= " + std::to_string(min)
                                         : "in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        const std::string expected = "expected a whole number " + range + ", found '" + s + "'";
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return expected + (!s.empty() && s[0] == '-' ? " (negative numbers are not allowed here)" : "");
        errno = 0;
        const unsigned long long v = std::strtoull(s.c_str(), nullptr, 10);
        if (errno == ERANGE) return expected + " (too large)";
        if (v < min || v > max) return expected;
        return "";
      },
      "INT" + range);
}

// A finite decimal number in [lo, hi] (or (lo, hi] with `open_low`).
CLI::Validator real_number(double lo, double hi, bool open_low = false) {
  char range[80];
  std::snprintf(range, sizeof range, "%s%g, %g]", open_low ? "(" : "[", lo, hi);
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = s.empty() ? 0 : std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || errno == ERANGE || v < lo || v > hi ||
            (open_low && v == lo))
          return std::string("expected a number in ") + range + ", found '" + s + "'";
        return "";
      },
      std::string("NUMBER in ") + range);
}

// CLI11 reports a mistyped option after the required ones it then misses ("--querry 0" as
// "--query is required"): name the unknown option first, with the closest one. True when it did.
bool bad_option(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return false;
  CLI::App* cmd = nullptr;
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (sub->get_name() == argv[1]) cmd = sub;
  if (!cmd) return false;
  std::vector<std::string> names = {"--help"};
  for (const CLI::Option* o : cmd->get_options())
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
  for (int i = 2; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "--") break;
    if (word.rfind("--", 0) != 0) continue;
    word = word.substr(0, word.find('='));
    if (std::find(names.begin(), names.end(), word) != names.end()) continue;
    const std::string hint = qkv::did_you_mean(word, names);
    std::fprintf(stderr, "qkv %s: unknown option '%s'%s (qkv %s --help lists them)\n", argv[1], word.c_str(),
                 hint.c_str(), argv[1]);
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string environment_error = qkv::app::prepare_process(argv);
  CLI::App app{"qkv: train attention models and look inside them"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Help for every command");
  int status = 0;

  qkv::app::TrainArgs t;
  auto* train = app.add_subcommand("train", "Train a model from a YAML config");
  train->add_option("config", t.config, "YAML config file (see configs/)")->required();
  train->add_option("--set", t.overrides, "Override a config key: --set section.key=value (repeatable)")->type_name("KEY=VALUE");
  train->add_option("--resume", t.resume, "Resume exactly from a checkpoint (.h5)");
  train->add_option("--out", t.out, "Run directory (default: run.out of the config)");
  train->add_flag("--overwrite", t.overwrite, "Replace the run the directory holds (its checkpoints, metrics and config)");
  train->add_option("--threads", t.threads, "Threads (default: train.threads, 0 = all cores)")->check(whole_number(0, 1024));
  train->add_option("--stop-after", t.stop_after, "Stop after this many steps, saving last.h5 (for tests)")->check(whole_number(0));
  train->add_flag("--quiet", t.quiet, "No progress output");
  train->add_flag("--strict", t.strict,
                  "Refuse (exit 2) instead of training in float32 when train.precision: bf16 does not pay on this CPU");
  train->callback([&] {
    t.has_out = train->count("--out") > 0;
    status = qkv::app::train(t);
  });

  std::string ckpt;
  std::vector<std::string> eval_overrides;
  int eval_threads = 0;
  bool eval_train = false;
  auto* eval = app.add_subcommand("eval", "Held-out metrics of a checkpoint");
  eval->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  eval->add_option("--set", eval_overrides, "Override a task key: --set task.key=value")->type_name("KEY=VALUE");
  eval->add_option("--threads", eval_threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
  eval->add_flag("--train", eval_train,
                 "Also a train column: the start of the training stream (with task.train_size, the fixed set)");
  bool eval_json = false;
  eval->add_flag("--json", eval_json, "Every number as JSON, for tools");
  eval->callback([&] { status = qkv::app::eval(ckpt, eval_overrides, eval_threads, eval_train, eval_json); });

  auto* inspect = app.add_subcommand("inspect", "Show a checkpoint: HDF5 tree, shapes, statistics, config");
  inspect->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  inspect->callback([&] { status = qkv::app::inspect(ckpt); });

  std::size_t example = 0;
  std::string attn_out;
  auto* attention = app.add_subcommand("attention", "Attention weights of every layer and head for one held-out example");
  attention->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  attention->add_option("--example", example, "Index into the held-out set")->check(whole_number(0));
  attention->add_option("--out", attn_out, "Also write the weights as CSV (layer,head,query,key,weight,...)");
  attention->callback([&] { status = qkv::app::attention(ckpt, example, attn_out); });

  std::size_t logits_count = 4;
  std::string logits_out;
  auto* logits = app.add_subcommand("logits", "Logits of the first held-out examples, as text (for parity checks)");
  logits->add_option("checkpoint", ckpt, "Checkpoint (.h5)")->required();
  logits->add_option("--count", logits_count, "Number of held-out examples")->check(whole_number(1));
  logits->add_option("--out", logits_out, "Output file")->required();
  logits->callback([&] { status = qkv::app::logits(ckpt, logits_count, logits_out); });

  bool gc_list = false;
  std::string gc_only;
  auto* gradcheck = app.add_subcommand("gradcheck", "Gradient-check every op, layer and model in float64 and print a table");
  gradcheck->add_flag("--list", gc_list, "List the checks instead of running them");
  gradcheck->add_option("--only", gc_only, "Run the checks whose name matches: a glob (* ?) or a substring");
  gradcheck->callback([&] { status = qkv::app::gradcheck(gc_list, gc_only); });

  qkv::app::SweepArgs s;
  auto* sweep = app.add_subcommand("sweep", "Train a grid of overrides x seeds; gather results.csv");
  sweep->add_option("sweep", s.file, "Sweep file (YAML: base, set, grid, seeds, out)")->required();
  sweep->add_option("--set", s.overrides, "Override a key of the base config for every run")->type_name("KEY=VALUE");
  sweep->add_option("--seeds", s.seeds, "Seeds instead of the file's (e.g. 1,2: a quick variant)")
      ->delimiter(',')
      ->check(whole_number(0));
  sweep->add_option("--grid", s.grid, "Replace one grid key's values (e.g. optimizer.lr=0.001: a quick variant)")
      ->type_name("KEY=V1,V2");
  sweep->add_option("--out", s.out, "Sweep directory (default: out of the sweep file)");
  sweep->add_option("--jobs", s.jobs, "Runs at once in this process (per MPI rank)")->check(whole_number(1));
  sweep->add_option("--threads", s.threads, "Threads per run (default: cores / jobs)")->check(whole_number(0, 1024));
  sweep->add_flag("--dry-run", s.dry_run, "List the runs and exit");
  sweep->callback([&] { status = qkv::app::sweep(s); });

  qkv::app::GenerateArgs g;
  auto* gen = app.add_subcommand("generate", "Continue a prompt with a decoder-only language model (text on stdout)");
  gen->add_option("checkpoint", g.checkpoint, "Checkpoint (.h5) of a model.arch: decoder run")->required();
  gen->add_option("--prompt", g.prompt, "Text to continue (token ids with --ids)")->required();
  gen->add_flag("--ids", g.ids, "The prompt and the output are token ids (synthetic tasks)");
  gen->add_option("--max-tokens", g.max_tokens, "New tokens to generate (default 200)")->check(whole_number(1));
  gen->add_option("--temperature", g.temperature, "Sampling temperature; 0 = greedy (default 1)")->check(real_number(0, 1e6));
  gen->add_option("--top-k", g.top_k, "Sample from the k most likely tokens only")->check(whole_number(1));
  gen->add_option("--top-p", g.top_p, "Nucleus sampling: the most likely tokens whose probability reaches p, in (0, 1]")
      ->check(real_number(0, 1, true));
  gen->add_option("--seed", g.seed, "Sampling seed: the same seed gives the same text (default 0)")->check(whole_number(0));
  gen->add_flag("--no-cache", g.no_cache, "Recompute the whole window for every token instead of using the KV cache");
  gen->add_option("--threads", g.threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
  gen->add_flag("--json", g.json, "The prompt's and the new tokens' ids and the new text as JSON, at the end");
  gen->callback([&] { status = qkv::app::generate(g); });

  qkv::app::FillArgs fl;
  auto* fill = app.add_subcommand("fill", "Fill the masks of a text with a masked language model (task.objective: masked)");
  fill->add_option("checkpoint", fl.checkpoint, "Checkpoint (.h5) of a masked language model")->required();
  fill->add_option("--text", fl.text, "Text with one or more [MASK] where tokens are to be filled, e.g. 我爱吃[MASK]果")->required();
  fill->add_option("--top-k", fl.top_k, "Fills shown per mask (default 5)")->check(whole_number(1, 1000));
  fill->add_option("--mask-text", fl.mask_text,
                   "How a mask is written in --text (default [MASK]); to have the characters [MASK] themselves in the "
                   "text, choose another spelling, e.g. --mask-text _");
  fill->add_option("--threads", fl.threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
  fill->add_flag("--json", fl.json, "Every number as JSON, for tools");
  fill->callback([&] { status = qkv::app::fill(fl); });

  // The instruments: one input is --text (or --ids) or --example.
  auto add_input = [](CLI::App* cmd, qkv::app::InputChoice& in) {
    auto* text = cmd->add_option("--text", in.text, "Input text (token ids with --ids)");
    cmd->add_flag("--ids", in.ids, "--text is token ids separated by spaces (synthetic tasks)")->needs(text);
    cmd->add_option("--mask-text", in.mask_text, "How a mask is written in --text, for masked models (default [MASK])")
        ->needs(text);
    cmd->add_option("--example", in.example, "Held-out (validation) example index, when no --text (default 0)")
        ->check(whole_number(0))
        ->excludes(text);
  };
  auto text_given = [](CLI::App* cmd, qkv::app::InputChoice& in) { in.has_text = cmd->count("--text") > 0; };
  auto instrument = [&](const char* name, const char* what, std::string& checkpoint, int& threads) {
    auto* cmd = app.add_subcommand(name, what);
    cmd->add_option("checkpoint", checkpoint, "Checkpoint (.h5)")->required();
    cmd->add_option("--threads", threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
    return cmd;
  };

  qkv::app::HeadsArgs hd;
  auto* heads = instrument("heads", "Pattern scores and labels of every attention head, over held-out examples", hd.checkpoint, hd.threads);
  heads->add_option("--examples", hd.examples, "Held-out (test) examples scored (default 64)")->check(whole_number(1));
  heads->add_option("--csv", hd.csv, "Also write the table as CSV");
  heads->add_option("--similarity", hd.similarity,
                    "Also write how alike every two heads of a layer attend (Jensen-Shannon divergence, bits) as CSV");
  heads->add_flag("--json", hd.json, "Every number as JSON, for tools");
  heads->callback([&] { status = qkv::app::heads(hd); });

  qkv::app::SwapArgs sw;
  auto* swap = instrument("swap", "Recall: does the prediction follow the value in the context when it is replaced?",
                          sw.checkpoint, sw.threads);
  swap->add_option("--examples", sw.examples, "Test examples probed (default: all)")->check(whole_number(1));
  swap->add_option("--seed", sw.seed, "Seed of the replacement values (default 0)")->check(whole_number(0));
  swap->add_flag("--json", sw.json, "Every number as JSON, for tools");
  swap->callback([&] { status = qkv::app::swap(sw); });

  qkv::app::AblateArgs ab;
  auto* ablate = instrument("ablate", "Held-out loss and accuracy with attention heads removed", ab.checkpoint, ab.threads);
  ablate->add_option("--heads", ab.heads, "Heads to remove together: LAYER.HEAD,... (1.* = all of layer 1); "
                                          "default: each head alone");
  ablate->add_option("--mode", ab.mode, "zero, or mean (the head's mean output over the validation set)");
  ablate->add_flag("--prune", ab.prune, "The pruning curve of Michel et al. (2019): heads removed by least importance");
  ablate->add_option("--step", ab.step, "With --prune: heads removed per step (default 1)")->check(whole_number(1));
  ablate->add_option("--examples", ab.examples, "Test examples evaluated (default: all)")->check(whole_number(1));
  ablate->add_option("--relation", ab.relation,
                     "Score only the tokens that have this gold relation, e.g. verb-object for verb->object (grammar models; qkv heads lists them)");
  ablate->add_option("--csv", ab.csv, "Write the table as CSV");
  ablate->add_option("--plot", ab.plot, "With --prune: draw the curve as PNG (matplotlib)");
  ablate->add_flag("--json", ab.json, "Every number as JSON, for tools");
  ablate->callback([&] {
    ab.has_heads = ablate->count("--heads") > 0;
    status = qkv::app::ablate(ab);
  });

  qkv::app::ExplainArgs ex;
  auto* explain = instrument("explain", "One query of one head, step by step: scores, scale, mask, softmax, output", ex.checkpoint, ex.threads);
  add_input(explain, ex.input);
  explain->add_option("--layer", ex.layer, "Attention layer, by index in model order (qkv heads lists them); default: every layer")
      ->check(whole_number(0));
  explain->add_option("--head", ex.head, "Head of that layer; default: every head, as a table of where each one looks")
      ->check(whole_number(0));
  explain->add_option("--query", ex.query, "Query position")->check(whole_number(0))->required();
  explain->add_option("--dims", ex.dims, "Leading vector dimensions printed (default 8)")->check(whole_number(1));
  explain->add_flag("--json", ex.json, "Every number as JSON, for tools");
  explain->callback([&] {
    text_given(explain, ex.input);
    ex.has_layer = explain->count("--layer") > 0;
    ex.has_head = explain->count("--head") > 0;
    status = qkv::app::explain(ex);
  });

  qkv::app::ViewArgs vw;
  auto* view = instrument("view", "A self-contained HTML page of every attention head on one input", vw.checkpoint, vw.threads);
  add_input(view, vw.input);
  view->add_option("--out", vw.out, "Output page (.html)")->required();
  view->add_option("--snapshots", vw.snapshots, "snapshots.h5 to show (default: the run directory's, when present)");
  view->add_flag("--no-snapshots", vw.no_snapshots, "Leave training snapshots out");
  view->callback([&] {
    text_given(view, vw.input);
    status = qkv::app::view(vw);
  });

  // The two-run instruments share their inputs, position and tokens; `run` is the command.
  auto two_runs = [&](const char* name, const char* what, qkv::app::PatchArgs& a, std::function<int()> run) {
    auto* cmd = instrument(name, what, a.checkpoint, a.threads);
    cmd->callback([&a, &status, cmd, run] {
      a.has_position = cmd->count("--position") > 0;
      status = run();
    });
    cmd->add_option("--clean", a.clean, "The clean input text (token ids with --ids)")->required();
    cmd->add_option("--corrupt", a.corrupt, "The corrupted input, as long as the clean one")->required();
    cmd->add_flag("--ids", a.ids, "--clean, --corrupt, --answer and --wrong are token ids (synthetic tasks)");
    cmd->add_option("--mask-text", a.mask_text, "How a mask is written in the inputs, for masked models (default [MASK])");
    cmd->add_option("--position", a.position,
                    "Output position measured (default: the first mask of the clean input, else of the corrupted input, else the last position)")
        ->check(whole_number(0));
    cmd->add_option("--answer", a.answer, "The clean answer token (default: the clean run's most likely token there)");
    cmd->add_option("--wrong", a.wrong, "The corrupted answer token (default: the corrupted run's most likely token)");
    cmd->add_flag("--json", a.json, "Every number as JSON, for tools");
    return cmd;
  };
  qkv::app::PatchArgs pa;
  auto* patch = two_runs("patch", "Activation patching: the share of the answer each head's output carries from a clean "
                                  "input into a corrupted one", pa, [&] { return qkv::app::patch(pa); });
  patch->add_option("--point", pa.point, "The hook point patched per head: hook_z (default), hook_q, hook_k, hook_v, hook_pattern");

  qkv::app::AttributeArgs at;
  auto* attribute = two_runs("attribute", "Attribution patching, EAP and EAP-IG: activation patching estimated from "
                                          "gradients, per head and position and per edge", at,
                             [&] { return qkv::app::attribute(at); });
  attribute->add_option("--method", at.method, "attribution, eap or eap-ig (default)");
  attribute->add_option("--steps", at.steps, "EAP-IG's interpolation steps (default 5)")->check(whole_number(1, 1000));
  attribute->add_flag("--noise", at.noise, "The noising direction: gradients at the clean run (default: denoising)");
  attribute->add_option("--edges", at.edges, "Edges printed, the largest first (default 12)")->check(whole_number(0));

  qkv::app::PathArgs pt;
  auto* path = two_runs("path", "Path patching: the share of the answer one head carries through each receiver "
                                "(a later head's query, key or value input, or the logits)", pt,
                        [&] { return qkv::app::path(pt); });
  path->add_option("--sender", pt.sender, "The sending head, LAYER.HEAD")->required();
  path->add_option("--receivers", pt.receivers, "Receivers L.H<q|k|v> (or L.H.q), logits; default: every later head's "
                                                "three inputs and the logits")->delimiter(',');

  qkv::app::LensArgs ln;
  auto* lens = instrument("lens", "The logit lens (the residual stream after each block, read by the output layer) and "
                                  "direct logit attribution per head", ln.checkpoint, ln.threads);
  add_input(lens, ln.input);
  lens->add_option("--position", ln.position, "DLA's position (default: the first mask, else the last position)")
      ->check(whole_number(0));
  lens->add_option("--answer", ln.answer, "DLA's answer token (default: the most likely one at the position)");
  lens->add_option("--wrong", ln.wrong, "DLA's other token (default: the second most likely)");
  lens->add_option("--top-k", ln.top_k, "The lens's candidates per stage and position in --json (default 3)")
      ->check(whole_number(1, 50));
  lens->add_flag("--json", ln.json, "Every number as JSON, for tools");
  lens->callback([&] {
    text_given(lens, ln.input);
    ln.has_position = lens->count("--position") > 0;
    status = qkv::app::lens(ln);
  });

  qkv::app::CompileArgs cp;
  auto* compile = app.add_subcommand("compile", "Compile a rasp program into a model's weights (a checkpoint) and its "
                                                "circuit file, checked against the program first (docs/compile.md)");
  compile->add_option("program", cp.program, "Program (.rasp)")->required();
  compile->add_option("--out", cp.out, "Checkpoint to write (.h5); the circuit goes beside it (.circuit.json)")->required();
  compile->add_option("--scale", cp.scale, "Attention softmax scale lambda (default 100)")->check(real_number(1, 1e4));
  compile->add_option("--check", cp.check, "Inputs checked: the whole domain when it has at most this many, else this "
                                           "many random ones (default 200000)")->check(whole_number(1));
  compile->add_option("--threads", cp.threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
  compile->callback([&] { status = qkv::app::compile(cp); });

  qkv::app::ServeArgs sv;
  auto* serve = app.add_subcommand("serve", "The studio: a local web page to type inputs and watch every head of your "
                                            "models, remove and patch heads, and follow a training run");
  serve->add_option("checkpoints", sv.checkpoints, "Checkpoints (.h5) to serve")->required();
  serve->add_option("--run", sv.run, "A run directory to follow as it trains: its loss curves and training snapshots");
  serve->add_option("--host", sv.host, "Address to listen on (default 127.0.0.1: this machine only)");
  serve->add_option("--port", sv.port, "Port (default 8080; 0: a free port, printed)")->check(whole_number(0, 65535));
  serve->add_option("--threads", sv.threads, "Threads per request (default 1)")->check(whole_number(1, 1024));
  serve->callback([&] { status = qkv::app::serve(sv); });

  qkv::app::GradeArgs gr;  // docs/grade.md
  auto* grade = app.add_subcommand("grade", "Grade every instrument on the shelf of known circuits: head and edge AUROC "
                                            "and top-k precision (docs/grade.md)");
  grade->add_option("models", gr.models, "Shelf models (default: induction who_what reverse sort histogram), or a "
                                          "trained checkpoint of a program's task (.h5, with --circuit)");
  grade->add_option("--circuit", gr.circuit, "The circuit file of a checkpoint given (its ground truth)");
  grade->add_option("--instruments", gr.instruments, "Instruments (default: all)")->delimiter(',');
  grade->add_option("--programs", gr.programs, "Directory of the shelf's .rasp programs (default programs)");
  grade->add_option("--pairs", gr.pairs, "Clean/corrupted pairs per model (default 8)")->check(whole_number(1, 1000));
  grade->add_option("--examples", gr.examples, "Test examples of labels and ablation (default 256)")->check(whole_number(1));
  grade->add_option("--steps", gr.steps, "EAP-IG's interpolation steps (default 5)")->check(whole_number(1, 1000));
  grade->add_option("--seed", gr.seed, "Seed of the pairs (default 0)")->check(whole_number(0));
  grade->add_option("--csv", gr.csv, "Also write the table as CSV");
  grade->add_option("--write", gr.write, "Write the shelf's checkpoints and circuit files to this directory");
  grade->add_flag("--json", gr.json, "Every score as JSON, for tools");
  grade->add_option("--threads", gr.threads, "Threads (0 = all cores)")->check(whole_number(0, 1024));
  grade->callback([&] { status = qkv::app::grade(gr); });

  auto* info = app.add_subcommand("info", "Version, BLAS kernel, threads and MPI");
  info->callback([&] { status = qkv::app::info(); });

  if (bad_command(app, argc, argv) || bad_option(app, argc, argv)) return 2;
  if (!environment_error.empty()) {
    std::fprintf(stderr, "qkv: %s\n", environment_error.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "qkv: %s (qkv %s --help describes the arguments)\n", e.what(), argv[1]);
    return 2;
  }
  return status;
}
