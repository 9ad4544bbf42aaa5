// Programs from text: statements into a graph of operations (names may be used before they are
// defined), the graph checked and ordered, then the values of every S-op inferred.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "qkv/tensor/names.hpp"
#include "syntax.hpp"

namespace qkv::rasp {

using syntax::Cursor;
using syntax::Tok;
using syntax::Token;

namespace {

constexpr std::size_t kMaxLen = 256;
constexpr std::size_t kMaxVocab = 1024;
constexpr std::size_t kMaxPairs = 1 << 16;  // sequence_map tables

const std::vector<std::string>& keywords() {
  static const std::vector<std::string> k = {"vocab", "max_len", "causal", "output", "keep", "map", "sequence_map",
                                             "select", "aggregate", "selector_width", "numerical", "categorical",
                                             "tokens", "indices", "true", "false"};
  return k;
}

const std::vector<std::string>& predicate_names() {
  static const std::vector<std::string> p = {"EQ", "LT", "LEQ", "GT", "GEQ", "NEQ", "TRUE", "FALSE"};
  return p;
}

// An argument of an operation before names are resolved: a name, or another raw operation.
struct Arg {
  std::string name;          // a reference by name (empty for a nested operation)
  std::size_t raw = 0;       // the nested operation, when name is empty
  const Token* at = nullptr;
};

struct Raw {
  Node node;                 // op, encoding, line, text, predicate, function
  std::vector<Arg> args;
  bool explicit_encoding = false;
};

struct Statement {
  std::string name;
  Arg value;
  int line = 0;
};

class Parser {
 public:
  Parser(const std::string& source, const std::string& path)
      : tokens_(syntax::lex(source, path)), c_(tokens_, path, source), path_(path) {
    program_.path = path;
    program_.source = source;
  }

  Program run() {
    raws_.push_back(builtin(Op::Tokens, "tokens"));
    raws_.push_back(builtin(Op::Indices, "indices"));
    while (c_.peek().kind != Tok::End) statement();
    if (program_.vocab.empty()) throw ProgramError(path_, 0, "vocab", "the program declares no vocabulary (a line: vocab a b c)");
    if (program_.max_len == 0) throw ProgramError(path_, 0, "max_len", "the program declares no maximum length (a line: max_len 8)");
    if (output_name_.empty()) throw ProgramError(path_, 0, "output", "the program names no output (a line: output NAME)");
    resolve();
    return std::move(program_);
  }

 private:
  static Raw builtin(Op op, const char* name) {
    Raw r;
    r.node.op = op;
    r.node.name = name;
    r.node.text = name;
    return r;
  }

  void end_of_statement(const std::string& construct) {
    if (c_.peek().kind != Tok::Newline && c_.peek().kind != Tok::End)
      c_.fail(c_.peek(), construct, "expected the end of the line, found " + syntax::describe(c_.peek()));
    c_.next();
  }

