// HDF5 files written by other programs for qkv: h5py's booleans (numpy bool, stored as a 1-byte
// enum FALSE = 0, TRUE = 1) load as masks, attributes and integers. The fixture is h5py's own
// output (tools/make_h5py_fixture.py), so the suite needs no Python.
#include <doctest/doctest.h>
#include <hdf5.h>

#include <string>

#include "io/hdf5.hpp"
#include "qkv/io/checkpoint.hpp"
#include "test_util.hpp"

using namespace qkv;
using namespace qkv::io;

namespace {

const std::string kFile = std::string(QKV_SOURCE_DIR) + "/tests/fixtures/h5py_bool.h5";

std::string load_error(const std::string& path, const std::string& dataset) {
  try {
    load_mask(path, dataset);
  } catch (const IoError& e) {
    return e.what();
  }
  return "(no error)";
}

Shape shape_of(const Mask& m) { return Shape(m.shape().begin(), m.shape().end()); }

}  // namespace

TEST_CASE("h5py files: boolean datasets load as masks, with their shapes and values") {
  const Mask pad = load_mask(kFile, "pad");
  REQUIRE(shape_of(pad) == Shape{2, 3});
  const bool want[2][3] = {{false, false, true}, {false, true, true}};
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t j = 0; j < 3; ++j) CHECK(pad(b, j) == want[b][j]);
  const Mask causal = load_mask(kFile, "masks/causal");  // in a group
  REQUIRE(shape_of(causal) == Shape{4, 4});
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) CHECK(causal(i, j) == (j <= i));
  const Mask ints = load_mask(kFile, "ints01");  // integers 0 / 1 too
  CHECK(ints(0, 0));
  CHECK_FALSE(ints(0, 1));
  CHECK(shape_of(load_mask(kFile, "empty")) == Shape{0, 3});
}

TEST_CASE("h5py files: what is not a mask is refused with the file, the dataset and what was found") {
  const std::string other = load_error(kFile, "not_a_mask");
  CHECK(other.find(kFile) != std::string::npos);
  CHECK(other.find("/not_a_mask: expected a mask (0 or 1), element 1 is 2") != std::string::npos);
  CHECK(load_error(kFile, "floats").find("/floats: expected a mask (booleans, or integers 0 and 1) of rank <= 4, found float32") !=
        std::string::npos);
  CHECK(load_error(kFile, "nope").find("/nope is missing") != std::string::npos);
  CHECK(load_error(kFile, "../pad").find("(no error)") == std::string::npos);
  CHECK(load_error(test::temp_dir("h5py_none") + "/missing.h5", "pad").find("missing.h5") != std::string::npos);
}

TEST_CASE("h5py files: boolean attributes read as 0 / 1 and inspect shows true / false") {
  h5::quiet();
  h5::Handle file(H5Fopen(kFile.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "open");
  h5::Handle root(H5Gopen2(file, "/", H5P_DEFAULT), H5Gclose, "root");
  CHECK(h5::read_int_attribute(root, "flag", "/") == 1);
  CHECK(h5::read_int_attribute(root, "off", "/") == 0);
  CHECK(h5::read_double_attribute(root, "flag", "/") == 1.0);
  CHECK(h5::read_int_attribute(root, "count", "/") == 7);
  const std::string text = inspect(kFile, false);
  CHECK(text.find("@flag = true") != std::string::npos);
  CHECK(text.find("@off = false") != std::string::npos);
  CHECK(text.find("bool (2, 3)  [false, false, true, false, true, true]") != std::string::npos);
}

TEST_CASE("h5py files: a boolean dataset holding another byte is an IoError, not a silent true") {
  // h5py never writes one; a damaged or hand-made file can. Written raw in h5py's enum type.
  const std::string path = test::temp_dir("h5py_bad_bool") + "/bad.h5";
  {
    h5::Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose, "create");
    h5::Handle type(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose, "enum");
    const signed char no = 0, yes = 1;
    h5::check(H5Tenum_insert(type, "FALSE", &no), "insert");
    h5::check(H5Tenum_insert(type, "TRUE", &yes), "insert");
    CHECK(h5::is_bool_enum(type));
    const hsize_t dims[1] = {3};
    h5::Handle space(H5Screate_simple(1, dims, nullptr), H5Sclose, "space");
    h5::Handle d(H5Dcreate2(f, "mask", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose, "dataset");
    const signed char bytes[3] = {1, 2, 0};
    h5::check(H5Dwrite(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes), "write");
    // An enum that is not h5py's boolean (other names) stays unreadable as a mask.
    h5::Handle colour(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose, "enum");
    h5::check(H5Tenum_insert(colour, "RED", &no), "insert");
    h5::check(H5Tenum_insert(colour, "GREEN", &yes), "insert");
    CHECK_FALSE(h5::is_bool_enum(colour));
    h5::Handle d2(H5Dcreate2(f, "colour", colour, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose, "dataset");
    const signed char c[3] = {0, 1, 0};
    h5::check(H5Dwrite(d2, colour, H5S_ALL, H5S_ALL, H5P_DEFAULT, c), "write");
  }
  CHECK(load_error(path, "mask").find("/mask: element 1 of a boolean dataset holds 2") != std::string::npos);
  CHECK(load_error(path, "colour").find("found other") != std::string::npos);
}
