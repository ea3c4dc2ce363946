// A tiny random Llama-shaped checkpoint written as a Hugging Face directory (config.json + one
// f32 model.safetensors), and a plain float64 forward pass over the same weights: the
// independent reference for behaviours no golden covers (Mistral's sliding window) and the
// raw material of bad-input cases. Header-only; deterministic weights.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace hearth::test {

struct TinyModel {
  int64_t vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, head_dim = 8, ff = 48;
  int64_t window = 0;  // > 0: Mistral's sliding_window
  std::string model_type = "mistral";
  double theta = 10000, eps = 1e-5;
  std::map<std::string, std::vector<float>> w;  // HF name -> values
  std::map<std::string, std::vector<int64_t>> shape;

  void add(const std::string& name, std::vector<int64_t> s, std::mt19937& rng, float scale,
           float offset = 0) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    std::normal_distribution<float> d(0.0f, scale);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = offset + d(rng);
    w[name] = std::move(v);
    shape[name] = std::move(s);
  }
  void make(uint32_t seed = 7) {
    std::mt19937 rng(seed);
    const int64_t qd = heads * head_dim, kvd = kv_heads * head_dim;
    add("model.embed_tokens.weight", {vocab, hidden}, rng, 1.0f);
    add("lm_head.weight", {vocab, hidden}, rng, 0.3f);
    add("model.norm.weight", {hidden}, rng, 0.1f, 1.0f);
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      add(p + "input_layernorm.weight", {hidden}, rng, 0.1f, 1.0f);
      add(p + "post_attention_layernorm.weight", {hidden}, rng, 0.1f, 1.0f);
      // Large Q/K weights: peaky attention, so a wrong window changes the logits plainly.
      add(p + "self_attn.q_proj.weight", {qd, hidden}, rng, 0.6f);
      add(p + "self_attn.k_proj.weight", {kvd, hidden}, rng, 0.6f);
      add(p + "self_attn.v_proj.weight", {kvd, hidden}, rng, 0.3f);
      add(p + "self_attn.o_proj.weight", {hidden, qd}, rng, 0.3f);
      add(p + "mlp.gate_proj.weight", {ff, hidden}, rng, 0.3f);
      add(p + "mlp.up_proj.weight", {ff, hidden}, rng, 0.3f);
      add(p + "mlp.down_proj.weight", {hidden, ff}, rng, 0.3f);
    }
  }
  std::string config(const std::string& extra = "") const {
    std::string c = "{\"model_type\": \"" + model_type + "\"";
    c += ", \"vocab_size\": " + std::to_string(vocab) +
         ", \"hidden_size\": " + std::to_string(hidden) +
         ", \"intermediate_size\": " + std::to_string(ff) +
         ", \"num_hidden_layers\": " + std::to_string(layers) +
         ", \"num_attention_heads\": " + std::to_string(heads) +
         ", \"num_key_value_heads\": " + std::to_string(kv_heads) +
         ", \"max_position_embeddings\": 32768, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0" +
         ", \"tie_word_embeddings\": false, \"hidden_act\": \"silu\"";
    c += window > 0 ? ", \"sliding_window\": " + std::to_string(window)
                    : ", \"sliding_window\": null";
    return c + extra + "}";
  }
  // Writes dir/config.json (with `extra` fields appended) and dir/model.safetensors.
  void write(const std::string& dir, const std::string& extra = "") const {
    std::ofstream(dir + "/config.json") << config(extra);
    std::string header = "{";
    uint64_t off = 0;
    for (const auto& [name, v] : w) {
      if (header.size() > 1) header += ",";
      std::string s;
      for (int64_t d : shape.at(name)) s += (s.empty() ? "" : ",") + std::to_string(d);
      header += "\"" + name + "\":{\"dtype\":\"F32\",\"shape\":[" + s + "],\"data_offsets\":[" +
                std::to_string(off) + "," + std::to_string(off + v.size() * 4) + "]}";
      off += v.size() * 4;
    }
    header += "}";
    std::ofstream f(dir + "/model.safetensors", std::ios::binary);
    const uint64_t n = header.size();
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << header;
    for (const auto& [name, v] : w)
      f.write(reinterpret_cast<const char*>(v.data()), long(v.size() * 4));
  }

  // Float64 logits [T, vocab] for tokens at positions 0..T-1, straight from the definitions
  // (transformers' Mistral: a query at p sees keys p - window < k <= p; window 0 = all).
  std::vector<double> reference_logits(const std::vector<int32_t>& ids, int64_t attn_window) const {
    const int64_t T = int64_t(ids.size()), E = hidden, QD = heads * head_dim;
    const int64_t KVD = kv_heads * head_dim, half = head_dim / 2;
    auto W = [&](const std::string& n) { return w.at(n).data(); };
    auto matvec = [](const float* m, const std::vector<double>& x, int64_t rows) {
      std::vector<double> y(static_cast<size_t>(rows), 0.0);
      const int64_t cols = int64_t(x.size());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) y[size_t(r)] += double(m[r * cols + c]) * x[size_t(c)];
      return y;
    };
    auto norm = [&](const std::vector<double>& x, const float* g) {
      double ss = 0;
      for (double v : x) ss += v * v;
      const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
      std::vector<double> y(x.size());
      for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * g[i];
      return y;
    };
    auto rope = [&](std::vector<double>& v, int64_t n_heads, int64_t pos) {
      for (int64_t h = 0; h < n_heads; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double f = 1.0 / std::pow(theta, double(2 * i) / double(head_dim));
          const double c = std::cos(pos * f), s = std::sin(pos * f);
          double& a = v[size_t(h * head_dim + i)];
          double& b = v[size_t(h * head_dim + i + half)];
          const double a0 = a, b0 = b;
          a = a0 * c - b0 * s;
          b = a0 * s + b0 * c;
        }
    };
    std::vector<std::vector<double>> x(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t)
      x[size_t(t)].assign(W("model.embed_tokens.weight") + ids[size_t(t)] * E,
                          W("model.embed_tokens.weight") + (ids[size_t(t)] + 1) * E);
    for (int64_t l = 0; l < layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      std::vector<std::vector<double>> q(static_cast<size_t>(T)), k(q.size()), v(q.size());
      for (int64_t t = 0; t < T; ++t) {
        const auto xn = norm(x[size_t(t)], W(p + "input_layernorm.weight"));
        q[size_t(t)] = matvec(W(p + "self_attn.q_proj.weight"), xn, QD);
        k[size_t(t)] = matvec(W(p + "self_attn.k_proj.weight"), xn, KVD);
        v[size_t(t)] = matvec(W(p + "self_attn.v_proj.weight"), xn, KVD);
        rope(q[size_t(t)], heads, t);
        rope(k[size_t(t)], kv_heads, t);
      }
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> att(static_cast<size_t>(QD), 0.0);
        const int64_t first = attn_window > 0 ? std::max<int64_t>(0, t - attn_window + 1) : 0;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t kh = h / (heads / kv_heads);
          std::vector<double> s;
          double mx = -1e300;
          for (int64_t j = first; j <= t; ++j) {
            double d = 0;
            for (int64_t i = 0; i < head_dim; ++i)
              d += q[size_t(t)][size_t(h * head_dim + i)] * k[size_t(j)][size_t(kh * head_dim + i)];
            s.push_back(d / std::sqrt(double(head_dim)));
            mx = std::max(mx, s.back());
          }
          double z = 0;
          for (double& e : s) z += (e = std::exp(e - mx));
          for (int64_t j = first; j <= t; ++j)
            for (int64_t i = 0; i < head_dim; ++i)
              att[size_t(h * head_dim + i)] +=
                  s[size_t(j - first)] / z * v[size_t(j)][size_t(kh * head_dim + i)];
        }
        const auto o = matvec(W(p + "self_attn.o_proj.weight"), att, E);
        for (int64_t i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += o[size_t(i)];
        const auto xn = norm(x[size_t(t)], W(p + "post_attention_layernorm.weight"));
        const auto g = matvec(W(p + "mlp.gate_proj.weight"), xn, ff);
        const auto u = matvec(W(p + "mlp.up_proj.weight"), xn, ff);
        std::vector<double> a(static_cast<size_t>(ff));
        for (int64_t i = 0; i < ff; ++i)
          a[size_t(i)] = g[size_t(i)] / (1.0 + std::exp(-g[size_t(i)])) * u[size_t(i)];
        const auto d = matvec(W(p + "mlp.down_proj.weight"), a, E);
        for (int64_t i = 0; i < E; ++i) x[size_t(t)][size_t(i)] += d[size_t(i)];
      }
    }
    std::vector<double> logits;
    for (int64_t t = 0; t < T; ++t) {
      const auto y = matvec(W("lm_head.weight"), norm(x[size_t(t)], W("model.norm.weight")), vocab);
      logits.insert(logits.end(), y.begin(), y.end());
    }
    return logits;
  }
};

// max over rows of ||a - ref|| / ||ref||
inline double max_row_error(const std::vector<float>& a, const std::vector<double>& ref,
                            int64_t n) {
  double worst = 0;
  for (size_t r = 0; r * size_t(n) < ref.size(); ++r) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = double(a[r * size_t(n) + size_t(i)]) - ref[r * size_t(n) + size_t(i)];
      num += d * d;
      den += ref[r * size_t(n) + size_t(i)] * ref[r * size_t(n) + size_t(i)];
    }
    const double rel = std::sqrt(num / den);
    if (!(rel <= worst)) worst = rel;
  }
  return worst;
}

}  // namespace hearth::test