  void statement() {
    const Token& first = c_.next();
    if (first.kind == Tok::Newline) return;
    if (first.is_name("vocab")) return vocab(first);
    if (first.is_name("max_len")) {
      once(seen_max_len_, first, "max_len");
      const Token& n = c_.next();
      const double v = n.kind == Tok::Number ? std::strtod(n.text.c_str(), nullptr) : -1;
      if (v < 1 || v > double(kMaxLen) || v != std::floor(v))
        c_.fail(n, "max_len", "expected a whole number in [1, " + std::to_string(kMaxLen) + "], found " + syntax::describe(n));
      program_.max_len = std::size_t(v);
      return end_of_statement("max_len");
    }
    if (first.is_name("causal")) {
      once(seen_causal_, first, "causal");
      program_.causal = true;
      return end_of_statement("causal");
    }
    if (first.is_name("output")) {
      once(seen_output_, first, "output");
      const Token& n = c_.next();
      if (n.kind != Tok::Name) c_.fail(n, "output", "expected the name of an S-op, found " + syntax::describe(n));
      output_name_ = n.text;
      output_at_ = &n;
      return end_of_statement("output");
    }
    if (first.is_name("keep")) {
      if (c_.peek().kind != Tok::Name)
        c_.fail(c_.peek(), "keep", "expected the names of S-ops, found " + syntax::describe(c_.peek()));
      while (c_.peek().kind == Tok::Name) {
        const Token& n = c_.next();
        kept_.push_back(Arg{n.text, 0, &n});
      }
      return end_of_statement("keep");
    }
    if (first.kind != Tok::Name)
      c_.fail(first, "", "expected a statement (NAME = operation, vocab, max_len, causal, output or keep), found " +
                             syntax::describe(first));
    if (!c_.peek().is("="))
      c_.fail(c_.peek(), "", "expected '=' after '" + first.text + "' (a statement is NAME = operation, or vocab, max_len, "
                             "causal, output, keep), found " + syntax::describe(c_.peek()));
    const std::string& name = first.text;
    if (std::find(keywords().begin(), keywords().end(), name) != keywords().end())
      c_.fail(first, name, "'" + name + "' is a word of the language and cannot be a name");
    for (auto& s : statements_)
      if (s.name == name)
        c_.fail(first, name, "'" + name + "' is already defined at line " + std::to_string(s.line));
    c_.next();
    current_ = name;
    anonymous_ = 0;
    Statement s{name, operand(name), first.line};
    statements_.push_back(s);
    if (s.value.name.empty()) raws_[s.value.raw].node.name = name;
    end_of_statement(name);
  }

  void once(bool& seen, const Token& at, const char* what) {
    if (seen) c_.fail(at, what, std::string("the program says ") + what + " twice");
    seen = true;
  }

  void vocab(const Token& first) {
    once(seen_vocab_, first, "vocab");
    while (c_.peek().kind != Tok::Newline && c_.peek().kind != Tok::End) {
      const Token& at = c_.peek();
      Value v = syntax::parse_value(c_, "vocab");
      if (c_.peek().is("..")) {  // an integer range a..b
        c_.next();
        const Value hi = syntax::parse_value(c_, "vocab");
        const bool ints = v.is_number() && hi.is_number() && v.number == std::floor(v.number) && hi.number == std::floor(hi.number);
        if (!ints || hi.number < v.number || hi.number - v.number >= double(kMaxVocab))
          c_.fail(at, "vocab", "a range a..b needs whole numbers a <= b (at most " + std::to_string(kMaxVocab) + " of them)");
        for (double x = v.number; x <= hi.number; ++x) add_token(Value::of_number(x), at);
      } else {
        add_token(v, at);
      }
    }
    if (program_.vocab.empty()) c_.fail(first, "vocab", "expected at least one token after vocab");
    end_of_statement("vocab");
  }

  void add_token(const Value& v, const Token& at) {
    for (auto& t : program_.vocab)
      if (t == v) c_.fail(at, "vocab", "the token " + v.literal() + " is listed twice");
    if (program_.vocab.size() == kMaxVocab) c_.fail(at, "vocab", "more than " + std::to_string(kMaxVocab) + " tokens");
    program_.vocab.push_back(v);
  }

