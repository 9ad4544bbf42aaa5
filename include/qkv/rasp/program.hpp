#pragma once
/// @file
/// A small RASP (Weiss et al. 2021, "Thinking like Transformers"): programs over a sequence of
/// tokens, read from text (docs/compile.md is the language reference), checked, and with the
/// value set of every sequence inferred (Tracr's basis inference, Lindner et al. 2023), so that
/// qkv::compile can build a transformer that computes them and rasp::evaluate can run them.
///
///     vocab a b c                                  # the input tokens
///     max_len 5                                    # the longest input
///     length  = selector_width(select(tokens, tokens, TRUE))
///     opp     = sequence_map(indices, length, y - x - 1)
///     reverse = aggregate(select(indices, opp, EQ), tokens)
///     output reverse
///
/// A sequence-valued operation (an S-op) is categorical (one of finitely many values at each
/// position) or numerical (a number); a selector (select) is a boolean matrix over (key,
/// query) positions, used by aggregate and selector_width only.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "qkv/tensor/tensor.hpp"

namespace qkv::rasp {

/// A bad program: `path:line: construct: message` (line 0 when the program as a whole is wrong,
/// e.g. it has no output).
struct ProgramError : ValueError {
  ProgramError(const std::string& path, int line, const std::string& construct, const std::string& message);
  std::string path;
  int line;
  std::string construct;
  std::string message;
};

/// One value of a sequence: a boolean, a number or a symbol (a word of the vocabulary, "猫").
/// Values order totally: booleans (false < true) before numbers before symbols (by their UTF-8
/// bytes); comparing values of different kinds with LT, LEQ, GT, GEQ is a program error.
struct Value {
  enum class Kind { Bool, Number, Symbol };
  Kind kind = Kind::Number;
  double number = 0;   ///< Bool: 0 or 1
  std::string symbol;  ///< Symbol only

  static Value of_number(double x);
  static Value of_bool(bool b);
  static Value of_symbol(std::string s);
  bool is_number() const { return kind == Kind::Number; }
  /// "3", "0.5", "true", "a": how residual labels and messages write it (numbers in the shortest
  /// text that reads back to the same double).
  std::string label() const;
  /// The value as a program writes it in an expression ("a" quoted, numbers and booleans bare).
  std::string literal() const;
  friend bool operator==(const Value& a, const Value& b);
  friend bool operator!=(const Value& a, const Value& b) { return !(a == b); }
  friend bool operator<(const Value& a, const Value& b);
};

/// "number", "boolean", "symbol".
const char* kind_name(Value::Kind kind);

/// How an S-op is stored in a transformer's residual stream: one dimension per value
/// (categorical, one-hot) or one dimension holding the number (numerical).
enum class Encoding { Categorical, Numerical };
const char* name(Encoding encoding);

/// select(keys, queries, P) selects key position k for query position q when P(keys[k],
/// queries[q]): EQ k == q, LT k < q, LEQ k <= q, GT k > q, GEQ k >= q, NEQ k != q (the key's
/// value on the left, as in Tracr), TRUE always, FALSE never.
enum class Predicate { EQ, LT, LEQ, GT, GEQ, NEQ, True, False };
/// "EQ", "LT", "LEQ", "GT", "GEQ", "NEQ", "TRUE", "FALSE".
const char* name(Predicate predicate);
/// P(key, query); ValueError when an order comparison meets values of different kinds.
bool holds(Predicate predicate, const Value& key, const Value& query);

/// The function of a map (x) or sequence_map (x, y): an expression or a lookup table.
class Function {
 public:
  virtual ~Function() = default;
  /// f(x) or f(x, y); ValueError with what went wrong (division by zero, "a" + 1, a table without
  /// the value) for that input.
  virtual Value apply(const Value& x, const Value& y) const = 0;
  /// The source text, as written.
  virtual std::string text() const = 0;
};

/// The operations: the two inputs, the element-wise maps, and the attention operations.
enum class Op { Tokens, Indices, Map, SequenceMap, Select, Aggregate, SelectorWidth };
/// "tokens", "indices", "map", "sequence_map", "select", "aggregate", "selector_width".
const char* name(Op op);

/// One operation of a program, with what inference found about its values.
struct Node {
  std::string name;  ///< the name it is bound to, or "<statement>.<op><k>" when nested anonymously
  Op op = Op::Tokens;
  Encoding encoding = Encoding::Categorical;  ///< S-ops only (not Select)
  int line = 0;                               ///< where it is written
  std::string text;                           ///< its source text, e.g. "select(indices, opp, EQ)"
  /// Node indices: map [input]; sequence_map [x, y]; select [keys, queries]; aggregate [selector,
  /// values]; selector_width [selector]. Inputs come earlier in Program::nodes.
  std::vector<std::size_t> inputs;
  Predicate predicate = Predicate::EQ;         ///< select only
  std::shared_ptr<const Function> function;   ///< map and sequence_map only

  // ---- inferred (rasp::parse_program fills them) ----
  /// Every value the S-op can take at a position, sorted (Value's order), distinct. Numerical
  /// aggregates whose means are too many to list have `bounded` false and no values.
  std::vector<Value> values;
  bool bounded = true;
  /// A categorical S-op that can be None (an aggregate that selected nothing, or a map of such a
  /// value): its one-hot is all zeros there. Numerical S-ops are never None.
  bool can_be_none = false;
  /// The S-op has the same value at every position of every input (e.g. the length).
  bool uniform = false;
  /// map: f of every value of the input (table[i] = f(input.values[i]));
  /// sequence_map: table[i * |y values| + j] = f(x.values[i], y.values[j]).
  std::vector<Value> table;
};

/// A parsed and checked program.
struct Program {
  std::string path;    ///< for messages ("programs/reverse.rasp", or "<text>")
  std::string source;  ///< the text it was read from
  std::vector<Value> vocab;  ///< token id i is vocab[i] (the order of the vocab line)
  std::size_t max_len = 0;   ///< inputs have 1..max_len tokens
  bool causal = false;       ///< every selector also requires key position <= query position
  std::vector<Node> nodes;   ///< in dependency order: every input before its users
  std::size_t output = 0;    ///< the node the program outputs (a categorical S-op)
  /// S-ops compiled although the output does not read them (`keep NAME ...`): their dimensions
  /// and the operations that compute them are in the model, for instruments to read.
  std::vector<std::size_t> kept;

  /// The node named `name` (ValueError when none is).
  std::size_t find(const std::string& name) const;
  /// The index of `v` in nodes[node].values (ValueError when absent).
  std::size_t value_index(std::size_t node, const Value& v) const;
};

/// Parses and checks `text` (`path` names it in errors): syntax, unknown names (with a
/// suggestion), redefinitions, cycles, argument kinds (a selector where an S-op is expected and
/// the reverse), encodings (select needs categorical keys and queries, an aggregate's values
/// have its encoding, sequence_map categorical inputs), functions that fail on a value their
/// input can take, order comparisons between kinds, and a categorical aggregate whose selector
/// can select several keys of a value that differs between positions. Throws ProgramError.
Program parse_program(const std::string& text, const std::string& path = "<program>");
/// Reads the file at `path` (ValueError naming it when it cannot be read) and parses it.
Program load_program(const std::string& path);

/// Numerical aggregates list their possible means up to this many values (else `bounded` is false).
inline constexpr std::size_t kMaxNumericalValues = 4096;

}  // namespace qkv::rasp
