// The small pieces every layer above uses: name tables and suggestions, glob matching, option
// checks and their errors, and the state-dict diff.
#include <doctest/doctest.h>

#include "qkv/tensor/names.hpp"
#include "qkv/tensor/options.hpp"
#include "qkv/tensor/state_dict.hpp"

namespace qkv {
namespace {
enum class Color { Red, Green };
}

TEST_CASE("names: a NameTable parses, names and suggests") {
  const NameTable<Color> t{{"red", Color::Red}, {"green", Color::Green}};
  CHECK(t.parse("green", "color") == Color::Green);
  CHECK(std::string(t.name(Color::Red)) == "red");
  CHECK(t.names() == std::vector<std::string>{"red", "green"});
  CHECK(t.contains("red"));
  CHECK_FALSE(t.contains("blue"));
  CHECK_THROWS_WITH_AS(t.parse("gren", "color"), "color: expected one of red, green, found 'gren'; did you mean 'green'?",
                       ValueError);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(closest_name("hedas", {"heads", "layers"}) == "heads");
  CHECK(closest_name("xyz", {"heads", "layers"}).empty());
  CHECK(closest_name("lay", {"heads", "layers"}) == "layers");  // a prefix of 3+ letters
  CHECK(join_names({"a", "b"}) == "a, b");
}

TEST_CASE("names: glob_match on whole dotted names") {
  CHECK(glob_match("*.hook_pattern", "blocks.0.attn.hook_pattern"));
  CHECK(glob_match("blocks.?.attn.*", "blocks.1.attn.hook_q"));
  CHECK_FALSE(glob_match("blocks.?.attn.*", "blocks.10.attn.hook_q"));
  CHECK(glob_match("*", ""));
  CHECK_FALSE(glob_match("hook_q", "blocks.0.attn.hook_q"));
  CHECK(glob_match("a*b*c", "axxbyyc"));
  CHECK_FALSE(glob_match("a*b*c", "axxbyy"));
}

TEST_CASE("options: OptionChecker rules, nested renames and rendering for another reader") {
  OptionChecker c("Outer");
  CHECK_NOTHROW(c.positive(3, "layers"));
  CHECK_THROWS_WITH_AS(c.positive(0, "layers"), "Outer: layers: expected a positive integer, found 0", OptionError);
  CHECK_THROWS_WITH_AS(c.in_range(1.5, "dropout", 0, false, 1, true), "Outer: dropout: expected a number in [0, 1), found 1.5",
                       OptionError);
  CHECK_THROWS_WITH_AS(c.in_range(0, "lr", 0, true, INFINITY, false), "Outer: lr: expected a number in (0, inf), found 0",
                       OptionError);
  // A nested struct's failure, its fields renamed into the outer struct's terms.
  auto inner = [] {
    OptionChecker k("Inner");
    k.require(false, {"num_heads", "embed_dim"}, "{embed_dim} (10) must be divisible by {num_heads} (4)");
  };
  try {
    c.nested("attn.", inner, {{"embed_dim", "d_model"}});
    FAIL("expected an OptionError");
  } catch (const OptionError& e) {
    CHECK(e.owner == "Outer");
    CHECK(e.fields == std::vector<std::string>{"attn.num_heads", "d_model"});
    CHECK(std::string(e.what()) == "Outer: attn.num_heads: d_model (10) must be divisible by attn.num_heads (4)");
    // What the config layer shows: the YAML key of each field.
    CHECK(e.render([](const std::string& f) { return f == "d_model" ? "model.d_model" : "model.heads"; }) ==
          "model.d_model (10) must be divisible by model.heads (4)");
  }
  CHECK(number_text(0.25) == "0.25");
}

TEST_CASE("state_dict_diff: missing, unexpected, duplicate and misshaped entries, each named") {
  StateDict<float> want = {{"a", zeros<float>({2, 3})}, {"b", zeros<float>({4})}};
  CHECK(state_dict_diff(want, want).empty());
  StateDict<float> got = {{"a", zeros<float>({3, 2})}, {"c", zeros<float>({1})}, {"c", zeros<float>({1})}};
  const std::string d = state_dict_diff(want, got, "the model has", "the file");
  CHECK(d.find("\n  shape of a: the model has (2, 3), the file (3, 2)") != std::string::npos);
  CHECK(d.find("\n  missing: b (4)") != std::string::npos);
  CHECK(d.find("\n  unexpected: c (1)") != std::string::npos);
  StateDict<float> twice = {{"a", zeros<float>({2, 3})}, {"a", zeros<float>({2, 3})}, {"b", zeros<float>({4})}};
  CHECK(state_dict_diff(want, twice).find("duplicate: a") != std::string::npos);
}

}  // namespace qkv
