// Tokens, literal values and the functions of maps: expressions (precedence climbing) and tables.
#include "qkv/tensor/names.hpp"
#include "syntax.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>

namespace qkv::rasp::syntax {

namespace {

bool name_start(unsigned char c) { return std::isalpha(c) || c == '_' || c >= 0x80; }
bool name_char(unsigned char c) { return name_start(c) || std::isdigit(c); }

// Two-character punctuation first, so that "<=" is not '<' then '='.
const char* const kPunct2[] = {"==", "!=", "<=", ">=", "//", ".."};
const char* const kPunct1 = "(){},=:+-*/%<>";

}  // namespace

std::vector<Token> lex(const std::string& s, const std::string& path) {
  std::vector<Token> out;
  int line = 1, depth = 0;
  std::size_t i = 0;
  auto push = [&](Tok kind, std::string text, std::size_t begin, std::size_t end) {
    out.push_back(Token{kind, std::move(text), line, begin, end});
  };
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '\n') {
      if (depth == 0 && !out.empty() && out.back().kind != Tok::Newline) push(Tok::Newline, "\n", i, i + 1);
      ++line, ++i;
    } else if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
    } else if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (name_start(c)) {
      const std::size_t b = i;
      while (i < s.size() && name_char(static_cast<unsigned char>(s[i]))) ++i;
      push(Tok::Name, s.substr(b, i - b), b, i);
    } else if (std::isdigit(c)) {
      const std::size_t b = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      // A fraction, but not the ".." of a range (0..9).
      if (i + 1 < s.size() && s[i] == '.' && std::isdigit(static_cast<unsigned char>(s[i + 1]))) {
        ++i;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      }
      push(Tok::Number, s.substr(b, i - b), b, i);
    } else if (c == '"') {
      const std::size_t b = i++;
      std::string text;
      while (i < s.size() && s[i] != '"' && s[i] != '\n') {
        if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == '"' || s[i + 1] == '\\')) ++i;
        text += s[i++];
      }
      if (i >= s.size() || s[i] != '"')
        throw ProgramError(path, line, "", "unterminated string (a string ends with \" on the line it starts)");
      ++i;
      push(Tok::String, text, b, i);
    } else {
      const std::size_t b = i;
      std::string p;
      for (const char* two : kPunct2)
        if (s.compare(i, 2, two) == 0) p = two;
      if (p.empty() && std::strchr(kPunct1, c)) p = std::string(1, char(c));
      if (p.empty())
        throw ProgramError(path, line, "", std::string("unexpected character '") + char(c) +
                                               "' (names are letters, digits and _, strings are quoted, comments start with #)");
      i += p.size();
      if (p == "(" || p == "{") ++depth;
      if ((p == ")" || p == "}") && depth > 0) --depth;
      push(Tok::Punct, p, b, i);
    }
  }
  if (!out.empty() && out.back().kind != Tok::Newline) push(Tok::Newline, "\n", s.size(), s.size());
  push(Tok::End, "", s.size(), s.size());
  return out;
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::Name: return "'" + t.text + "'";
    case Tok::Number: return "the number " + t.text;
    case Tok::String: return "the string \"" + t.text + "\"";
    case Tok::Punct: return "'" + t.text + "'";
    case Tok::Newline: return "the end of the line";
    default: return "the end of the program";
  }
}

const Token& Cursor::peek(std::size_t ahead) const { return tokens_[std::min(at_ + ahead, tokens_.size() - 1)]; }

const Token& Cursor::next() {
  const Token& t = peek();
  if (at_ + 1 < tokens_.size()) ++at_;
  return t;
}

void Cursor::fail(const Token& at, const std::string& construct, const std::string& message) const {
  throw ProgramError(path_, at.line, construct, message);
}

const Token& Cursor::expect(const char* punct, const std::string& construct, const std::string& context) {
  if (!peek().is(punct))
    fail(peek(), construct, std::string("expected '") + punct + "'" + (context.empty() ? "" : " " + context) + ", found " +
                                describe(peek()));
  return next();
}

