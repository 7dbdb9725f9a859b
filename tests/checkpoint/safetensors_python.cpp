// tests/checkpoint/safetensors_python.cpp: interoperability with the
// reference implementation (PyPI `safetensors`, numpy API), run as a python3
// subprocess: files we write load there with exact names, shapes, dtypes,
// bytes, values and metadata; files it writes load here with exact values.
// Needs `pip install safetensors numpy`; without them these tests FAIL.
#include "catch2_compat.h"

#include <cstring>
#include <numbers>

#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/checkpoint/safetensors.h"

using xrun::SafetensorsFile;
using xrun::TensorView;
using xrun_test::ScratchDir;
using xrun_test::shell_quote;

namespace {

// Checks a file we wrote against an expectation file. Loader "numpy" uses
// safetensors.numpy.load_file (+ safe_open for metadata); "raw" uses the
// reference's own parser (safetensors.deserialize), which also handles BF16.
constexpr const char* kCheckScript = R"PY(
import json, sys
import numpy as np
import safetensors
from safetensors import deserialize, safe_open
from safetensors.numpy import load_file

path, expect_path = sys.argv[1], sys.argv[2]
with open(expect_path, encoding="utf-8") as fh:
    expect = json.load(fh)
NP = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
      "I32": np.int32, "I16": np.int16, "U8": np.uint8, "I8": np.int8, "BOOL": np.bool_}
errors = []

def decode(dtype, raw):
    if dtype == "BF16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, NP[dtype])

if expect["loader"] == "numpy":
    loaded = load_file(path)
    found = {n: (str(a.dtype), list(a.shape), a.tobytes(), a) for n, a in loaded.items()}
    with safe_open(path, framework="np") as f:
        meta = f.metadata() or {}
else:
    with open(path, "rb") as fh:
        found = {n: (v["dtype"], list(v["shape"]), bytes(v["data"]), None)
                 for n, v in deserialize(fh.read())}
    with safe_open(path, framework="np") as f:
        meta = f.metadata() or {}

if sorted(found) != sorted(expect["tensors"]):
    errors.append(f"names: got {sorted(found)}, expected {sorted(expect['tensors'])}")
for name, e in expect["tensors"].items():
    if name not in found:
        continue
    dtype, shape, raw, arr = found[name]
    want_dtype = str(np.dtype(NP[e["dtype"]])) if expect["loader"] == "numpy" else e["dtype"]
    if dtype != want_dtype:
        errors.append(f"{name}: dtype {dtype}, expected {want_dtype}")
    if shape != e["shape"]:
        errors.append(f"{name}: shape {shape}, expected {e['shape']}")
    if raw.hex() != e["hex"]:
        errors.append(f"{name}: bytes {raw.hex()}, expected {e['hex']}")
    values = (arr if arr is not None else decode(e["dtype"], raw)).flatten().tolist()
    if values != e["values"]:
        errors.append(f"{name}: values {values}, expected {e['values']}")
if meta != expect["metadata"]:
    errors.append(f"metadata {meta}, expected {expect['metadata']}")
if errors:
    print("MISMATCH\n" + "\n".join(errors))
    sys.exit(1)
print(f"ok: {len(found)} tensors checked with safetensors {safetensors.__version__}")
)PY";

// Writes a file with the reference writer (numpy save_file, with metadata).
constexpr const char* kSaveScript = R"PY(
import sys
import numpy as np
from safetensors.numpy import save_file

tensors = {
    "layer1.0.conv1.weight": np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2) * 0.25 - 1.5,
    "half": np.array([1.0, -2.0, 0.5, 65504.0, 2.0 ** -24, -0.0], dtype=np.float16),
    "step": np.array(987654321012, dtype=np.int64),
    "idx": np.arange(-3, 4, dtype=np.int32).reshape(7, 1) * 7,
    "pixels": np.arange(10, dtype=np.uint8) * np.uint8(31),
    "f64": np.array([np.pi, 1e-300, -2.5], dtype=np.float64),
    "i16": np.array([-32768, 32767, 5], dtype=np.int16),
    "i8": np.array([-128, 127, -1], dtype=np.int8),
    "flags": np.array([True, False, True, True]),
    "empty": np.zeros((0, 5), dtype=np.float32),
}
save_file(tensors, sys.argv[1],
          metadata={"framework": "numpy", "epoch": "7", "note": "h\u00e9llo \u2713"})
)PY";

// Fails the test (never skips) when python3 cannot import the reference.
void require_python_safetensors() {
  auto r = xrun_test::run_command(xrun_test::python() + " -c 'import safetensors, numpy'");
  INFO("python: " << xrun_test::python() << "\n" << r.output);
  if (r.status != 0)
    FAIL("python3 cannot import safetensors and numpy, needed for the interoperability tests: "
         "run `pip install safetensors numpy`");
}