  // An argument: a name, or an operation (optionally prefixed by its encoding).
  Arg operand(const std::string& construct) {
    const Token& t = c_.peek();
    const std::size_t first = c_.position();
    bool has_encoding = false;
    Encoding enc = Encoding::Categorical;
    if (t.is_name("numerical") || t.is_name("categorical")) {
      has_encoding = true;
      enc = t.text == "numerical" ? Encoding::Numerical : Encoding::Categorical;
      c_.next();
    }
    const Token& op = c_.peek();
    static const std::vector<std::string> ops = {"map", "sequence_map", "select", "aggregate", "selector_width"};
    const bool is_call = op.kind == Tok::Name && c_.peek(1).is("(") &&
                         std::find(ops.begin(), ops.end(), op.text) != ops.end();
    if (!is_call) {
      if (has_encoding) c_.fail(op, construct, "expected map, sequence_map, aggregate or selector_width after " + t.text + ", found " + syntax::describe(op));
      if (op.kind != Tok::Name || (op.kind == Tok::Name && c_.peek(1).is("(")))
        c_.fail(op, construct, "expected a name or an operation (map, sequence_map, select, aggregate, selector_width), found " +
                                   syntax::describe(op) + (op.kind == Tok::Name ? " (not an operation)" : ""));
      c_.next();
      return Arg{op.text, 0, &op};
    }
    c_.next();
    Raw r;
    r.node.line = op.line;
    r.explicit_encoding = has_encoding;
    r.node.encoding = enc;
    const std::string& what = op.text;
    c_.expect("(", what);
    if (what == "map") {
      r.node.op = Op::Map;
      r.args.push_back(operand(what));
      c_.expect(",", what, "between the S-op and the function of map(s, f)");
      r.node.function = syntax::parse_function(c_, {"x"}, what);
    } else if (what == "sequence_map") {
      r.node.op = Op::SequenceMap;
      two_operands(r, what, "in sequence_map(a, b, f)");
      r.node.function = syntax::parse_function(c_, {"x", "y"}, what);
    } else if (what == "select") {
      r.node.op = Op::Select;
      two_operands(r, what, "in select(keys, queries, predicate)");
      const Token& p = c_.next();
      const auto& names = predicate_names();
      const auto it = std::find(names.begin(), names.end(), p.text);
      if (p.kind != Tok::Name || it == names.end())
        c_.fail(p, what, "expected a predicate (" + join_names(names) + "), found " + syntax::describe(p) +
                             (p.kind == Tok::Name ? did_you_mean(p.text, names) : ""));
      r.node.predicate = static_cast<Predicate>(it - names.begin());
    } else if (what == "aggregate") {
      r.node.op = Op::Aggregate;
      r.args.push_back(operand(what));
      c_.expect(",", what, "in aggregate(selector, values)");
      r.args.push_back(operand(what));
    } else {
      r.node.op = Op::SelectorWidth;
      r.args.push_back(operand(what));
    }
    c_.expect(")", what, "to close " + what + "(");
    if (has_encoding && r.node.op == Op::Select)
      c_.fail(op, what, "a selector has no encoding (" + t.text + " is for S-ops)");
    r.node.text = c_.text_from(first);
    r.node.name = current_ + "." + what + std::to_string(++anonymous_);
    raws_.push_back(std::move(r));
    return Arg{"", raws_.size() - 1, &op};
  }

  // "a, b," of a call: two operands, each followed by a comma.
  void two_operands(Raw& r, const std::string& what, const std::string& context) {
    for (int i = 0; i < 2; ++i) {
      r.args.push_back(operand(what));
      c_.expect(",", what, context);
    }
  }

  // ---- names to nodes ----

  // The raw operation an argument stands for (following aliases a = b), or an error naming it.
  std::size_t target(const Arg& a, std::vector<std::string>& chain) {
    if (a.name.empty()) return a.raw;
    if (a.name == "tokens") return 0;
    if (a.name == "indices") return 1;
    for (auto& s : statements_)
      if (s.name == a.name) {
        if (std::find(chain.begin(), chain.end(), a.name) != chain.end()) {
          chain.push_back(a.name);
          throw ProgramError(path_, s.line, a.name, "cycle: " + join(chain, " = "));
        }
        chain.push_back(a.name);
        return target(s.value, chain);
      }
    std::vector<std::string> names = {"tokens", "indices"};
    for (auto& s : statements_) names.push_back(s.name);
    throw ProgramError(path_, a.at ? a.at->line : 0, a.name, "unknown name '" + a.name + "'" + did_you_mean(a.name, names));
  }

  static std::string join(const std::vector<std::string>& v, const char* sep) {
    std::string out;
    for (auto& s : v) out += (out.empty() ? "" : sep) + s;
    return out;
  }