std::string Cursor::text_from(std::size_t first) const {
  std::size_t last = at_;
  while (last > first && (tokens_[last - 1].kind == Tok::Newline || tokens_[last - 1].kind == Tok::End)) --last;
  if (last <= first) return "";
  std::string t = source_.substr(tokens_[first].begin, tokens_[last - 1].end - tokens_[first].begin);
  // One line: the newlines and indentation of a call that spans lines become single spaces.
  std::string out;
  for (char ch : t) {
    const bool space = ch == '\n' || ch == '\r' || ch == '\t' || ch == ' ';
    if (space && (out.empty() || out.back() == ' ')) continue;
    out += space ? ' ' : ch;
  }
  return out;
}

Value parse_value(Cursor& c, const std::string& construct) {
  const Token& t = c.next();
  if (t.is("-") && c.peek().kind == Tok::Number) return Value::of_number(-std::strtod(c.next().text.c_str(), nullptr));
  if (t.kind == Tok::Number) return Value::of_number(std::strtod(t.text.c_str(), nullptr));
  if (t.kind == Tok::String) return Value::of_symbol(t.text);
  if (t.is_name("true") || t.is_name("false")) return Value::of_bool(t.text == "true");
  if (t.kind == Tok::Name) return Value::of_symbol(t.text);
  c.fail(t, construct, "expected a value (a number, a word, a \"string\", true or false), found " + describe(t));
}

// ---- expressions ----

namespace {

// An expression node: a literal, a variable, or an operator over sub-expressions.
struct Expr {
  enum class K { Literal, Variable, Unary, Binary, If, Call } k;
  std::string op;  // operator, function or variable name
  Value literal;
  std::vector<std::unique_ptr<Expr>> args;
};
using ExprPtr = std::unique_ptr<Expr>;

[[noreturn]] void eval_fail(const std::string& m) { throw ValueError(m); }

double number_of(const Value& v, const std::string& op) {
  if (!v.is_number()) eval_fail("'" + op + "' needs numbers, found " + v.literal() + " (" + kind_name(v.kind) + ")");
  return v.number;
}

bool bool_of(const Value& v, const std::string& op) {
  if (v.kind != Value::Kind::Bool)
    eval_fail("'" + op + "' needs true or false, found " + v.literal() + " (" + kind_name(v.kind) + ")");
  return v.number != 0;
}

Value finite(double x, const std::string& op) {
  if (!std::isfinite(x)) eval_fail("'" + op + "' gives " + std::to_string(x) + ", not a finite number");
  return Value::of_number(x);
}

Value compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return Value::of_bool(a == b);
  if (op == "!=") return Value::of_bool(a != b);
  if (a.kind != b.kind)
    eval_fail("'" + op + "' orders values of one kind; found " + a.literal() + " (" + kind_name(a.kind) + ") and " +
              b.literal() + " (" + kind_name(b.kind) + ")");
  if (op == "<") return Value::of_bool(a < b);
  if (op == "<=") return Value::of_bool(!(b < a));
  if (op == ">") return Value::of_bool(b < a);
  return Value::of_bool(!(a < b));
}

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  // + joins two symbols, or a symbol and a number written as its label ("w" + 3 is "w3").
  const bool sa = a.kind == Value::Kind::Symbol, sb = b.kind == Value::Kind::Symbol;
  if (op == "+" && (sa || sb) && a.kind != Value::Kind::Bool && b.kind != Value::Kind::Bool)
    return Value::of_symbol((sa ? a.symbol : a.label()) + (sb ? b.symbol : b.label()));
  const double x = number_of(a, op), y = number_of(b, op);
  if (op == "+") return finite(x + y, op);
  if (op == "-") return finite(x - y, op);
  if (op == "*") return finite(x * y, op);
  if (y == 0) eval_fail("division by zero ('" + op + "' by 0)");
  if (op == "/") return finite(x / y, op);
  if (op == "//") return finite(std::floor(x / y), op);
  return finite(x - y * std::floor(x / y), op);  // %: the sign of the divisor, as Python
}

