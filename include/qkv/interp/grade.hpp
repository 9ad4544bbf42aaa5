#pragma once
/// @file
/// Grading the instruments on models whose circuit is known (docs/grade.md): every instrument
/// gives each head (and, where it can, each edge) a score; the circuit's heads are the positives,
/// every other head a negative, and the grade is how well the scores separate them:
///
///   AUROC = P(s_pos > s_neg) + P(s_pos = s_neg) / 2   over every positive-negative pair (Mann and
///           Whitney's U / (n_pos n_neg)): 1 every circuit head above every other, 0.5 chance
///   top-k precision, k = the number of positives: the share of positives among the k highest
///           scores, ties at the k-th score counted by their share of positives (the expected
///           precision under a random order of ties)
///
/// The head scores (each a magnitude, mean over the contrast pairs where the instrument reads one):
///   labels          max over the label scores of head_scores.hpp of score / its threshold
///                   (previous-token, first-token, self, induction, retrieval, role scores)
///   zero-ablation   |loss(head zeroed) - loss| over the test examples (ablation.hpp)
///   mean-ablation   the same with the head's mean output put in
///   patching        |restored| of activation patching (patching.hpp)
///   attribution     |the head's attribution patching score| (attribution.hpp)
///   eap, eap-ig     the sum of |s(u -> v)| over the edges out of the head
///   path-patching   |restored_all| with the head as the sender (path_patching.hpp)
///   dla             |the head's direct logit attribution| on the clean input (lens.hpp)
/// Edges (eap, eap-ig, path-patching): |s(u -> v)|, EAP-IG's names ("input", "a0.h1", "m0" ->
/// "a1.h0<k>", "m1", "logits"); path patching's edges are head -> head input or logits.

#include <cmath>
#include <string>
#include <vector>

#include "qkv/data/contrast.hpp"
#include "qkv/interp/ablation.hpp"
#include "qkv/model/load.hpp"
#include "qkv/tensor/names.hpp"

namespace qkv::interp {

/// The ground truth: the circuit's heads and its edges in EAP-IG's names.
struct Circuit {
  std::vector<HeadRef> heads;
  std::vector<std::pair<std::string, std::string>> edges;  ///< (from, to)
};
/// The circuit of a circuit file (docs/compile.md, "The circuit file"): its components of kind
/// "head", and its edges renamed: "embed" -> "input", "L.H" -> "aL.hH", "mlpL" -> "mL"; a reader
/// "L.H" at port p -> "aL.hH<p>", "output" -> "logits". ValueError naming `what` and the field
/// for a file that is not one.
Circuit read_circuit(const std::string& text, const std::string& what = "circuit");

/// AUROC of `scores` with `positive` marking the positives (ties count 1/2); NaN when there are no
/// positives or no negatives. ValueError when the sizes differ.
double auroc(const std::vector<double>& scores, const std::vector<bool>& positive);
/// Precision of the k highest scores (ties at the k-th counted by their share of positives); NaN
/// for k = 0 or k > scores.size().
double precision_at_k(const std::vector<double>& scores, const std::vector<bool>& positive, std::size_t k);

enum class Instrument { Labels, ZeroAblation, MeanAblation, Patching, Attribution, Eap, EapIg, PathPatching, Dla };
/// "labels", "zero-ablation", "mean-ablation", "patching", "attribution", "eap", "eap-ig",
/// "path-patching", "dla".
const NameTable<Instrument>& instrument_names();
/// The instruments that score edges: eap, eap-ig, path-patching.
bool scores_edges(Instrument instrument);

struct GradeRequest {
  Circuit truth;
  std::vector<data::ContrastPair> pairs;  ///< the causal instruments' inputs (>= 1)
  std::vector<Instrument> instruments;    ///< empty: every one, in the enum's order
  std::size_t examples = 256;             ///< test examples of labels and ablation (>= 1)
  std::size_t steps = 5;                  ///< EAP-IG's
};

/// One instrument's grade.
struct InstrumentGrade {
  Instrument instrument = Instrument::Labels;
  std::vector<double> head_scores;  ///< per head, model order (as GradeResult::heads)
  double head_auroc = NAN, head_precision = NAN;
  std::vector<std::pair<std::string, std::string>> edges;  ///< scored edges (eap, eap-ig, path-patching)
  std::vector<double> edge_scores;
  std::vector<bool> edge_positive;
  double edge_auroc = NAN, edge_precision = NAN;
  std::size_t edge_positives = 0;
};

struct GradeResult {
  std::string model;                ///< a name for tables
  std::vector<HeadRef> heads;       ///< every head, model order
  std::vector<bool> in_circuit;     ///< per head
  std::size_t pairs = 0, examples = 0;
  std::vector<InstrumentGrade> grades;
  /// Circuit heads ranked by an instrument: for each, (rank among all heads, 1 = the highest, ties
  /// at their worst rank; its score).
  std::vector<std::pair<std::size_t, double>> circuit_ranks(const InstrumentGrade& g) const;
};

/// Every instrument of `request` on `model` (loaded with data). Field errors: "pairs" (none),
/// "examples" (0), "steps", "truth" (no head, or a head outside the model).
GradeResult grade(model::LoadedModel& model, const GradeRequest& request, const std::string& name = "");

/// One table over models: a row per model and instrument (heads positive/total, AUROC, top-k
/// precision; edges the same; the circuit head the instrument ranks lowest, with its rank and score).
std::string format_grades(const std::vector<GradeResult>& results);
/// CSV with a header: model,instrument,heads,circuit_heads,head_auroc,head_precision,edges,
/// circuit_edges,edge_auroc,edge_precision,lowest_head,lowest_rank,lowest_score (NaN empty).
std::string grades_csv(const std::vector<GradeResult>& results);
/// [{"model", "pairs", "examples", "heads": ["L.H", ...], "circuit": [bool per head], "grades":
/// [{"instrument", "head_scores", "head_auroc", "head_precision", "edge_auroc", "edge_precision",
/// "edges": number, "circuit_edges": number, "circuit_ranks": [[rank, score] per circuit head]}]}].
std::string to_json(const std::vector<GradeResult>& results);

}  // namespace qkv::interp