  void resolve() {
    std::vector<std::vector<std::size_t>> inputs(raws_.size());
    for (std::size_t i = 0; i < raws_.size(); ++i)
      for (auto& a : raws_[i].args) {
        std::vector<std::string> chain;
        inputs[i].push_back(target(a, chain));
      }
    std::vector<std::string> chain;
    Arg out{output_name_, 0, output_at_};
    const std::size_t output = target(out, chain);
    std::vector<std::size_t> kept;
    for (const Arg& k : kept_) {
      chain.clear();
      kept.push_back(target(k, chain));
    }
    // Depth-first order; a node met again while on the stack closes a cycle.
    std::vector<int> state(raws_.size(), 0);  // 0 new, 1 on the stack, 2 done
    std::vector<std::size_t> order, stack;
    std::function<void(std::size_t)> visit = [&](std::size_t i) {
      if (state[i] == 2) return;
      if (state[i] == 1) {
        std::vector<std::string> names;
        auto from = std::find(stack.begin(), stack.end(), i);
        for (auto it = from; it != stack.end(); ++it) names.push_back(raws_[*it].node.name);
        names.push_back(raws_[i].node.name);
        throw ProgramError(path_, raws_[i].node.line, raws_[i].node.name,
                           "cycle: " + join(names, " -> ") + " (an operation cannot depend on itself)");
      }
      state[i] = 1;
      stack.push_back(i);
      for (std::size_t j : inputs[i]) visit(j);
      stack.pop_back();
      state[i] = 2;
      order.push_back(i);
    };
    for (std::size_t i = 0; i < raws_.size(); ++i) visit(i);
    std::vector<std::size_t> index(raws_.size());
    for (std::size_t k = 0; k < order.size(); ++k) index[order[k]] = k;
    for (std::size_t i : order) {
      Node n = raws_[i].node;
      for (std::size_t j : inputs[i]) n.inputs.push_back(index[j]);
      program_.nodes.push_back(std::move(n));
      explicit_.push_back(raws_[i].explicit_encoding);
    }
    program_.output = index[output];
    for (std::size_t k : kept) program_.kept.push_back(index[k]);
    for (std::size_t k = 0; k < program_.nodes.size(); ++k) infer(k);
    for (std::size_t i = 0; i < kept.size(); ++i)
      if (program_.nodes[program_.kept[i]].op == Op::Select)
        throw ProgramError(path_, kept_[i].at->line, "keep", "'" + kept_[i].name + "' is a selector; keep names S-ops");
    const Node& o = program_.nodes[program_.output];
    if (o.op == Op::Select)
      throw ProgramError(path_, output_at_->line, "output", "'" + output_name_ + "' is a selector; the output is an S-op");
    if (o.encoding != Encoding::Categorical)
      throw ProgramError(path_, output_at_->line, "output",
                         "'" + output_name_ + "' is numerical; the compiled model classifies its output, so it must be "
                         "categorical (e.g. output categorical map(" + output_name_ + ", x))");
  }

  // ---- checks and value sets ----

  [[noreturn]] void fail(const Node& n, const std::string& m) const { throw ProgramError(path_, n.line, n.name, m); }

  const Node& sop(const Node& n, std::size_t input, const char* role) const {
    const Node& in = program_.nodes[n.inputs[input]];
    if (in.op == Op::Select)
      fail(n, std::string(name(n.op)) + " expects an S-op as its " + role + ", found the selector '" + in.name + "'");
    return in;
  }

  const Node& selector(const Node& n) const {
    const Node& in = program_.nodes[n.inputs[0]];
    if (in.op != Op::Select)
      fail(n, std::string(name(n.op)) + " expects a selector (select(...)) as its first argument, found the S-op '" + in.name + "'");
    return in;
  }