xrun_test::CommandResult run_python(const ScratchDir& dir, const char* script,
                                    const std::vector<std::string>& args) {
  const std::string script_path = dir.file("script.py");
  xrun_test::write_bytes(script_path, script);
  // Appended piecewise: `" " + std::string` trips GCC 12's false -Wrestrict.
  std::string cmd = xrun_test::python();
  cmd += ' ';
  cmd += shell_quote(script_path);
  for (const auto& a : args) {
    cmd += ' ';
    cmd += shell_quote(a);
  }
  return xrun_test::run_command(cmd);
}

std::string hex(const void* data, size_t bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

// A tensor to write plus what python must see: its values as JSON numbers.
struct Case {
  TensorView view;
  nlohmann::json values;
};

template <class T>
Case make_case(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
               const std::vector<T>& data, nlohmann::json values) {
  return {TensorView{name, dtype, std::move(shape), data.data(), data.size() * sizeof(T)},
          std::move(values)};
}

template <class T>
nlohmann::json as_json(const std::vector<T>& v) {
  nlohmann::json out = nlohmann::json::array();
  for (T x : v) out.push_back(x);
  return out;
}

void check_with_python(const ScratchDir& dir, const std::string& loader, const std::vector<Case>& cases,
                       const std::map<std::string, std::string>& metadata) {
  const std::string path = dir.file(loader + ".safetensors");
  std::vector<TensorView> views;
  nlohmann::json expect = {{"loader", loader}, {"metadata", metadata}, {"tensors", nlohmann::json::object()}};
  for (const auto& c : cases) {
    views.push_back(c.view);
    expect["tensors"][c.view.name] = {{"dtype", c.view.dtype},
                                      {"shape", c.view.shape},
                                      {"hex", hex(c.view.data, c.view.bytes)},
                                      {"values", c.values}};
  }
  xrun::write_safetensors(path, views, metadata);
  const std::string expect_path = dir.file(loader + ".expect.json");
  xrun_test::write_bytes(expect_path, expect.dump(2));
  auto r = run_python(dir, kCheckScript, {path, expect_path});
  INFO("python output:\n" << r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("ok: " + std::to_string(cases.size()) + " tensors"));
}

}  // namespace

TEST_CASE("python safetensors is installed", "[checkpoint][python]") {
  require_python_safetensors();
}

TEST_CASE("python safetensors.numpy loads a file we wrote", "[checkpoint][python]") {
  require_python_safetensors();
  ScratchDir dir;

  std::vector<float> weight(2 * 3 * 2 * 2);
  for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<float>(i) * 0.375f - 3.0f;
  weight[1] = 1.0f / 3.0f;  // not a short decimal: exercises exact round trips
  // F16 bit patterns and their exact values: 1, -2, 0.5, 65504, 2^-24, 1/3 rounded, -0.
  std::vector<uint16_t> half{0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x3555, 0x8000};
  nlohmann::json half_values = {1.0, -2.0, 0.5, 65504.0, 5.9604644775390625e-08, 0.333251953125, -0.0};
  std::vector<int64_t> step{-1234567890123LL};
  std::vector<int32_t> labels{-2147483647 - 1, -1, 0, 1, 2147483647, 42};
  std::vector<uint8_t> pixels(9);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 29 + 3);
  std::vector<int8_t> small{-128, -1, 0, 127};
  std::vector<double> f64{std::numbers::pi, -1e300, 5e-324, 0.1};
  std::vector<uint8_t> mask{1, 0, 1};
  std::vector<float> empty;
  std::vector<int16_t> i16{-32768, 32767, 0};

  std::vector<Case> cases{
      make_case("pixels", "U8", {3, 3}, pixels, as_json(pixels)),
      make_case("conv1.weight", "F32", {2, 3, 2, 2}, weight, as_json(weight)),
      make_case("half", "F16", {7}, half, half_values),
      make_case("bn1.num_batches_tracked", "I64", {}, step, as_json(step)),
      make_case("labels", "I32", {2, 3}, labels, as_json(labels)),
      make_case("i8", "I8", {4}, small, as_json(small)),
      make_case("f64", "F64", {2, 2}, f64, as_json(f64)),
      make_case("mask", "BOOL", {3}, mask, nlohmann::json{true, false, true}),
      make_case("empty", "F32", {0, 3}, empty, nlohmann::json::array()),
      make_case("i16", "I16", {3}, i16, as_json(i16)),
  };
  check_with_python(dir, "numpy", cases,
                    {{"format", "pt"}, {"epoch", "3"}, {"note", "\xC3\xBCn\xC3\xAF code \xE2\x9C\x93"}});
}

