// qkv view's page: the studio's own page, script and style in one file, the data inline, no network.
#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "app/commands.hpp"

namespace qkv::app {
const std::string& studio_html();
const std::string& studio_js();
const std::string& studio_css();
}  // namespace qkv::app

namespace qkv {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("view: the saved page is the studio's page with its style, script and data inline, and no network") {
  const std::string data = "{\"format\":\"qkv-studio-page\",\"title\":\"<\\/script> x\"}";
  const std::string page = app::offline_page(data);
  CHECK(page.find("href=\"/studio.css\"") == std::string::npos);
  CHECK(page.find("src=\"/studio.js\"") == std::string::npos);
  CHECK(page.find("content=\"default-src 'none'; script-src 'unsafe-inline'") != std::string::npos);
  CHECK(page.find(app::studio_css()) != std::string::npos);
  CHECK(count(page, "<script") == 3);    // the error handlers, the data, the page's script
  CHECK(count(page, "</script>") == 3);  // nothing in them ends a script early
  const std::size_t handlers = page.find("H.reportError = ");
  const std::size_t at = page.find("<script id=\"qkv-data\" type=\"application/json\">" + data + "</script>");
  const std::size_t script = page.find("// ==== qkv view: the page's script starts here");
  CHECK(handlers < at);
  CHECK(at < script);
  CHECK(script != std::string::npos);
  // The script, split in two, is whole: the page's text holds every line of studio.js.
  const std::string& js = app::studio_js();
  const std::size_t split = js.find("// ==== qkv view");
  CHECK(page.find(js.substr(0, split)) != std::string::npos);
  CHECK(page.find(js.substr(split)) != std::string::npos);
  CHECK(page.rfind("</html>") != std::string::npos);
  // Data that would end its element is a bug of the writer (json::quote escapes "</").
  CHECK_THROWS_AS(app::offline_page("{\"title\":\"</script>\"}"), std::logic_error);
  CHECK_THROWS_AS(app::offline_page("{\"title\":\"<!-- \"}"), std::logic_error);
}

}  // namespace qkv
