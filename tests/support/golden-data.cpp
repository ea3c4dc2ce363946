// Golden file loading and the comparison metrics (computed in double).
#include "support/golden-data.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "formats/safetensors.h"

namespace hearth::test {

namespace {
std::vector<int32_t> ids_of(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find_tensor(name);
  if (!t || t->dtype != DType::I64) throw std::runtime_error("golden: missing I64 tensor " + name);
  std::vector<int32_t> out(static_cast<size_t>(t->numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t v;
    std::memcpy(&v, static_cast<const uint8_t*>(t->data) + 8 * i, 8);
    out[i] = int32_t(v);
  }
  return out;
}

std::vector<double> log_softmax(const float* x, int64_t n) {
  double mx = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = double(x[i]) - lse;
  return out;
}
}  // namespace

Golden load_golden(const std::string& dir) {
  auto file = SafetensorsFile::open(dir + "/golden.safetensors");
  if (!file.is_ok()) throw std::runtime_error(file.message());
  Golden g;
  g.input_ids = ids_of(*file, "input_ids");
  g.gen_prompt = ids_of(*file, "gen_prompt");
  g.gen_ids = ids_of(*file, "gen_ids");
  const TensorView* l = file->find_tensor("logits");
  if (!l || l->dtype != DType::F32 || l->shape.size() != 2)
    throw std::runtime_error("golden: bad logits tensor");
  g.n_vocab = l->shape[1];
  g.logits.resize(static_cast<size_t>(l->numel()));
  std::memcpy(g.logits.data(), l->data, g.logits.size() * 4);
  return g;
}

double max_row_relative_error(const std::vector<float>& a, const std::vector<float>& ref,
                              int64_t n) {
  if (a.size() != ref.size()) return INFINITY;
  double worst = 0;
  for (size_t r = 0; r < ref.size() / size_t(n); ++r) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = double(a[r * n + i]) - ref[r * n + i];
      num += d * d;
      den += double(ref[r * n + i]) * ref[r * n + i];
    }
    const double rel = std::sqrt(num / den);
    if (!(rel <= worst)) worst = rel;  // NaN propagates as failure
  }
  return worst;
}

double mean_kl_divergence(const std::vector<float>& a, const std::vector<float>& ref, int64_t n) {
  if (a.size() != ref.size()) return INFINITY;
  const size_t rows = ref.size() / size_t(n);
  double total = 0;
  for (size_t r = 0; r < rows; ++r) {
    auto lp = log_softmax(ref.data() + r * n, n);
    auto lq = log_softmax(a.data() + r * n, n);
    double kl = 0;
    for (int64_t i = 0; i < n; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
    total += kl;
  }
  return total / double(rows);
}

double top1_agreement(const std::vector<float>& a, const std::vector<float>& ref, int64_t n) {
  const size_t rows = ref.size() / size_t(n);
  size_t agree = 0;
  for (size_t r = 0; r < rows; ++r) {
    auto am = std::max_element(a.begin() + long(r * n), a.begin() + long((r + 1) * n));
    auto rm = std::max_element(ref.begin() + long(r * n), ref.begin() + long((r + 1) * n));
    agree += (am - a.begin()) - long(r * n) == (rm - ref.begin()) - long(r * n);
  }
  return double(agree) / double(rows);
}

}  // namespace hearth::test