Value eval(const Expr& e, const Value& x, const Value& y) {
  switch (e.k) {
    case Expr::K::Literal: return e.literal;
    case Expr::K::Variable: return e.op == "x" ? x : y;
    case Expr::K::Unary: {
      const Value a = eval(*e.args[0], x, y);
      if (e.op == "not") return Value::of_bool(!bool_of(a, "not"));
      return finite(-number_of(a, "-"), "-");
    }
    case Expr::K::If:
      return bool_of(eval(*e.args[0], x, y), "if") ? eval(*e.args[1], x, y) : eval(*e.args[2], x, y);
    case Expr::K::Call: {
      const Value a = eval(*e.args[0], x, y);
      if (e.op == "abs") return finite(std::fabs(number_of(a, "abs")), "abs");
      const Value b = eval(*e.args[1], x, y);
      if (a.kind != b.kind)
        eval_fail(e.op + "() compares values of one kind; found " + a.literal() + " and " + b.literal());
      return (e.op == "min") == (b < a) ? b : a;
    }
    case Expr::K::Binary: break;
  }
  if (e.op == "and" || e.op == "or") {  // short-circuit, as Python
    const bool a = bool_of(eval(*e.args[0], x, y), e.op);
    if (a == (e.op == "or")) return Value::of_bool(a);
    return Value::of_bool(bool_of(eval(*e.args[1], x, y), e.op));
  }
  const Value a = eval(*e.args[0], x, y), b = eval(*e.args[1], x, y);
  if (e.op == "==" || e.op == "!=" || e.op == "<" || e.op == "<=" || e.op == ">" || e.op == ">=") return compare(e.op, a, b);
  return arithmetic(e.op, a, b);
}

class Expression final : public Function {
 public:
  Expression(ExprPtr root, std::string text) : root_(std::move(root)), text_(std::move(text)) {}
  Value apply(const Value& x, const Value& y) const override { return eval(*root_, x, y); }
  std::string text() const override { return text_; }

 private:
  ExprPtr root_;
  std::string text_;
};

class Table final : public Function {
 public:
  Table(std::vector<std::pair<Value, Value>> entries, std::unique_ptr<Value> fallback, std::string text)
      : entries_(std::move(entries)), fallback_(std::move(fallback)), text_(std::move(text)) {}
  Value apply(const Value& x, const Value&) const override {
    for (auto& [k, v] : entries_)
      if (k == x) return v;
    if (fallback_) return *fallback_;
    eval_fail("the table has no entry for " + x.literal() + " (add one, or a default: _: value)");
  }
  std::string text() const override { return text_; }

 private:
  std::vector<std::pair<Value, Value>> entries_;
  std::unique_ptr<Value> fallback_;
  std::string text_;
};

// Precedence climbing over: if/then/else < or < and < not < comparison < + - < * / // % < unary -.
class ExprParser {
 public:
  ExprParser(Cursor& c, const std::vector<std::string>& vars, const std::string& construct)
      : c_(c), vars_(vars), construct_(construct) {}

  ExprPtr expression() {
    if (c_.peek().is_name("if")) {
      c_.next();
      auto e = node(Expr::K::If, "if");
      e->args.push_back(expression());
      keyword("then");
      e->args.push_back(expression());
      keyword("else");
      e->args.push_back(expression());
      return e;
    }
    return binary(0);
  }

 private:
  static constexpr int kLevels = 5;
  static bool at_level(const Token& t, int level) {
    static const std::vector<std::vector<std::string>> ops = {
        {"or"}, {"and"}, {"==", "!=", "<", "<=", ">", ">="}, {"+", "-"}, {"*", "/", "//", "%"}};
    for (auto& op : ops[level])
      if ((t.kind == Tok::Punct || t.kind == Tok::Name) && t.text == op) return true;
    return false;
  }

  ExprPtr binary(int level) {
    if (level == kLevels) return unary();
    if (level == 2 && c_.peek().is_name("not")) {  // not binds looser than comparisons
      c_.next();
      auto e = node(Expr::K::Unary, "not");
      e->args.push_back(binary(2));
      return e;
    }
    ExprPtr left = binary(level + 1);
    while (at_level(c_.peek(), level)) {
      const std::string op = c_.next().text;
      auto e = node(Expr::K::Binary, op);
      e->args.push_back(std::move(left));
      e->args.push_back(binary(level + 1));
      left = std::move(e);
      if (level == 2 && at_level(c_.peek(), 2))
        c_.fail(c_.peek(), construct_, "comparisons do not chain (write a < b and b < c)");
    }
    return left;
  }

