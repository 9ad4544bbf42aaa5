// Checkpoint format_version 2: every string is fixed-length, and the loader checks a string's type,
// shape and size before HDF5 reads it (a variable-length string is refused, never read: HDF5 1.10
// crashes on damaged ones, tests/fuzz/regressions/checkpoint/). Version-1 files are refused with
// how to convert them; the committed conversion of one (scripts/convert_checkpoint.py) holds
// exactly what the version-1 file holds.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "io/checkpoint_edit.hpp"
#include "qkv/io/checkpoint.hpp"
#include "qkv/version.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::io;
using qkv::test::edit;
using qkv::test::load_error;

namespace {

// A string type: variable-length when size == 0, else fixed-length of `size` bytes.
hid_t string_type(std::size_t size) {
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, size == 0 ? H5T_VARIABLE : size);
  return t;
}

// Replaces attribute `name` of the root with `count` strings (variable-length when size == 0).
void put_string_attribute(hid_t file, const char* name, std::size_t size, hsize_t count = 1) {
  H5Adelete(file, name);
  hid_t t = string_type(size);
  hid_t space = count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr);
  hid_t a = H5Acreate2(file, name, t, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(a >= 0);
  if (size == 0) {
    std::vector<const char*> p(count, "qkv-checkpoint");
    H5Awrite(a, t, p.data());
  } else {
    std::string bytes(size * count, 'x');
    H5Awrite(a, t, bytes.data());
  }
  H5Aclose(a);
  H5Sclose(space);
  H5Tclose(t);
}

// Replaces /config with a scalar string dataset: variable-length (size 0, written), or of `size`
// bytes, written only when `write` (else its storage is never allocated).
void put_config(hid_t file, std::size_t size, bool write) {
  H5Ldelete(file, "/config", H5P_DEFAULT);
  hid_t t = string_type(size);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t d = H5Dcreate2(file, "/config", t, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(d >= 0);
  const char* text = "model:\n  d_model: 8\n";
  if (size == 0) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text);
  else if (write) H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, std::string(size, 'x').data());
  H5Dclose(d);
  H5Sclose(space);
  H5Tclose(t);
}

void put_int_typed(hid_t file, const char* name, hid_t type, hsize_t count = 1) {
  H5Adelete(file, name);
  hid_t space = count == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &count, nullptr);
  hid_t a = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(a >= 0);
  std::vector<double> two(count, 2.0);
  H5Awrite(a, H5T_NATIVE_DOUBLE, two.data());
  H5Aclose(a);
  H5Sclose(space);
}

Checkpoint small_checkpoint(const std::string& config) {
  Checkpoint ck;
  ck.step = 3;
  ck.config_yaml = config;
  ck.model = {{"w", full<float>({2, 2}, 0.5f)}};
  return ck;
}

