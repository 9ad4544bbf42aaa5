// The instruments: qkv heads, qkv ablate, qkv explain (docs/instruments.md).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "commands.hpp"
#include "loaded.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/interp/explain.hpp"
#include "qkv/interp/head_scores.hpp"
#include "qkv/interp/value_swap.hpp"
#include "qkv/io/files.hpp"
#include "qkv/tensor/parallel.hpp"

namespace qkv::app {
namespace {

// The first of `dirs` (':'-separated) that holds `name`.
std::string find_script(const std::string& name) {
  const std::string dirs = QKV_SCRIPT_DIRS;
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string path = dirs.substr(start, end - start) + "/" + name;
    if (::access(path.c_str(), R_OK) == 0) return path;
    start = end + 1;
  }
  throw io::IoError("cannot find " + name + " (looked in " + dirs + ")");
}

// Run /usr/bin/python3 SCRIPT ARGS... (plots are drawn by matplotlib); IoError when it fails.
void run_python(const std::string& script, const std::vector<std::string>& args) {
  std::string cmd = "/usr/bin/python3 '" + find_script(script) + "'";
  for (auto& a : args) {
    std::string quoted;
    for (char c : a) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + quoted + "'";
  }
  if (std::system(cmd.c_str()) != 0)
    throw io::IoError(script + " failed (it needs /usr/bin/python3 with matplotlib: apt-get install python3-matplotlib)");
}

std::string signed_change(double x, bool percent) {
  char b[32];
  std::snprintf(b, sizeof b, percent ? "%+.2f%%" : "%+.4f", percent ? 100 * x : x);
  return b;
}

}  // namespace

int heads(const HeadsArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    if (!a.csv.empty()) io::check_output_path(a.csv, {a.checkpoint}, "--csv");
    if (!a.similarity.empty()) io::check_output_path(a.similarity, {a.checkpoint, a.csv}, "--similarity");
    Loaded l = load(a.checkpoint, {});
    interp::HeadsRequest request;
    request.examples = a.examples;
    request.similarity = !a.similarity.empty();
    const interp::HeadsResult r = interp::heads(l, request);
    if (a.json) {
      print_json(interp::to_json(r));
    } else {
      std::printf("%s: %s, %zu held-out (test) examples; induction score on %zu random sequences repeated twice\n",
                  a.checkpoint.c_str(), l.task->name().c_str(), r.examples, r.examples);
      std::printf("%s", interp::format_head_scores(r.heads, r.baselines).c_str());
      std::printf("labels: %sprevious-token, first-token, self (>= 0.5), induction (>= 0.4), retrieval (>= 0.5); "
                  "docs/instruments.md defines each score\n",
                  r.baselines.empty() ? "" : "a relation (role score >= 0.5 and 0.1 above its best fixed offset), else ");
    }
    if (!a.csv.empty()) {
      io::write_file_atomic(a.csv, interp::head_scores_csv(r.heads, r.baselines));
      if (!a.json) std::printf("wrote %s\n", a.csv.c_str());
    }
    if (!a.similarity.empty()) {
      io::write_file_atomic(a.similarity, interp::head_divergence_csv(*l.model, r.similarity));
      if (!a.json) std::printf("wrote %s\n", a.similarity.c_str());
    }
    return 0;
  });
}

int swap(const SwapArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load(a.checkpoint, {});
    const interp::ValueSwapResult r = interp::value_swap(l, interp::SwapRequest{a.examples, a.seed});
    if (a.json) {
      print_json(interp::to_json(r));
      return 0;
    }
    std::printf("%s: %s, %zu test examples: in each, the value of the first query's key replaced by another\n",
                a.checkpoint.c_str(), l.task->name().c_str(), r.examples);
    std::printf("  queries of the swapped keys  %zu\n", r.queries);
    std::printf("  right before the swap        %6.2f%%\n", 100 * r.intact);
    std::printf("  follow the new value         %6.2f%%\n", 100 * r.follow);
    std::printf("  stay with the old value      %6.2f%%\n", 100 * r.stay);
    return 0;
  });
}