  ExprPtr unary() {
    if (c_.peek().is("-")) {
      c_.next();
      auto e = node(Expr::K::Unary, "-");
      e->args.push_back(unary());
      return e;
    }
    return atom();
  }

  ExprPtr atom() {
    const Token& t = c_.peek();
    if (t.is("(")) {
      c_.next();
      ExprPtr e = expression();
      c_.expect(")", construct_, "to close the parenthesis");
      return e;
    }
    if (t.kind == Tok::Number || t.kind == Tok::String || t.is_name("true") || t.is_name("false")) {
      auto e = node(Expr::K::Literal, "");
      e->literal = parse_value(c_, construct_);
      return e;
    }
    if (t.kind == Tok::Name && (t.text == "min" || t.text == "max" || t.text == "abs")) {
      const std::string f = c_.next().text;
      auto e = node(Expr::K::Call, f);
      c_.expect("(", construct_, "after " + f);
      e->args.push_back(expression());
      if (f != "abs") {
        c_.expect(",", construct_, "between the two arguments of " + f + "()");
        e->args.push_back(expression());
      }
      c_.expect(")", construct_, "to close " + f + "(");
      return e;
    }
    if (t.kind == Tok::Name) {
      for (auto& v : vars_)
        if (t.text == v) {
          auto e = node(Expr::K::Variable, c_.next().text);
          return e;
        }
      const bool other_var = t.text == "x" || t.text == "y";
      c_.fail(t, construct_,
              other_var ? "the function of a map has one variable, x (sequence_map has x and y)"
                        : "unknown name '" + t.text + "' in the function (its variables are " + join_names(vars_) +
                              "; write a symbol in quotes: \"" + t.text + "\")");
    }
    c_.fail(t, construct_, "expected a value, a variable (" + join_names(vars_) + "), '(' or min/max/abs, found " + describe(t));
  }

  void keyword(const char* word) {
    if (!c_.peek().is_name(word))
      c_.fail(c_.peek(), construct_, std::string("expected '") + word + "' in if ... then ... else ..., found " + describe(c_.peek()));
    c_.next();
  }

  static ExprPtr node(Expr::K k, std::string op) {
    auto e = std::make_unique<Expr>();
    e->k = k;
    e->op = std::move(op);
    return e;
  }

  Cursor& c_;
  const std::vector<std::string>& vars_;
  const std::string& construct_;
};

std::shared_ptr<const Function> parse_table(Cursor& c, const std::string& construct) {
  const std::size_t first = c.position();
  c.expect("{", construct);
  std::vector<std::pair<Value, Value>> entries;
  std::unique_ptr<Value> fallback;
  while (!c.peek().is("}")) {
    const Token& at = c.peek();
    const bool is_default = at.is_name("_");
    Value key;
    if (is_default)
      c.next();
    else
      key = parse_value(c, construct);
    c.expect(":", construct, "between a table's key and its value");
    Value v = parse_value(c, construct);
    if (is_default) {
      if (fallback) c.fail(at, construct, "the table has two defaults (_)");
      fallback = std::make_unique<Value>(v);
    } else {
      for (auto& e : entries)
        if (e.first == key) c.fail(at, construct, "the table has two entries for " + key.literal());
      entries.emplace_back(key, v);
    }
    if (!c.peek().is("}")) c.expect(",", construct, "between table entries");
  }
  c.next();
  return std::make_shared<Table>(std::move(entries), std::move(fallback), c.text_from(first));
}

}  // namespace

std::shared_ptr<const Function> parse_function(Cursor& c, const std::vector<std::string>& variables,
                                               const std::string& construct) {
  if (c.peek().is("{")) return parse_table(c, construct);
  const std::size_t first = c.position();
  ExprParser p(c, variables, construct);
  ExprPtr root = p.expression();
  return std::make_shared<Expression>(std::move(root), c.text_from(first));
}

}  // namespace qkv::rasp::syntax