template <class T>
std::vector<T> raw_dataset(hid_t file, const std::string& path, hid_t mem) {
  hid_t d = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  REQUIRE_MESSAGE(d >= 0, path);
  hid_t s = H5Dget_space(d);
  std::vector<T> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  H5Sclose(s);
  if (!v.empty()) CHECK(H5Dread(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0);
  H5Dclose(d);
  return v;
}

template <class T>
T raw_attribute(hid_t file, const char* object, const char* name, hid_t mem) {
  T v{};
  hid_t a = H5Aopen_by_name(file, object, name, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE_MESSAGE(a >= 0, object, "@", name);
  CHECK(H5Aread(a, mem, &v) >= 0);
  H5Aclose(a);
  return v;
}

const std::string kV1 = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1.h5";
const std::string kConverted = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/checkpoint-v1-converted.h5";

}  // namespace

TEST_CASE("checkpoint format: every string is stored fixed-length, NUL-padded, UTF-8, of its own size") {
  const std::string dir = test::temp_dir("ckpt_format_strings");
  for (const std::string& config : {std::string("# résumé\nmodel:\n  d_model: 8\n"), std::string()}) {
    CAPTURE(config);
    const std::string path = dir + "/c.h5";
    save_checkpoint(path, small_checkpoint(config));
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    REQUIRE(file >= 0);
    auto check_type = [](hid_t type, std::size_t bytes) {
      CHECK(H5Tget_class(type) == H5T_STRING);
      CHECK(H5Tis_variable_str(type) == 0);
      CHECK(H5Tget_size(type) == std::max<std::size_t>(bytes, 1));  // HDF5 needs at least one byte
      CHECK(H5Tget_strpad(type) == H5T_STR_NULLPAD);
      CHECK(H5Tget_cset(type) == H5T_CSET_UTF8);
      H5Tclose(type);
    };
    for (auto [name, value] : {std::make_pair("format", std::string(kCheckpointFormat)),
                               std::make_pair("qkv_version", std::string(QKV_VERSION))}) {
      CAPTURE(name);
      hid_t a = H5Aopen(file, name, H5P_DEFAULT);
      check_type(H5Aget_type(a), value.size());
      H5Aclose(a);
    }
    hid_t d = H5Dopen2(file, "/config", H5P_DEFAULT);
    check_type(H5Dget_type(d), config.size());
    H5Dclose(d);
    CHECK(raw_attribute<long long>(file, "/", "format_version", H5T_NATIVE_LLONG) == 2);
    H5Fclose(file);
    CHECK(load_checkpoint(path).config_yaml == config);
  }
}

TEST_CASE("checkpoint format: a variable-length string is refused with the object's name and what was expected") {
  const std::string dir = test::temp_dir("ckpt_format_vlen");
  const std::string path = dir + "/c.h5";
  const std::string expected = "is a variable-length string; expected a fixed-length string";

  save_checkpoint(path, small_checkpoint("a: 1\n"));
  edit(path, [](hid_t f) { put_string_attribute(f, "format", 0); });
  CHECK(load_error(path).find("load_checkpoint: " + path + ": attribute 'format' of / " + expected) == 0);
  const std::string text = inspect(path);  // lists the attribute without reading it
  CHECK(text.find("@format = (unreadable: attribute 'format' of / " + expected) != std::string::npos);
  CHECK(text.find("@qkv_version = \"" + std::string(QKV_VERSION) + "\"") != std::string::npos);

  save_checkpoint(path, small_checkpoint("a: 1\n"));
  edit(path, [](hid_t f) { put_config(f, 0, true); });
  CHECK(load_error(path).find("/config " + expected) != std::string::npos);
  CHECK(inspect(path).find("/config  (unreadable: /config " + expected) != std::string::npos);
}

TEST_CASE("checkpoint format: damaged string sizes and shapes are refused before anything is allocated") {
  const std::string dir = test::temp_dir("ckpt_format_sizes");
  const std::string path = dir + "/c.h5";
  struct Case {
    const char* what;
    std::function<void(hid_t)> damage;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"a 4 GiB config", [](hid_t f) { put_config(f, 0xFFFFFFF0u, false); }, "/config: damaged string: it declares 4294967280 bytes in a file of "},
      {"a config longer than the file", [](hid_t f) { put_config(f, 200000, false); }, "/config: damaged string: it declares 200000 bytes in a file of "},
      {"a config whose bytes were never stored", [](hid_t f) { put_config(f, 60, false); }, "/config: a () string dataset needs 60 bytes but 0 are stored"},
      {"two format strings", [](hid_t f) { put_string_attribute(f, "format", 14, 2); }, "attribute 'format' of /: expected one string, found 2 elements"},
      {"a format that is a number", [](hid_t f) { put_int_typed(f, "format", H5T_STD_I64LE); }, "attribute 'format' of /: expected a fixed-length string, found an integer of 8 bytes"},
      {"a string format_version", [](hid_t f) { put_string_attribute(f, "format_version", 1); }, "attribute 'format_version' of /: expected one integer, found a fixed-length string of 1 bytes"},
      {"a variable-length format_version", [](hid_t f) { put_string_attribute(f, "format_version", 0); }, "attribute 'format_version' of /: expected one integer, found a variable-length string"},
      {"a float format_version", [](hid_t f) { put_int_typed(f, "format_version", H5T_IEEE_F64LE); }, "attribute 'format_version' of /: expected one integer, found a float of 8 bytes"},
      {"two format_versions", [](hid_t f) { put_int_typed(f, "format_version", H5T_STD_I64LE, 2); }, "attribute 'format_version' of /: expected one integer, found 2 elements"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    save_checkpoint(path, small_checkpoint("a: 1\n"));
    edit(path, c.damage);
    const std::string msg = load_error(path);
    CHECK(msg.find("load_checkpoint: " + path + ": " + c.expect) == 0);
    CHECK_NOTHROW(inspect(path));
  }
}

TEST_CASE("checkpoint format: a version-1 file is refused with the version found, the version read and how to convert it") {
  // Version 1 had no qkv header, so the loader refuses it before HDF5 reads a byte, and says how
  // to convert it.
  const std::string msg = load_error(kV1);
  CHECK(msg.find("load_checkpoint: " + kV1 + ": not a qkv checkpoint (no qkv header in the first 512 bytes)") == 0);
  CHECK(msg.find("format_version 1") != std::string::npos);
  const std::string stem = kV1.substr(0, kV1.size() - 3);
  CHECK(msg.find("scripts/convert_checkpoint.py " + kV1 + " " + stem + ".v2.h5") != std::string::npos);
  CHECK_THROWS_AS(inspect(kV1), IoError);  // unverified files are listed only on request

  // The same file resealed (a header put in front) reaches the HDF5 format_version check.
  const std::string sealed = test::temp_dir("ckpt_format_v1") + "/v1.h5";
  std::filesystem::copy_file(kV1, sealed, std::filesystem::copy_options::overwrite_existing);
  seal_checkpoint_file(sealed);
  const std::string msg2 = load_error(sealed);
  CHECK(msg2.find("load_checkpoint: " + sealed + ": checkpoint format_version 1 is not supported") == 0);
  CHECK(msg2.find("reads format_version 2") != std::string::npos);

  const std::string text = inspect(kV1, /*verify=*/false);
  CHECK(text.find("@format_version = 1") != std::string::npos);
  CHECK(text.find("@format = (unreadable: attribute 'format' of / is a variable-length string") != std::string::npos);
  CHECK(text.find("note: checkpoint format_version 1 is not supported") != std::string::npos);
  CHECK(text.find("/model/tok_emb.weight  float32 (8, 16)") != std::string::npos);  // the numbers still show
}

TEST_CASE("checkpoint format: the committed conversion of the version-1 fixture holds the same data") {
  // tests/fixtures/checkpoint-v1-converted.h5 is scripts/convert_checkpoint.py's output for
  // checkpoint-v1.h5 (written by qkv before format_version 2). Compare it with the version-1 file
  // read through the raw HDF5 API (a trusted file, so reading its variable-length config is fine).
  const Checkpoint ck = load_checkpoint(kConverted);
  hid_t v1 = H5Fopen(kV1.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  REQUIRE(v1 >= 0);
  CHECK(ck.step == raw_attribute<long long>(v1, "/", "step", H5T_NATIVE_LLONG));
  CHECK(ck.step == 10);
  CHECK(ck.optimizer_step == raw_attribute<long long>(v1, "/optimizer", "step", H5T_NATIVE_LLONG));
  {
    hid_t d = H5Dopen2(v1, "/config", H5P_DEFAULT);
    hid_t t = string_type(0);
    H5Tset_cset(t, H5T_CSET_UTF8);
    char* text = nullptr;
    REQUIRE(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text) >= 0);
    CHECK(ck.config_yaml == std::string(text));
    CHECK(ck.config_yaml.find("d_model: 16") != std::string::npos);
    H5free_memory(text);
    H5Tclose(t);
    H5Dclose(d);
  }
  auto count = [&](const char* group) {
    H5G_info_t info{};
    H5Gget_info_by_name(v1, group, &info, H5P_DEFAULT);
    return static_cast<std::size_t>(info.nlinks);
  };
  CHECK(ck.model.size() == count("/model"));
  CHECK(ck.model.size() > 10);
  for (auto& [name, value] : ck.model) {
    CAPTURE(name);
    auto want = raw_dataset<float>(v1, "/model/" + name, H5T_NATIVE_FLOAT);
    REQUIRE(want.size() == value.size());
    CHECK(std::memcmp(want.data(), value.data(), want.size() * sizeof(float)) == 0);
  }
  CHECK(ck.optimizer.size() == 2 * ck.model.size());  // exp_avg and exp_avg_sq
  for (auto& [name, value] : ck.optimizer) {
    CAPTURE(name);
    auto want = raw_dataset<float>(v1, "/optimizer/" + name, H5T_NATIVE_FLOAT);
    REQUIRE(want.size() == value.size());
    CHECK(std::memcmp(want.data(), value.data(), want.size() * sizeof(float)) == 0);
  }
  CHECK(ck.rng.size() == count("/rng"));
  for (auto& [name, state] : ck.rng) {
    auto want = raw_dataset<std::uint64_t>(v1, "/rng/" + name, H5T_NATIVE_UINT64);
    CHECK(want == std::vector<std::uint64_t>(state.begin(), state.end()));
  }
  CHECK(ck.metrics.size() == count("/metrics"));
  for (auto& [name, column] : ck.metrics) {
    CAPTURE(name);
    auto want = raw_dataset<double>(v1, "/metrics/" + name, H5T_NATIVE_DOUBLE);
    REQUIRE(want.size() == column.size());
    CHECK(std::memcmp(want.data(), column.data(), want.size() * sizeof(double)) == 0);
  }
  H5O_info_t train{};
  H5Oget_info_by_name(v1, "/train", &train, H5P_DEFAULT);
  CHECK(ck.scalars.size() == train.num_attrs);
  for (auto& [name, value] : ck.scalars) {
    CAPTURE(name);
    const double want = raw_attribute<double>(v1, "/train", name.c_str(), H5T_NATIVE_DOUBLE);
    CHECK(std::memcmp(&want, &value, sizeof want) == 0);
  }
  H5Fclose(v1);
}
