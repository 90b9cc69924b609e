// NPY files written by NumPy (data/testdata/npy, made by make_fixtures.py
// there) read back with their shapes and values, in every type and both byte
// orders; files written here byte by byte, malformed each in one way, refused
// naming the file and the problem; files read through a pipe, where the size
// is not known in advance.
#include "data/npy.h"

#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace traind::data {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using traind::testing::TempDir;
using Type = NpyArray::Type;

std::string Fixture(const std::string& name) {
  return std::string(TRAIND_SOURCE_DIR) + "/data/testdata/npy/" + name;
}

// The formulas of make_fixtures.py: element i of each fixture.
int64_t U(int64_t i) { return (i * 7) % 251; }
int64_t S(int64_t i, int64_t scale) { return (U(i) - 125) * scale; }
float F(int64_t i) { return static_cast<float>(U(i) - 125) / 8.0f; }

// An NPY file as numpy writes one: the magic, the version, the header length
// (little-endian, 2 bytes in version 1.0, 4 after), `dict` padded with spaces
// and a newline to a multiple of 64 bytes, then `data`.
std::string Npy(const std::string& dict, const std::string& data, int major = 1) {
  const size_t preamble = major == 1 ? 10 : 12;
  std::string header = dict;
  while ((preamble + header.size() + 1) % 64 != 0) header.push_back(' ');
  header.push_back('\n');
  std::string file = std::string("\x93") + "NUMPY";
  file.push_back(static_cast<char>(major));
  file.push_back(0);
  for (size_t k = 0; k < preamble - 8; ++k) {
    file.push_back(static_cast<char>((header.size() >> (8 * k)) & 0xFF));
  }
  return file + header + data;
}

// The header numpy writes for a C-ordered array.
std::string Dict(const std::string& descr, const std::string& shape) {
  return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
}