int ablate(const AblateArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    if (!a.plot.empty() && !a.prune) throw ValueError("--plot draws the pruning curve: use it with --prune");
    if (!a.csv.empty()) io::check_output_path(a.csv, {a.checkpoint}, "--csv");
    if (!a.plot.empty()) io::check_output_path(a.plot, {a.checkpoint, a.csv}, "--plot");
    if (!a.plot.empty() && a.plot == a.csv) throw ValueError("--plot and --csv name the same file " + a.plot);
    interp::AblateRequest request;
    request.mode = interp::ablation_mode_names().parse(a.mode, "--mode");
    request.examples = a.examples;
    request.relation = a.relation;
    request.prune = a.prune;
    request.step = a.step;
    Loaded l = load(a.checkpoint, {});
    if (a.has_heads) request.heads = interp::parse_heads(a.heads, interp::heads_per_layer(*l.model));
    const interp::AblateResult r = interp::ablate(l, request);
    if (a.json) print_json(interp::to_json(r));
    auto say = [&](auto... args) {
      if (!a.json) std::printf(args...);
    };
    const model::EvalMetrics& base = r.intact;
    const bool mean = request.mode == interp::AblationMode::Mean;
    say("%s: %s, %zu test examples, %s ablation%s\n", a.checkpoint.c_str(), l.task->name().c_str(), r.examples,
        a.mode.c_str(), mean ? " (each head's mean output over the validation set)" : "");
    say("intact model: loss %.4f, token accuracy %.2f%%\n", base.loss, 100 * base.token_accuracy);
    std::string csv;
    if (a.prune) {
      say("pruning curve (Michel et al. 2019: importance |dL/dxi_h| on the validation set, recomputed after "
          "each removal)\n%8s %9s %10s %10s  %s\n", "removed", "fraction", "loss", "accuracy", "last removed");
      csv = "removed,fraction,loss,token_accuracy,sequence_accuracy,heads\n";
      for (auto& p : r.curve) {
        std::string last, all;
        for (std::size_t k = 0; k < p.removed.size(); ++k) all += (k ? " " : "") + interp::head_name(p.removed[k]);
        if (!p.removed.empty()) last = interp::head_name(p.removed.back());
        say("%8zu %9.3f %10.4f %9.2f%%  %s\n", p.removed.size(), p.fraction, p.metrics.loss, 100 * p.metrics.token_accuracy,
            last.c_str());
        char line[160];
        std::snprintf(line, sizeof line, "%zu,%.6f,%.9g,%.9g,%.9g,", p.removed.size(), p.fraction, p.metrics.loss,
                      p.metrics.token_accuracy, p.metrics.sequence_accuracy);
        csv += line + all + "\n";
      }
    } else if (r.ablated) {
      const model::EvalMetrics& m = r.ablated->metrics;
      std::string names;
      for (auto& h : r.ablated->heads) names += (names.empty() ? "" : ",") + interp::head_name(h);
      say("without %s: loss %.4f (%s), token accuracy %.2f%% (%s)\n", names.c_str(), m.loss,
          signed_change(m.loss - base.loss, false).c_str(), 100 * m.token_accuracy,
          signed_change(m.token_accuracy - base.token_accuracy, true).c_str());
      char line[200];
      std::snprintf(line, sizeof line, "\"%s\",%.9g,%.9g,%.9g,%.9g\n", names.c_str(), m.loss, m.token_accuracy,
                    m.loss - base.loss, m.token_accuracy - base.token_accuracy);
      csv = std::string("heads,loss,token_accuracy,loss_change,accuracy_change\n") + line;
    } else {
      auto rows = r.each;
      std::stable_sort(rows.begin(), rows.end(), [](auto& x, auto& y) { return x.metrics.loss > y.metrics.loss; });
      say("each head removed alone, most harmful first:\n%6s %10s %10s %10s %10s\n", "head", "loss", "change", "accuracy",
          "change");
      csv = "layer,head,loss,token_accuracy,loss_change,accuracy_change\n";
      for (auto& row : rows) {
        const interp::HeadRef h = row.heads[0];
        const model::EvalMetrics& m = row.metrics;
        say("%6s %10.4f %10s %9.2f%% %10s\n", interp::head_name(h).c_str(), m.loss, signed_change(m.loss - base.loss, false).c_str(),
            100 * m.token_accuracy, signed_change(m.token_accuracy - base.token_accuracy, true).c_str());
        char line[160];
        std::snprintf(line, sizeof line, "%zu,%zu,%.9g,%.9g,%.9g,%.9g\n", h.layer, h.head, m.loss, m.token_accuracy,
                      m.loss - base.loss, m.token_accuracy - base.token_accuracy);
        csv += line;
      }
    }
    if (!a.csv.empty()) {
      io::write_file_atomic(a.csv, csv);
      say("wrote %s\n", a.csv.c_str());
    }
    if (!a.plot.empty()) {
      // The script reads the table from a file and draws into a temporary file beside the
      // plot, renamed into place when it succeeded: the plot is whole or absent.
      const std::string tmp = a.plot + ".tmp-" + std::to_string(::getpid()), table = tmp + ".csv", png = tmp + ".png";
      io::write_file_atomic(table, csv);
      try {
        run_python("plot_prune.py", {table, png, a.checkpoint});
      } catch (...) {
        std::remove(table.c_str()), std::remove(png.c_str());
        throw;
      }
      std::remove(table.c_str());
      if (std::rename(png.c_str(), a.plot.c_str()) != 0) {
        std::remove(png.c_str());
        throw io::IoError("cannot write " + a.plot + ": " + std::strerror(errno));
      }
      say("wrote %s\n", a.plot.c_str());
    }
    return 0;
  });
}

int explain(const ExplainArgs& a) {
  return guarded([&] {
    if (a.threads > 0) set_num_threads(a.threads);
    Loaded l = load_for(a.checkpoint, a.input);
    interp::ExplainRequest r;
    r.input = input_request(a.input, &l);
    if (a.has_layer) r.layer = a.layer;
    if (a.has_head) r.head = a.head;
    r.query = a.query;
    const std::vector<interp::QueryExplanation> all = interp::explain(l, r);
    const bool one = a.has_layer && a.has_head;
    if (a.json)
      std::printf("%s", one ? interp::explanation_json(all.front()).c_str() : interp::explanations_json(all).c_str());
    else
      std::printf("%s, %s\n%s", a.checkpoint.c_str(), model::describe(r.input).c_str(),
                  one ? interp::format_explanation(all.front(), a.dims).c_str() : interp::format_query_survey(all).c_str());
    return 0;
  });
}

}  // namespace qkv::app