  const Node& categorical(const Node& n, std::size_t input, const char* role) const {
    const Node& in = sop(n, input, role);
    if (in.encoding != Encoding::Categorical)
      fail(n, std::string(name(n.op)) + " needs categorical " + role + ", found '" + in.name +
                  "', which is numerical (map it to categorical values first: categorical map(" + in.name + ", x))");
    return in;
  }

  // f over every value of the input(s); an error names the input where f fails.
  Value apply(const Node& n, const Value& x, const Value& y, bool pair) const {
    try {
      return n.function->apply(x, y);
    } catch (const ValueError& e) {
      fail(n, std::string("the function fails at x = ") + x.literal() + (pair ? ", y = " + y.literal() : "") + ": " + e.what());
    }
  }

  static std::vector<Value> distinct(std::vector<Value> v) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }

  void check_numbers(const Node& n) const {
    if (n.encoding != Encoding::Numerical) return;
    for (auto& v : n.table)
      if (!v.is_number())
        fail(n, "a numerical " + std::string(name(n.op)) + " must give numbers; it gives " + v.literal() + " (" +
                    kind_name(v.kind) + ")");
  }

  // Numbers that differ by rounding alone (means summed in another order) are one value.
  static std::vector<Value> distinct_numbers(std::vector<Value> v) {
    v = distinct(std::move(v));
    std::vector<Value> out;
    for (auto& x : v)
      if (out.empty() || std::fabs(x.number - out.back().number) > 1e-9 * std::max(1.0, std::fabs(x.number))) out.push_back(x);
    return out;
  }

  void infer(std::size_t k) {
    Node& n = program_.nodes[k];
    const std::size_t N = program_.max_len;
    if (!explicit_[k] && n.op != Op::Tokens && n.op != Op::Indices) n.encoding = Encoding::Categorical;
    switch (n.op) {
      case Op::Tokens: n.values = distinct(program_.vocab); return;
      case Op::Indices:
        for (std::size_t i = 0; i < N; ++i) n.values.push_back(Value::of_number(double(i)));
        return;
      case Op::Map: {
        const Node& in = sop(n, 0, "input");
        if (!in.bounded)
          fail(n, "its input '" + in.name + "' can take more than " + std::to_string(kMaxNumericalValues) +
                      " values (the means of a numerical aggregate), too many to tabulate");
        for (auto& v : in.values) n.table.push_back(apply(n, v, v, false));
        check_numbers(n);
        n.values = n.table;
        const bool none = in.encoding == Encoding::Categorical && in.can_be_none;
        if (n.encoding == Encoding::Numerical && none) n.values.push_back(Value::of_number(0));
        n.values = n.encoding == Encoding::Numerical ? distinct_numbers(n.values) : distinct(n.values);
        n.can_be_none = none && n.encoding == Encoding::Categorical;
        n.uniform = in.uniform;
        return;
      }
      case Op::SequenceMap: {
        const Node& a = categorical(n, 0, "inputs");
        const Node& b = categorical(n, 1, "inputs");
        if (a.values.size() * b.values.size() > kMaxPairs)
          fail(n, std::to_string(a.values.size()) + " x " + std::to_string(b.values.size()) +
                      " pairs of values are more than the " + std::to_string(kMaxPairs) + " a sequence_map tabulates");
        for (auto& x : a.values)
          for (auto& y : b.values) n.table.push_back(apply(n, x, y, true));
        check_numbers(n);
        n.values = n.table;
        const bool none = a.can_be_none || b.can_be_none;
        if (n.encoding == Encoding::Numerical && none) n.values.push_back(Value::of_number(0));
        n.values = n.encoding == Encoding::Numerical ? distinct_numbers(n.values) : distinct(n.values);
        n.can_be_none = none && n.encoding == Encoding::Categorical;
        n.uniform = a.uniform && b.uniform;
        return;
      }
      case Op::Select: {
        const Node& keys = categorical(n, 0, "keys");
        const Node& queries = categorical(n, 1, "queries");
        for (auto& b : keys.values)
          for (auto& a : queries.values) {
            try {
              holds(n.predicate, b, a);
            } catch (const ValueError& e) {
              fail(n, std::string(e.what()) + " (keys " + keys.name + ", queries " + queries.name + ")");
            }
          }
        return;
      }
      case Op::Aggregate: {
        const Node& sel = selector(n);
        const Node& v = sop(n, 1, "values");
        const Node& keys = program_.nodes[sel.inputs[0]];
        const Node& queries = program_.nodes[sel.inputs[1]];
        // Selects something for every query: TRUE over keys and queries that are never None.
        const bool never_empty = sel.predicate == Predicate::True && !keys.can_be_none && !queries.can_be_none;
        if (v.encoding != n.encoding)
          fail(n, std::string("a ") + name(n.encoding) + " aggregate needs " + name(n.encoding) + " values; '" + v.name +
                      "' is " + name(v.encoding) +
                      (n.encoding == Encoding::Numerical ? " (map it to numbers first: numerical map(" + v.name + ", ...))"
                                                         : " (write numerical aggregate(...) to average it)"));
        if (n.encoding == Encoding::Categorical) {
          if (sel.predicate != Predicate::EQ && sel.predicate != Predicate::False && !v.uniform)
            fail(n, std::string("a categorical aggregate moves one value, but select(..., ") + name(sel.predicate) +
                        ") can select several keys and '" + v.name +
                        "' can differ between them: the model would hold a mixture (select with EQ on a unique key, or "
                        "write numerical aggregate(...) to average numbers)");
          n.values = v.values;
          n.can_be_none = !never_empty || v.can_be_none;
          n.uniform = v.uniform && !n.can_be_none;
          return;
        }
        n.values = means(n, v);
        n.bounded = !n.values.empty();
        n.uniform = v.uniform && never_empty;
        return;
      }
      case Op::SelectorWidth: {
        const Node& sel = selector(n);
        for (std::size_t w = 0; w <= N; ++w) n.values.push_back(Value::of_number(double(w)));
        const Node& keys = program_.nodes[sel.inputs[0]];
        const Node& queries = program_.nodes[sel.inputs[1]];
        n.uniform = sel.predicate == Predicate::True && !program_.causal && !keys.can_be_none && !queries.can_be_none;
        return;
      }
    }
  }

