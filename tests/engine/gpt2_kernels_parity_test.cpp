// tests/engine/gpt2_kernels_parity_test.cpp: xrun's GPT-2 CPU kernels
// (embedding, layer norm, causal attention, GELU) put together by hand into
// the small GPT-2 of tests/engine/fixtures/gpt2_parity.json, with plain
// matrix products (double sums) for the Conv1D layers and the tied output
// layer, and the loss and every parameter gradient compared with
// transformers' GPT2LMHeadModel in float64: each no further from it than a
// few times PyTorch fp32's own distance (the fixture's yardstick). Before
// the model exists, this pins what the kernels mean against the reference
// (Conv1D's [in, out] layout, the q/k/v split, gelu_new, eps 1e-5, the tied
// embedding's two gradients); the model's parity test will replace it.
#include "catch2_compat.h"

#include <cmath>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/gpt2_pointwise.h"
#include "engine/cpu/layer_norm.h"
#include "torch_fixtures.h"

using namespace xrun;

namespace {

using Vec = std::vector<float>;

// y[n, o] = x[n, i] w[i, o] (+ b[o]): Conv1D's layout, sums in double.
Vec matmul(const Vec& x, const Vec& w, const Vec* b, int64_t n, int64_t i, int64_t o) {
  Vec y(n * o);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < o; ++c) {
      double s = b ? (*b)[c] : 0.0;
      for (int64_t k = 0; k < i; ++k) s += static_cast<double>(x[r * i + k]) * w[k * o + c];
      y[r * o + c] = static_cast<float>(s);
    }
  return y;
}

// The backward pass of y = x w + b: dx = dy w^T, dw = x^T dy, db = sum dy.
void matmul_backward(const Vec& x, const Vec& w, const Vec& dy, int64_t n, int64_t i, int64_t o,
                     Vec& dx, Vec& dw, Vec* db) {
  dx.assign(n * i, 0.0f);
  dw.assign(i * o, 0.0f);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t k = 0; k < i; ++k) {
      double s = 0;
      for (int64_t c = 0; c < o; ++c) s += static_cast<double>(dy[r * o + c]) * w[k * o + c];
      dx[r * i + k] = static_cast<float>(s);
    }
  for (int64_t k = 0; k < i; ++k)
    for (int64_t c = 0; c < o; ++c) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += static_cast<double>(x[r * i + k]) * dy[r * o + c];
      dw[k * o + c] = static_cast<float>(s);
    }
  if (db) {
    db->assign(o, 0.0f);
    for (int64_t c = 0; c < o; ++c) {
      double s = 0;
      for (int64_t r = 0; r < n; ++r) s += dy[r * o + c];
      (*db)[c] = static_cast<float>(s);
    }
  }
}

// [rows, cols] -> [cols, rows].
Vec transpose(const Vec& a, int64_t rows, int64_t cols) {
  Vec t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

void add_into(Vec& dst, const Vec& src) {
  for (size_t k = 0; k < dst.size(); ++k) dst[k] += src[k];
}

// One layer norm: forward keeps its input for the backward pass.
struct Norm {
  Vec in;
  Vec forward(const Vec& x, const Vec& g, const Vec& b, int64_t n, int64_t c) {
    in = x;
    Vec y(x.size()), mean(n), rstd(n);
    cpu::layer_norm_forward(x.data(), g.data(), b.data(), n, c, cpu::kLayerNormEps, y.data(),
                            mean.data(), rstd.data());
    return y;
  }
  Vec backward(const Vec& dy, const Vec& g, int64_t n, int64_t c, Vec& dg, Vec& db) const {
    Vec dx(in.size());
    dg.assign(c, 0.0f);
    db.assign(c, 0.0f);
    cpu::layer_norm_backward(dy.data(), in.data(), g.data(), n, c, dx.data(), dg.data(), db.data());
    return dx;
  }
};

struct Block {
  Norm ln1, ln2;
  Vec a, qkv, p, y, m, h, g;
};

}  // namespace

