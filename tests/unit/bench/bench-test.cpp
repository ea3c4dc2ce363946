// apps/bench: --synthetic parsing, a synthetic GGUF of a small custom shape that the normal
// loader runs, mean/sd, the three report formats, and the machine probes returning sane values.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/mapped-file.h"
#include "bench-report.h"
#include "machine-probe.h"
#include "model/model.h"
#include "support/test-data.h"
#include "synthetic-model.h"

namespace hearth::bench {
namespace {

TEST(Synthetic, ParsesShapesAndTypes) {
  auto s = parse_synthetic("llama2-7b:q4_0");
  ASSERT_TRUE(s.is_ok()) << s.message();
  EXPECT_EQ(s->shape.n_embd, 4096);
  EXPECT_EQ(s->shape.n_ff, 11008);
  EXPECT_EQ(s->type, DType::Q4_0);
  auto t = parse_synthetic("TinyLlama-1B:Q6_K");
  ASSERT_TRUE(t.is_ok()) << t.message();
  EXPECT_EQ(t->shape.n_head_kv, 4);
  EXPECT_EQ(t->type, DType::Q6_K);
  EXPECT_EQ(parse_synthetic("llama3-8b:bf16")->shape.n_vocab, 128256);
  for (const char* bad : {"llama2-7b", "llama2-7b:", "gpt2:q4_0", "llama2-7b:q5_1", ":q4_0", ""}) {
    auto r = parse_synthetic(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_NE(r.message().find("--synthetic"), std::string::npos) << r.message();
    }
  }
}

// A small shape through the real writer and loader: every type must load and decode finitely.
TEST(Synthetic, WritesAModelTheLoaderRuns) {
  const std::string dir = test::temp_dir();
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::F16, DType::BF16}) {
    SyntheticSpec spec{{"test-small", 256, 512, 2, 4, 2, 300, 128, 10000.0}, t};
    const std::string path = dir + "/small-" + dtype_name(t) + ".gguf";
    auto bytes = write_synthetic_gguf(spec, path);
    ASSERT_TRUE(bytes.is_ok()) << bytes.message();
    EXPECT_EQ(*bytes, std::filesystem::file_size(path));
    LoadOptions opt;
    opt.n_threads = 2;
    opt.use_weight_cache = false;
    auto m = load_model(path, opt);
    ASSERT_TRUE(m.is_ok()) << dtype_name(t) << ": " << m.message();
    EXPECT_EQ((*m)->hparams().n_vocab, 300);
    EXPECT_EQ((*m)->hparams().n_head_kv, 2);
    auto kv = (*m)->new_kv_cache(8);
    ASSERT_TRUE(kv.is_ok());
    ForwardScratch scratch;
    std::vector<float> logits;
    ASSERT_TRUE((*m)->prefill(*kv, {1, 2, 3}, scratch, &logits).is_ok());
    ASSERT_TRUE((*m)->decode(*kv, 4, scratch, &logits).is_ok());
    ASSERT_EQ(logits.size(), 300u);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
  }
}

TEST(Report, StatsAndFormats) {
  const Stat s = Stat::of({1.0, 2.0, 3.0});
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.sd, 1.0);
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(Stat::of({5.0}).sd, 0.0);

  BenchReport r;
  r.model = "m.gguf";
  r.model_type = "Q4_0";
  r.threads = 2;
  r.kernel_isa = "avx512";
  DeviceReport cpu;
  cpu.backend = "cpu";
  cpu.name = "test cpu";
  cpu.bandwidth_gbs = 50;
  r.devices.push_back(cpu);
  r.figures.push_back({"tg128", "tok/s", Stat::of({40, 44}), 50.0, "bandwidth", std::nullopt});
  r.figures.push_back({"load warm", "ms", Stat::of({12}), std::nullopt, "", std::nullopt});
  EXPECT_DOUBLE_EQ(*r.figures[0].pct_of_roofline(), 84.0);
  EXPECT_FALSE(r.figures[1].pct_of_roofline());

  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| tg128 | 42.00 ± 2.83 tok/s | 50.00 tok/s | 84% | bandwidth | n/a |"),
            std::string::npos)
      << md;
  const auto j = nlohmann::json::parse(render_json(r));
  EXPECT_EQ(j["figures"][0]["test"], "tg128");
  EXPECT_DOUBLE_EQ(j["figures"][0]["pct_of_roofline"].get<double>(), 84.0);
  EXPECT_TRUE(j["figures"][0]["joules_per_token"].is_null());
  EXPECT_EQ(j["devices"][0]["bandwidth_gbs"], 50);
  const std::string csv = render_csv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3);  // header + 2 figures
  EXPECT_NE(csv.find("m.gguf,Q4_0,2,avx512,tg128,tok/s,42.0000,"), std::string::npos) << csv;
}

TEST(Probes, ReturnSaneValues) {
  EXPECT_GT(measure_read_bandwidth(2, 64u << 20, 1), 0.1);
  const PeakCompute p = measure_peak_compute(1);
  EXPECT_GT(p.f32_gflops, 0.1);
  EXPECT_FALSE(p.isa.empty());
  EXPECT_GT(current_rss_bytes(), 0u);
  // Read the current value first: RSS may grow between the two reads, the peak never shrinks.
  const uint64_t current = current_rss_bytes();
  EXPECT_GE(peak_rss_bytes(), current);
  const EnergyReading e = read_energy();
  if (e.joules) {
    EXPECT_GE(*e.joules, 0.0);
  }
  EXPECT_FALSE(energy_delta_j(EnergyReading{}, e).has_value());
  const std::string f = test::temp_dir() + "/drop-me";
  std::ofstream(f) << "data";
  EXPECT_EQ(drop_file_cache(f, /*allow_drop_caches=*/false), "fadvise");
  EXPECT_EQ(drop_file_cache(f + ".missing", false), "none");
  // Pages mapped by a live process stay resident: mincore sees it, and without the system-wide
  // drop the file is reported as not dropped rather than as dropped.
  {
    auto mapped = MappedFile::open(f);
    ASSERT_TRUE(mapped.is_ok()) << mapped.message();
    volatile uint8_t touch = mapped->data()[0];
    (void)touch;
    EXPECT_EQ(drop_file_cache(f, false), "none");
  }
  EXPECT_EQ(drop_file_cache(f, false), "fadvise");
}

}  // namespace
}  // namespace hearth::bench