  // Every mean of 1..max_len values of `v` (and 0, the mean of nothing); empty when there are
  // more than kMaxNumericalValues.
  std::vector<Value> means(const Node& n, const Node& v) const {
    if (!v.bounded)
      fail(n, "its values '" + v.name + "' can take too many values to list the means of");
    std::set<double> sums = {0.0}, all = {0.0};
    for (std::size_t count = 1; count <= program_.max_len; ++count) {
      std::set<double> next;
      for (double s : sums)
        for (auto& x : v.values) next.insert(s + x.number);
      sums = std::move(next);
      for (double s : sums) all.insert(s / double(count));
      if (all.size() > kMaxNumericalValues || sums.size() > kMaxNumericalValues) return {};
    }
    std::vector<Value> out;
    for (double x : all) out.push_back(Value::of_number(x));
    return distinct_numbers(out);
  }

  std::vector<Token> tokens_;
  Cursor c_;
  std::string path_;
  Program program_;
  std::vector<Raw> raws_;
  std::vector<Statement> statements_;
  std::vector<bool> explicit_;
  std::string current_, output_name_;
  const Token* output_at_ = nullptr;
  std::vector<Arg> kept_;
  std::size_t anonymous_ = 0;
  bool seen_vocab_ = false, seen_max_len_ = false, seen_causal_ = false, seen_output_ = false;
};

}  // namespace

Program parse_program(const std::string& text, const std::string& path) { return Parser(text, path).run(); }

Program load_program(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ValueError(path + ": cannot read the program (no such file, or not readable)");
  std::ostringstream s;
  s << in.rdbuf();
  return parse_program(s.str(), path);
}

}  // namespace qkv::rasp