// `n` little-endian float32 values 0.5, 1.5, ...
std::string Floats(int n) {
  std::string data;
  for (int i = 0; i < n; ++i) {
    const float v = static_cast<float>(i) + 0.5f;
    data.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return data;
}

std::string MessageOf(const std::string& path, int64_t max_elements = int64_t{1} << 31) {
  absl::StatusOr<NpyArray> a = ReadNpy(path, max_elements);
  EXPECT_FALSE(a.ok()) << path;
  EXPECT_EQ(FailureKindOf(a.status()), FailureKind::kDataError) << a.status();
  return std::string(a.status().message());
}

// A batch of three 4×5 byte images, float32 N×C×H×W and int64 labels, as
// numpy.save writes them.
TEST(NpyTest, ReadsImagesActivationsAndLabelsWrittenByNumpy) {
  absl::StatusOr<NpyArray> images = ReadNpy(Fixture("images_u1.npy"));
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->type, Type::kUint8);
  EXPECT_EQ(images->shape, (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(images->elements(), 60);
  EXPECT_TRUE(images->values.empty());
  ASSERT_EQ(images->bytes.size(), 60u);
  for (int i = 0; i < 60; ++i) EXPECT_EQ(images->bytes[i], U(i)) << i;
  EXPECT_EQ(images->bytes[1], 7);
  EXPECT_EQ(images->bytes[59], 162);

  absl::StatusOr<NpyArray> nchw = ReadNpy(Fixture("nchw_f4.npy"));
  ASSERT_TRUE(nchw.ok()) << nchw.status();
  EXPECT_EQ(nchw->type, Type::kFloat32);
  EXPECT_EQ(nchw->shape, (std::vector<int64_t>{2, 3, 2, 2}));
  EXPECT_TRUE(nchw->bytes.empty());
  ASSERT_EQ(nchw->values.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(nchw->values[i], F(i)) << i;
  EXPECT_EQ(nchw->values[0], -15.625f);
  EXPECT_EQ(nchw->values[23], 4.5f);

  absl::StatusOr<NpyArray> labels = ReadNpy(Fixture("labels_i8.npy"));
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->type, Type::kInt64);
  EXPECT_EQ(labels->shape, (std::vector<int64_t>{12}));
  EXPECT_EQ(labels->values, (std::vector<float>{0, 3, 6, 9, 2, 5, 8, 1, 4, 7, 0, 3}));
}

// int8, int16, uint16, int32, int64, float32 and float64, little- and
// big-endian, nine elements each spread over the type's range.
TEST(NpyTest, ReadsEveryTypeInBothByteOrders) {
  struct Case {
    std::string code;
    Type type;
    std::vector<float> expected;
  };
  std::vector<Case> cases = {{"i1", Type::kInt8, {}},   {"i2", Type::kInt16, {}},
                             {"u2", Type::kUint16, {}}, {"i4", Type::kInt32, {}},
                             {"i8", Type::kInt64, {}},  {"f4", Type::kFloat32, {}},
                             {"f8", Type::kFloat64, {}}};
  for (int64_t i = 0; i < 9; ++i) {
    cases[0].expected.push_back(static_cast<float>(S(i, 1)));
    cases[1].expected.push_back(static_cast<float>(S(i, 200)));
    cases[2].expected.push_back(static_cast<float>(U(i) * 250));
    cases[3].expected.push_back(static_cast<float>(S(i, int64_t{1} << 20)));
    cases[4].expected.push_back(static_cast<float>(S(i, int64_t{1} << 40)));
    cases[5].expected.push_back(F(i));
    cases[6].expected.push_back(F(i));
  }
  for (const std::string tag : {"le", "be"}) {
    for (const Case& c : cases) {
      const std::string path = Fixture(tag + "_" + c.code + ".npy");
      absl::StatusOr<NpyArray> a = ReadNpy(path);
      ASSERT_TRUE(a.ok()) << a.status();
      EXPECT_EQ(a->type, c.type) << path;
      EXPECT_EQ(a->shape, (std::vector<int64_t>{9})) << path;
      EXPECT_TRUE(a->bytes.empty()) << path;
      EXPECT_EQ(a->values, c.expected) << path;
    }
  }
  // A few of them spelled out: the extremes of each range.
  absl::StatusOr<NpyArray> a = ReadNpy(Fixture("be_i1.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[0], -125.0f);
  EXPECT_EQ(a->values[8], -69.0f);
  a = ReadNpy(Fixture("be_i2.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[1], -23600.0f);
  a = ReadNpy(Fixture("be_u2.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[8], 14000.0f);
  a = ReadNpy(Fixture("le_i4.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[1], -123731968.0f);
  a = ReadNpy(Fixture("be_i8.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[0], -137438953472000.0f);
  a = ReadNpy(Fixture("be_f8.npy"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values[2], -13.875f);
}

// Version 2.0 (a 4-byte header length) and 3.0 (a UTF-8 header).
TEST(NpyTest, ReadsVersions2And3) {
  absl::StatusOr<NpyArray> v2 = ReadNpy(Fixture("v2_f4.npy"));
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->type, Type::kFloat32);
  EXPECT_EQ(v2->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(v2->values, (std::vector<float>{F(0), F(1), F(2), F(3), F(4), F(5)}));
  EXPECT_EQ(v2->values[5], -11.25f);

  absl::StatusOr<NpyArray> v3 = ReadNpy(Fixture("v3_u1.npy"));
  ASSERT_TRUE(v3.ok()) << v3.status();
  EXPECT_EQ(v3->type, Type::kUint8);
  EXPECT_EQ(v3->shape, (std::vector<int64_t>{5}));
  EXPECT_EQ(v3->bytes, (std::vector<uint8_t>{0, 7, 14, 21, 28}));
}

// A 0-d array holds one element, a shape with a 0 none; bools are bytes 0
// and 1; NaN and infinities stay, a float64 past float's range becomes inf.
TEST(NpyTest, ReadsScalarsEmptyArraysBoolsAndNonFiniteValues) {
  absl::StatusOr<NpyArray> scalar = ReadNpy(Fixture("scalar_f8.npy"));
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->type, Type::kFloat64);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->elements(), 1);
  EXPECT_EQ(scalar->values, (std::vector<float>{2.5f}));

  absl::StatusOr<NpyArray> empty = ReadNpy(Fixture("empty_f4.npy"));
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(empty->elements(), 0);
  EXPECT_TRUE(empty->values.empty());

  absl::StatusOr<NpyArray> bools = ReadNpy(Fixture("bool_b1.npy"));
  ASSERT_TRUE(bools.ok()) << bools.status();
  EXPECT_EQ(bools->type, Type::kUint8);
  EXPECT_EQ(bools->shape, (std::vector<int64_t>{7}));
  EXPECT_EQ(bools->bytes, (std::vector<uint8_t>{0, 1, 0, 1, 0, 1, 0}));

  absl::StatusOr<NpyArray> odd = ReadNpy(Fixture("nonfinite_f8.npy"));
  ASSERT_TRUE(odd.ok()) << odd.status();
  ASSERT_EQ(odd->values.size(), 5u);
  EXPECT_TRUE(std::isnan(odd->values[0]));
  EXPECT_EQ(odd->values[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(odd->values[2], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(odd->values[3], std::numeric_limits<float>::infinity());
  EXPECT_EQ(odd->values[4], 0.0f);
  EXPECT_TRUE(std::signbit(odd->values[4]));
}

// Headers numpy does not write but reads: keys in another order, double
// quotes, no trailing comma, no padding, Python 2 longs, '=' and '|' for
// this machine's order, a descr without an order; a parenthesized shape
// with extra spaces.
TEST(NpyTest, AcceptsHeadersInEveryFormPythonAllows) {
  TempDir dir;
  const std::string data = Floats(6);
  for (const std::string dict : {
           "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
           "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3)}",
           "{ 'descr' : '=f4' ,\n 'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }",
           "{'descr': '|f4', 'fortran_order': False, 'shape': (2L, 3L), }",
           "{'descr': 'f4', 'fortran_order': False, 'shape': (+2, 3), }",
       }) {
    const std::string path = dir.Write("a.npy", Npy(dict, data));
    absl::StatusOr<NpyArray> a = ReadNpy(path);
    ASSERT_TRUE(a.ok()) << dict << ": " << a.status();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3})) << dict;
    EXPECT_EQ(a->values, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f})) << dict;
  }
  // No padding and no newline at all.
  std::string bare = std::string("\x93") + "NUMPY" + std::string("\x01\x00", 2);
  const std::string dict = Dict("<f4", "(1,)");
  bare.push_back(static_cast<char>(dict.size()));
  bare.push_back(0);
  absl::StatusOr<NpyArray> a = ReadNpy(dir.Write("bare.npy", bare + dict + Floats(1)));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->values, (std::vector<float>{0.5f}));
}

TEST(NpyTest, RefusesWhatNumpyWritesForFortranOrderAndStrings) {
  std::string p = Fixture("fortran_f4.npy");
  EXPECT_EQ(MessageOf(p),
            p + ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  p = Fixture("strings_U5.npy");
  EXPECT_EQ(MessageOf(p), p + ": dtype \"<U5\" (strings) is not supported; use uint8, int or "
                              "float arrays");
}

TEST(NpyTest, RefusesMalformedFilesNamingTheFileAndTheProblem) {
  TempDir dir;
  std::string p = dir.Write("a.csv", "x,y\n1,2\n");
  EXPECT_EQ(MessageOf(p), p + ": not an NPY file (it starts 0x78 0x2c 0x79 0x0a 0x31 0x2c, an NPY "
                              "file with 0x93 \"NUMPY\")");
  p = dir.Write("empty.npy", "");
  EXPECT_EQ(MessageOf(p), p + ": not an NPY file (it starts empty, an NPY file with 0x93 "
                              "\"NUMPY\")");
  p = dir.Write("a.npz", std::string("PK\x03\x04\x14\x00\x00\x00", 8));
  EXPECT_EQ(MessageOf(p), p + ": not an NPY file (it starts 0x50 0x4b 0x03 0x04 0x14 0x00, an NPY "
                              "file with 0x93 \"NUMPY\"); a zip file, as numpy.savez writes: "
                              "unzip it and read its .npy files");
  std::string v4 = Npy(Dict("<f4", "(1,)"), Floats(1), 2);
  v4[6] = 4;
  p = dir.Write("v4.npy", v4);
  EXPECT_EQ(MessageOf(p),
            p + ": NPY version 4.0 is not supported (versions 1.0, 2.0 and 3.0 are read)");
  v4[6] = 1;
  v4[7] = 1;
  p = dir.Write("v1.1.npy", v4);
  EXPECT_EQ(MessageOf(p),
            p + ": NPY version 1.1 is not supported (versions 1.0, 2.0 and 3.0 are read)");
  p = dir.Write("preamble.npy", Npy(Dict("<f4", "(1,)"), "", 2).substr(0, 10));
  EXPECT_EQ(MessageOf(p), p + ": the file ends after 10 bytes, before the NPY header (magic, "
                              "version, header length) is complete");
  p = dir.Write("header.npy", Npy(Dict("<f4", "(1,)"), "").substr(0, 40));
  EXPECT_EQ(MessageOf(p), p + ": the NPY header ends after 40 of its 128 bytes");
  std::string long_header = Npy(Dict("<f4", "(1,)"), "", 2);
  long_header[10] = 0x01;  // 65536 + 116 bytes
  p = dir.Write("length.npy", long_header);
  EXPECT_EQ(MessageOf(p), p + ": the NPY header is 65652 bytes long, more than the 65536 read at "
                              "most (a corrupt header length?)");

  // The header dict: what is wrong, then the header.
  const std::string quoted = "(the header reads \"{'descr': '<f4', 'fortran_order': False, }\")";
  p = dir.Write("no-shape.npy", Npy("{'descr': '<f4', 'fortran_order': False, }", ""));
  EXPECT_EQ(MessageOf(p), p + ": malformed NPY header: no 'shape' key " + quoted);
  p = dir.Write("no-descr.npy", Npy("{'fortran_order': False, 'shape': (1,), }", Floats(1)));
  EXPECT_THAT(MessageOf(p), StartsWith(p + ": malformed NPY header: no 'descr' key (the header "
                                           "reads \"{'fortran_order': False, 'shape': (1,), }\")"));
  p = dir.Write("colon.npy", Npy("{'descr' '<f4', 'fortran_order': False, 'shape': (1,), }", ""));
  EXPECT_THAT(MessageOf(p),
              StartsWith(p + ": malformed NPY header: expected ':' at byte 9 of the header, not "
                             "\"'\" (the header reads \"{'descr' '<f4', "));
  p = dir.Write("open.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,", ""));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: expected a value, but the "
                                          "header ends"));
  p = dir.Write("after.npy", Npy(Dict("<f4", "(1,)") + " x", Floats(1)));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: expected nothing after the "
                                          "'}' at byte 58 of the header, not \"x\""));
  p = dir.Write("twice.npy",
                Npy("{'descr': '<f4', 'shape': (1,), 'fortran_order': False, 'shape': (1,)}", ""));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: the key \"shape\" appears "
                                          "twice"));
  p = dir.Write("extra.npy", Npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), "
                                 "'align': True}",
                                 Floats(1)));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: unexpected key \"align\" (an "
                                          "NPY header has 'descr', 'fortran_order' and 'shape')"));
  p = dir.Write("int-shape.npy", Npy(Dict("<f4", "(3)"), Floats(3)));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: 'shape' is not a tuple ("));
  p = dir.Write("list-shape.npy", Npy(Dict("<f4", "[3]"), Floats(3)));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: 'shape' is not a tuple ("));
  p = dir.Write("float-shape.npy", Npy(Dict("<f4", "(3.0,)"), Floats(3)));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: expected ',' or a closing "
                                          "bracket after the integer at byte 52 of the header"));
  p = dir.Write("str-shape.npy", Npy(Dict("<f4", "('3',)"), Floats(3)));
  EXPECT_THAT(MessageOf(p),
              HasSubstr(p + ": malformed NPY header: 'shape' holds something not an integer ("));
  p = dir.Write("negative.npy", Npy(Dict("<f4", "(2, -3)"), ""));
  EXPECT_THAT(MessageOf(p),
              HasSubstr(p + ": malformed NPY header: 'shape' has a negative dimension, -3 ("));
  p = dir.Write("big-int.npy", Npy(Dict("<f4", "(99999999999999999999,)"), ""));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: the integer at byte 51 of the "
                                          "header does not fit in 64 bits"));
  p = dir.Write("order.npy",
                Npy("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,), }", Floats(1)));
  EXPECT_THAT(MessageOf(p),
              HasSubstr(p + ": malformed NPY header: 'fortran_order' is neither True nor False"));
  p = dir.Write("descr.npy", Npy("{'descr': 4, 'fortran_order': False, 'shape': (1,), }", ""));
  EXPECT_THAT(MessageOf(p), HasSubstr(p + ": malformed NPY header: 'descr' is not a string"));
  p = dir.Write("nested.npy", Npy(Dict("<f4", std::string(40, '(') + std::string(40, ')')), ""));
  EXPECT_THAT(MessageOf(p),
              HasSubstr(p + ": malformed NPY header: tuples and lists nested more than 16 deep"));
  p = dir.Write("quote.npy", Npy("{'descr': '<f4, 'fortran_order': False, 'shape': (1,), }", ""));
  EXPECT_THAT(MessageOf(p),
              HasSubstr(p + ": malformed NPY header: expected ',' or '}' at byte 17 of "
                            "the header, not \"f\""));

  // Fortran order, and the types traind does not read.
  p = dir.Write("fortran.npy",
                Npy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", Floats(6)));
  EXPECT_EQ(MessageOf(p),
            p + ": Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  const std::string hint = ") is not supported; use uint8, int or float arrays";
  for (const auto& [descr, what] :
       std::vector<std::pair<std::string, std::string>>{{"<U5", "strings"},
                                                        {"|O", "Python objects"},
                                                        {"|S3", "byte strings"},
                                                        {"<c8", "complex numbers"},
                                                        {"<M8[ns]", "datetimes"},
                                                        {"|V8", "raw or structured records"},
                                                        {"<u4", "uint32"},
                                                        {">u8", "uint64"},
                                                        {"<f2", "float16"},
                                                        {"<f16", "float128"},
                                                        {"<i3", "int24"},
                                                        {"x", "not a NumPy type"}}) {
    p = dir.Write("type.npy", Npy(Dict(descr, "(1,)"), std::string(8, '\0')));
    EXPECT_EQ(MessageOf(p), p + ": dtype \"" + descr + "\" (" + what + hint);
  }
  p = dir.Write("record.npy", Npy("{'descr': [('x', '<f4'), ('y', '<i4', (2,))], "
                                  "'fortran_order': False, 'shape': (1,), }",
                                  std::string(12, '\0')));
  EXPECT_EQ(MessageOf(p), p + ": a structured dtype (a record of named fields) is not supported; "
                              "use uint8, int or float arrays");

  // Shapes too large: past int64, past max_elements.
  p = dir.Write("overflow.npy", Npy(Dict("<f4", "(1099511627776, 1099511627776)"), Floats(1)));
  EXPECT_EQ(MessageOf(p), p + ": the NPY header declares shape (1099511627776, 1099511627776), "
                              "more elements than a 64-bit count holds");
  p = dir.Write("overflow-bytes.npy", Npy(Dict("<f8", "(2, 1152921504606846976)"), ""));
  EXPECT_EQ(MessageOf(p, std::numeric_limits<int64_t>::max()),
            p + ": the NPY header declares shape (2, 1152921504606846976), more elements than a "
                "64-bit count holds");
  p = dir.Write("huge.npy", Npy(Dict("|u1", "(65536, 65536)"), Floats(1)));
  EXPECT_EQ(MessageOf(p), p + ": the NPY header declares shape (65536, 65536), 4294967296 "
                              "elements, more than the 2147483648 read at most");
  p = dir.Write("limit.npy", Npy(Dict("<f4", "(2, 3)"), Floats(6)));
  EXPECT_EQ(MessageOf(p, 5), p + ": the NPY header declares shape (2, 3), 6 elements, more than "
                                 "the 5 read at most");
  EXPECT_TRUE(ReadNpy(p, 6).ok());
  // A 0 in the shape makes the rest harmless.
  p = dir.Write("zero.npy", Npy(Dict("<f4", "(1099511627776, 1099511627776, 0)"), ""));
  absl::StatusOr<NpyArray> zero = ReadNpy(p);
  ASSERT_TRUE(zero.ok()) << zero.status();
  EXPECT_EQ(zero->elements(), 0);

  // Data short or long.
  p = dir.Write("short.npy", Npy(Dict("<f4", "(2, 3)"), Floats(6).substr(0, 10)));
  EXPECT_EQ(MessageOf(p), p + ": the file ends after 10 of 24 bytes of data (shape (2, 3) and "
                              "dtype \"<f4\")");
  p = dir.Write("no-data.npy", Npy(Dict("|u1", "(5,)"), ""));
  EXPECT_EQ(MessageOf(p), p + ": the file ends after 0 of 5 bytes of data (shape (5,) and dtype "
                              "\"|u1\")");
  p = dir.Write("long.npy", Npy(Dict("<f4", "(2, 3)"), Floats(7)));
  EXPECT_EQ(MessageOf(p), p + ": the file goes on after the 24 bytes of data that shape (2, 3) and "
                              "dtype \"<f4\" declare (several arrays saved to one file?)");
  p = dir.Write("scalar-long.npy", Npy(Dict("<f4", "()"), Floats(2)));
  EXPECT_EQ(MessageOf(p), p + ": the file goes on after the 4 bytes of data that shape () and "
                              "dtype \"<f4\" declare (several arrays saved to one file?)");

  p = dir.Path("missing.npy");
  EXPECT_EQ(MessageOf(p), p + ": cannot open: No such file or directory");
  p = dir.path();
  EXPECT_EQ(MessageOf(p), p + ": cannot read: Is a directory");
}

