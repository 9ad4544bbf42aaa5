#include "qkv/tensor/options.hpp"

#include <cmath>
#include <cstdio>

namespace qkv {
namespace {

std::string render_with(const std::string& message, const std::function<std::string(const std::string&)>& name) {
  std::string out;
  for (std::size_t i = 0; i < message.size(); ++i) {
    const std::size_t close = message[i] == '{' ? message.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += message[i];
      continue;
    }
    out += name(message.substr(i + 1, close - i - 1));
    i = close;
  }
  return out;
}

std::string identity(const std::string& s) { return s; }

}  // namespace

OptionError::OptionError(std::string owner_, std::vector<std::string> fields_, std::string message_, std::string value_)
    : ValueError((owner_ == "request" ? std::string() : owner_ + ": ") + (fields_.empty() ? std::string("?") : fields_.front()) +
                 (value_.empty() ? "" : " " + value_) + ": " + render_with(message_, identity)),
      owner(std::move(owner_)),
      fields(std::move(fields_)),
      message(std::move(message_)),
      value(std::move(value_)) {}

std::string OptionError::report(const std::function<std::string(const std::string&)>& name) const {
  return name(fields.empty() ? std::string("?") : fields.front()) + (value.empty() ? "" : " " + value) + ": " + render(name);
}

std::string OptionError::render(const std::function<std::string(const std::string&)>& name) const {
  return render_with(message, name);
}

OptionError OptionError::renamed(const std::function<std::string(const std::string&)>& rename) const {
  std::vector<std::string> f;
  for (auto& x : fields) f.push_back(rename(x));
  // References are renamed by rendering them as "{renamed}".
  return OptionError(owner, std::move(f), render_with(message, [&](const std::string& p) { return "{" + rename(p) + "}"; }),
                     value);
}

void field_error(const std::string& field, const std::string& message, const std::string& value) {
  throw OptionError("request", {field}, message, value);
}

void as_field(const std::string& field, const std::function<void()>& f) {
  try {
    f();
  } catch (const OptionError&) {
    throw;
  } catch (const ValueError& e) {
    const std::string m = e.what(), head = field + ": ";
    if (m.rfind(head, 0) != 0) throw;
    field_error(field, m.substr(head.size()));
  }
}

void with_prefix(const std::string& prefix, const std::function<void()>& f) {
  try {
    f();
  } catch (const OptionError& e) {
    if (e.owner != "request") throw;
    // "" (the whole request) becomes the prefix's name without its dot.
    throw e.renamed([&](const std::string& x) { return x.empty() ? prefix.substr(0, prefix.size() - 1) : prefix + x; });
  }
}

std::string renamed_field(const std::string& field, const std::vector<std::pair<std::string, std::string>>& renames) {
  for (auto& [from, to] : renames) {
    std::string rest;
    if (field == from) {
    } else if (!from.empty() && from.back() == '.' && field.rfind(from, 0) == 0) {
      rest = field.substr(from.size());
    } else if (field.rfind(from + "[", 0) == 0) {
      rest = field.substr(from.size());
    } else {
      continue;
    }
    if (to.empty()) return rest;  // the prefix dropped
    return to.back() == '.' || (!rest.empty() && rest.front() == '[') ? to + rest : to;
  }
  return field;
}

std::string number_text(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

void OptionChecker::positive(std::size_t value, const std::string& field) const {
  require(value > 0, {field}, "expected a positive integer, found 0");
}

void OptionChecker::in_range(double v, const std::string& field, double lo, bool lo_open, double hi,
                             bool hi_open) const {
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  require(ok, {field},
          std::string("expected a number in ") + (lo_open ? "(" : "[") + number_text(lo) + ", " +
              (std::isinf(hi) ? std::string("inf)") : number_text(hi) + (hi_open ? ")" : "]")) + ", found " +
              number_text(v));
}

void OptionChecker::require(bool ok, std::vector<std::string> fields, const std::string& message) const {
  if (!ok) throw OptionError(owner_, std::move(fields), message);
}

void OptionChecker::nested(const std::string& prefix, const std::function<void()>& validate,
                           const std::vector<std::pair<std::string, std::string>>& renames) const {
  try {
    validate();
  } catch (const OptionError& e) {
    OptionError r = e.renamed([&](const std::string& f) {
      for (auto& [from, to] : renames)
        if (f == from) return to;
      return prefix + f;
    });
    throw OptionError(owner_, r.fields, r.message);
  }
}

}  // namespace qkv
