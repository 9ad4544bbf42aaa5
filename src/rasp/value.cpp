// Values, their order and labels, and the names of the language's enums.
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "qkv/rasp/program.hpp"

namespace qkv::rasp {

namespace {
std::string where(const std::string& path, int line) {
  return line > 0 ? path + ":" + std::to_string(line) : path;
}
}  // namespace

ProgramError::ProgramError(const std::string& p, int l, const std::string& c, const std::string& m)
    : ValueError(where(p, l) + ": " + (c.empty() ? "" : c + ": ") + m), path(p), line(l), construct(c), message(m) {}

Value Value::of_number(double x) {
  Value v;
  v.kind = Kind::Number;
  v.number = x == 0 ? 0.0 : x;  // one zero: -0 and 0 are the same value
  return v;
}

Value Value::of_bool(bool b) {
  Value v;
  v.kind = Kind::Bool;
  v.number = b ? 1 : 0;
  return v;
}

Value Value::of_symbol(std::string s) {
  Value v;
  v.kind = Kind::Symbol;
  v.symbol = std::move(s);
  return v;
}

std::string Value::label() const {
  if (kind == Kind::Symbol) return symbol;
  if (kind == Kind::Bool) return number != 0 ? "true" : "false";
  // The shortest %g text that reads back to the same double: labels of different values differ.
  char buf[40];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, number);
    if (std::strtod(buf, nullptr) == number) break;
  }
  return buf;
}

std::string Value::literal() const {
  if (kind != Kind::Symbol) return label();
  std::string out = "\"";
  for (char c : symbol) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

bool operator==(const Value& a, const Value& b) {
  if (a.kind != b.kind) return false;
  return a.kind == Value::Kind::Symbol ? a.symbol == b.symbol : a.number == b.number;
}

bool operator<(const Value& a, const Value& b) {
  if (a.kind != b.kind) return a.kind < b.kind;
  return a.kind == Value::Kind::Symbol ? a.symbol < b.symbol : a.number < b.number;
}

const char* kind_name(Value::Kind kind) {
  return kind == Value::Kind::Bool ? "boolean" : kind == Value::Kind::Number ? "number" : "symbol";
}

const char* name(Encoding encoding) { return encoding == Encoding::Categorical ? "categorical" : "numerical"; }

const char* name(Predicate p) {
  static const char* const names[] = {"EQ", "LT", "LEQ", "GT", "GEQ", "NEQ", "TRUE", "FALSE"};
  return names[static_cast<int>(p)];
}

const char* name(Op op) {
  static const char* const names[] = {"tokens", "indices", "map", "sequence_map", "select", "aggregate", "selector_width"};
  return names[static_cast<int>(op)];
}

bool holds(Predicate p, const Value& key, const Value& query) {
  switch (p) {
    case Predicate::True: return true;
    case Predicate::False: return false;
    case Predicate::EQ: return key == query;
    case Predicate::NEQ: return key != query;
    default: break;
  }
  if (key.kind != query.kind)
    throw ValueError(std::string(name(p)) + " orders values of one kind; it compares the key " + key.literal() + " (" +
                     kind_name(key.kind) + ") with the query " + query.literal() + " (" + kind_name(query.kind) + ")");
  if (p == Predicate::LT) return key < query;
  if (p == Predicate::LEQ) return !(query < key);
  if (p == Predicate::GT) return query < key;
  return !(key < query);  // GEQ
}

std::size_t Program::find(const std::string& n) const {
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].name == n) return i;
  throw ValueError(path + ": no operation named '" + n + "'");
}

std::size_t Program::value_index(std::size_t node, const Value& v) const {
  const auto& vs = nodes.at(node).values;
  for (std::size_t i = 0; i < vs.size(); ++i)
    if (vs[i] == v) return i;
  throw ValueError(path + ": " + nodes[node].name + " never takes the value " + v.literal());
}

}  // namespace qkv::rasp