// Writes `bytes` into the FIFO at `path` from another thread while ReadNpy
// reads it, where the size of the file is not known before its end.
absl::StatusOr<NpyArray> ReadThroughPipe(const std::string& path, const std::string& bytes) {
  // A reader that stops early fails the write instead of killing the test.
  std::signal(SIGPIPE, SIG_IGN);
  std::thread writer([&] { std::ofstream(path, std::ios::binary) << bytes; });
  absl::StatusOr<NpyArray> a = ReadNpy(path);
  writer.join();
  return a;
}

// Arrays larger than the conversion chunk, through a pipe and from a file;
// a pipe that ends early or goes on is caught while reading.
TEST(NpyTest, StreamsLargeArraysFromFilesAndPipes) {
  TempDir dir;
  const std::string fifo = dir.Path("fifo.npy");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  constexpr int kN = 40000;  // int16 and float32, converted in chunks
  std::string be_i2;
  for (int i = 0; i < kN; ++i) {
    const int v = (i * 7) % 60001 - 30000;
    be_i2.push_back(static_cast<char>((v >> 8) & 0xFF));
    be_i2.push_back(static_cast<char>(v & 0xFF));
  }
  const std::string file = Npy(Dict(">i2", "(200, 200)"), be_i2);
  for (const bool pipe : {false, true}) {
    absl::StatusOr<NpyArray> a =
        pipe ? ReadThroughPipe(fifo, file) : ReadNpy(dir.Write("big.npy", file));
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->type, Type::kInt16);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{200, 200}));
    ASSERT_EQ(a->values.size(), static_cast<size_t>(kN));
    for (int i = 0; i < kN; ++i) {
      ASSERT_EQ(a->values[i], static_cast<float>((i * 7) % 60001 - 30000)) << i;
    }
  }
  const std::string f4 = Npy(Dict("<f4", "(40000,)"), Floats(kN));
  absl::StatusOr<NpyArray> a = ReadThroughPipe(fifo, f4);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->values.size(), static_cast<size_t>(kN));
  EXPECT_EQ(a->values[0], 0.5f);
  EXPECT_EQ(a->values[kN - 1], kN - 0.5f);

  // Cut in the second chunk of int16, in the middle of an element.
  a = ReadThroughPipe(fifo, file.substr(0, 128 + 50001));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(FailureKindOf(a.status()), FailureKind::kDataError);
  EXPECT_EQ(a.status().message(), fifo +
                                      ": the file ends after 50001 of 80000 bytes of data "
                                      "(shape (200, 200) and dtype \">i2\")");
  a = ReadThroughPipe(fifo, f4.substr(0, f4.size() - 3));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), fifo +
                                      ": the file ends after 159997 of 160000 bytes of data "
                                      "(shape (40000,) and dtype \"<f4\")");
  a = ReadThroughPipe(fifo, Npy(Dict("|u1", "(3,)"), "abcd"));
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), fifo +
                                      ": the file goes on after the 3 bytes of data that shape "
                                      "(3,) and dtype \"|u1\" declare (several arrays saved to "
                                      "one file?)");
  a = ReadThroughPipe(fifo, Npy(Dict("|u1", "(3,)"), "abc"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->bytes, (std::vector<uint8_t>{'a', 'b', 'c'}));
}

}  // namespace
}  // namespace traind::data