TEST_CASE("python safetensors parses BF16 and mixed alignments we wrote", "[checkpoint][python]") {
  require_python_safetensors();
  ScratchDir dir;
  // BF16: 1, -1, 3.140625, 2^-126 (smallest normal), -0
  std::vector<uint16_t> bf16{0x3F80, 0xBF80, 0x4049, 0x0080, 0x8000};
  nlohmann::json bf16_values = {1.0, -1.0, 3.140625, 1.1754943508222875e-38, -0.0};
  std::vector<uint8_t> odd{7, 8, 9};
  std::vector<float> f32{0.5f, -8.25f};
  std::vector<int64_t> i64{9007199254740993LL};  // not representable as a double
  std::vector<Case> cases{
      make_case("odd", "U8", {3}, odd, as_json(odd)),
      make_case("bf16", "BF16", {5}, bf16, bf16_values),
      make_case("f32", "F32", {1, 2}, f32, as_json(std::vector<double>(f32.begin(), f32.end()))),
      make_case("i64", "I64", {1}, i64, as_json(i64)),
  };
  check_with_python(dir, "raw", cases, {});
}

TEST_CASE("a file written by python safetensors.numpy.save_file reads exactly", "[checkpoint][python]") {
  require_python_safetensors();
  ScratchDir dir;
  const std::string path = dir.file("from_python.safetensors");
  auto r = run_python(dir, kSaveScript, {path});
  INFO("python output:\n" << r.output);
  REQUIRE(r.status == 0);

  auto f = SafetensorsFile::open(path);
  CHECK(f.metadata() == std::map<std::string, std::string>{
                            {"framework", "numpy"}, {"epoch", "7"}, {"note", "h\xC3\xA9llo \xE2\x9C\x93"}});
  CHECK(f.names().size() == 10);

  const auto& w = f.get("layer1.0.conv1.weight");
  CHECK(w.dtype == "F32");
  CHECK(w.shape == std::vector<int64_t>{2, 3, 2, 2});
  auto wv = w.to_vector<float>();
  REQUIRE(wv.size() == 24);
  for (size_t i = 0; i < wv.size(); ++i) CHECK(wv[i] == static_cast<float>(i) * 0.25f - 1.5f);

  CHECK(f.get("half").dtype == "F16");
  CHECK(f.get("half").to_vector<uint16_t>() ==
        std::vector<uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF, 0x0001, 0x8000});

  CHECK(f.get("step").dtype == "I64");
  CHECK(f.get("step").shape.empty());
  CHECK(f.get("step").to_vector<int64_t>() == std::vector<int64_t>{987654321012LL});

  CHECK(f.get("idx").dtype == "I32");
  CHECK(f.get("idx").shape == std::vector<int64_t>{7, 1});
  CHECK(f.get("idx").to_vector<int32_t>() == std::vector<int32_t>{-21, -14, -7, 0, 7, 14, 21});

  std::vector<uint8_t> pixels(10);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 31) % 256);
  CHECK(f.get("pixels").dtype == "U8");
  CHECK(f.get("pixels").to_vector<uint8_t>() == pixels);

  CHECK(f.get("f64").to_vector<double>() == std::vector<double>{std::numbers::pi, 1e-300, -2.5});
  CHECK(f.get("i16").to_vector<int16_t>() == std::vector<int16_t>{-32768, 32767, 5});
  CHECK(f.get("i8").dtype == "I8");
  CHECK(f.get("i8").to_vector<int8_t>() == std::vector<int8_t>{-128, 127, -1});
  CHECK(f.get("flags").dtype == "BOOL");
  CHECK(f.get("flags").to_vector<uint8_t>() == std::vector<uint8_t>{1, 0, 1, 1});
  CHECK(f.get("empty").shape == std::vector<int64_t>{0, 5});
  CHECK(f.get("empty").bytes == 0);

  // And back: what we read, we write again, and python reads it unchanged.
  std::vector<TensorView> views;
  for (const auto& e : f.entries()) views.push_back({e.name, e.dtype, e.shape, e.data, e.bytes});
  const std::string again = dir.file("again.safetensors");
  xrun::write_safetensors(again, views, f.metadata());
  auto g = SafetensorsFile::open(again);
  CHECK(g.metadata() == f.metadata());
  for (const auto& e : f.entries()) {
    const auto& e2 = g.get(e.name);
    CHECK(e2.dtype == e.dtype);
    CHECK(e2.shape == e.shape);
    CHECK(std::memcmp(e2.data, e.data, e.bytes) == 0);
  }
}