TEST_CASE("gpt2 kernels: a small GPT-2 put together by hand meets transformers' float64 step",
          "[gpt2][parity]") {
  const nlohmann::json f = testing::load_fixture("gpt2_parity.json");
  const int64_t L = f["config"]["n_layer"], H = f["config"]["n_head"], C = f["config"]["n_embd"];
  const int64_t V = f["config"]["vocab_size"], P = f["config"]["n_positions"];
  const int64_t B = f["batch"], T = f["tokens"], N = B * T;

  std::map<std::string, Vec> w;  // the parameters, from the fixtures' closed form
  for (const auto& e : f["weights"])
    w[e["name"]] = testing::gpt2_values(e["name"], e["shape"].get<std::vector<int64_t>>());
  const auto W = [&](int64_t l, const std::string& rest) -> const Vec& {
    return w.at("transformer.h." + std::to_string(l) + "." + rest);
  };
  const std::vector<int32_t> rows = testing::gpt2_tokens(B, T, V);
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      tokens[b * T + t] = rows[b * (T + 1) + t];
      targets[b * T + t] = rows[b * (T + 1) + t + 1];
    }

  // ---- forward
  Vec x(N * C);
  cpu::embedding_forward(tokens.data(), w.at("transformer.wte.weight").data(),
                         w.at("transformer.wpe.weight").data(), B, T, C, x.data());
  std::vector<Block> blocks(L);
  const cpu::AttentionShape shape{B, T, H, C};
  for (int64_t l = 0; l < L; ++l) {
    Block& k = blocks[l];
    k.a = k.ln1.forward(x, W(l, "ln_1.weight"), W(l, "ln_1.bias"), N, C);
    k.qkv = matmul(k.a, W(l, "attn.c_attn.weight"), &W(l, "attn.c_attn.bias"), N, C, 3 * C);
    k.y.assign(N * C, 0.0f);
    k.p.assign(B * H * T * T, 0.0f);
    cpu::causal_attention_forward(shape, k.qkv.data(), k.y.data(), k.p.data());
    add_into(x, matmul(k.y, W(l, "attn.c_proj.weight"), &W(l, "attn.c_proj.bias"), N, C, C));
    k.m = k.ln2.forward(x, W(l, "ln_2.weight"), W(l, "ln_2.bias"), N, C);
    k.h = matmul(k.m, W(l, "mlp.c_fc.weight"), &W(l, "mlp.c_fc.bias"), N, C, 4 * C);
    k.g.assign(k.h.size(), 0.0f);
    cpu::gelu_tanh_forward(k.h.data(), static_cast<int64_t>(k.h.size()), k.g.data());
    add_into(x, matmul(k.g, W(l, "mlp.c_proj.weight"), &W(l, "mlp.c_proj.bias"), N, 4 * C, C));
  }
  Norm lnf;
  const Vec xf = lnf.forward(x, w.at("transformer.ln_f.weight"), w.at("transformer.ln_f.bias"), N, C);
  // The tied output layer: logits = xf wte^T, as a product with wte^T [C, V].
  const Vec wte_t = transpose(w.at("transformer.wte.weight"), V, C);
  const Vec logits = matmul(xf, wte_t, nullptr, N, C, V);
  Vec dlogits(N * V);
  double loss = 0;
  for (int64_t r = 0; r < N; ++r) {
    double mx = logits[r * V], sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, logits[r * V + v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(logits[r * V + v] - mx);
    const double lse = mx + std::log(sum);
    loss += (lse - logits[r * V + targets[r]]) / N;
    for (int64_t v = 0; v < V; ++v)
      dlogits[r * V + v] =
          static_cast<float>((std::exp(logits[r * V + v] - lse) - (v == targets[r])) / N);
  }

  // ---- backward
  std::map<std::string, Vec> grad;
  Vec dxf, dwte_t;
  matmul_backward(xf, wte_t, dlogits, N, C, V, dxf, dwte_t, nullptr);
  Vec dwte = transpose(dwte_t, C, V);  // the output layer's part; the embedding adds its own
  Vec dx = lnf.backward(dxf, w.at("transformer.ln_f.weight"), N, C,
                        grad["transformer.ln_f.weight"], grad["transformer.ln_f.bias"]);
  for (int64_t l = L - 1; l >= 0; --l) {
    const Block& k = blocks[l];
    const std::string at = "transformer.h." + std::to_string(l) + ".";
    Vec dg, dh(k.h.size()), dm, da, dy, dqkv(k.qkv.size());
    matmul_backward(k.g, W(l, "mlp.c_proj.weight"), dx, N, 4 * C, C, dg,
                    grad[at + "mlp.c_proj.weight"], &grad[at + "mlp.c_proj.bias"]);
    cpu::gelu_tanh_backward(k.h.data(), dg.data(), static_cast<int64_t>(dh.size()), dh.data());
    matmul_backward(k.m, W(l, "mlp.c_fc.weight"), dh, N, C, 4 * C, dm,
                    grad[at + "mlp.c_fc.weight"], &grad[at + "mlp.c_fc.bias"]);
    add_into(dx, k.ln2.backward(dm, W(l, "ln_2.weight"), N, C, grad[at + "ln_2.weight"],
                                grad[at + "ln_2.bias"]));
    matmul_backward(k.y, W(l, "attn.c_proj.weight"), dx, N, C, C, dy,
                    grad[at + "attn.c_proj.weight"], &grad[at + "attn.c_proj.bias"]);
    cpu::causal_attention_backward(shape, k.qkv.data(), k.p.data(), dy.data(), dqkv.data());
    matmul_backward(k.a, W(l, "attn.c_attn.weight"), dqkv, N, C, 3 * C, da,
                    grad[at + "attn.c_attn.weight"], &grad[at + "attn.c_attn.bias"]);
    add_into(dx, k.ln1.backward(da, W(l, "ln_1.weight"), N, C, grad[at + "ln_1.weight"],
                                grad[at + "ln_1.bias"]));
  }
  Vec dwpe(P * C, 0.0f);  // only the first T positions are used
  cpu::embedding_backward(tokens.data(), dx.data(), B, T, C, dwte.data(), dwpe.data());
  grad["transformer.wte.weight"] = dwte;
  grad["transformer.wpe.weight"] = dwpe;

  // ---- against transformers' float64 step
  const std::string blob_path =
      std::string(XRUN_SOURCE_DIR) + "/tests/engine/fixtures/gpt2_parity.f64";
  std::ifstream blob(blob_path, std::ios::binary);
  REQUIRE(blob);
  int compared = 0;
  for (const auto& t : f["tensors"]) {
    const std::string name = t["name"];
    int64_t n = 1;
    for (const auto& d : t["shape"]) n *= d.get<int64_t>();
    std::vector<double> ref(n);
    blob.read(reinterpret_cast<char*>(ref.data()), static_cast<std::streamsize>(n * sizeof(double)));
    REQUIRE(blob);
    const Vec* ours = nullptr;
    Vec scalar;
    if (name == "loss") {
      scalar = {static_cast<float>(loss)};
      ours = &scalar;
    } else if (name == "logits") {
      ours = &logits;
    } else if (name.rfind("grad.", 0) == 0) {
      ours = &grad.at(name.substr(5));
    } else {
      continue;  // "step.*": the optimizer's, for the model's test
    }
    INFO(name);
    REQUIRE(static_cast<int64_t>(ours->size()) == n);
    double err = 0;
    for (int64_t i = 0; i < n; ++i) err = std::max(err, std::abs((*ours)[i] - ref[i]));
    const double yardstick = t["fp32_max_abs"].get<double>();
    INFO("max error " << err << ", PyTorch fp32's " << yardstick);
    // Twice PyTorch fp32's distance (seen: below it on every tensor), and
    // never less than a float rounding of the tensor's largest value
    // (PyTorch may be lucky on a small tensor).
    double largest = 0;
    for (const double r : ref) largest = std::max(largest, std::abs(r));
    CHECK(err <= 2 * yardstick + 1.2e-7 * largest);
    ++compared;
  }
  CHECK(compared == 2 + static_cast<int>(f["parameters"].size()));
}
