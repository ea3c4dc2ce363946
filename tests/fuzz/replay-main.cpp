// A stand-in for libFuzzer's main in builds without it (g++): replays every seed file, then a
// fixed number of deterministic mutations of them, through LLVMFuzzerTestOneInput.
// Usage: <target> SEED_DIR [MUTATIONS]. More mutation kinds: add a case to mutate().
#include <dirent.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

struct Rng {  // xorshift64*: deterministic across platforms, so failures reproduce
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545F4914F6CDD1Dull;
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};

// Runs one input from an exactly-sized heap buffer so sanitizers see reads past its end.
void run(const std::vector<uint8_t>& in) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[in.size() ? in.size() : 1]);
  if (!in.empty()) std::memcpy(buf.get(), in.data(), in.size());
  LLVMFuzzerTestOneInput(buf.get(), in.size());
}

void mutate(std::vector<uint8_t>& b, Rng& rng) {
  // Values that make length, count and offset fields lie.
  static const uint64_t kInteresting[] = {
      0,          1,          2,          3,     7,          31,
      32,         33,         255,        256,   0x7fffffff, 0xffffffff,
      1ull << 32, 1ull << 40, 1ull << 62, ~0ull, ~0ull - 31, 0x7fffffffffffffffull};
  if (b.empty()) {
    b.push_back(uint8_t(rng.next()));
    return;
  }
  switch (rng.below(7)) {
    case 0:  // flip a bit
      b[rng.below(b.size())] ^= uint8_t(1u << rng.below(8));
      break;
    case 1:  // random byte
      b[rng.below(b.size())] = uint8_t(rng.next());
      break;
    case 2: {  // overwrite an aligned-ish u32 or u64 with an interesting value
      const uint64_t v = kInteresting[rng.below(sizeof kInteresting / sizeof kInteresting[0])];
      const size_t width = rng.below(2) ? 8 : 4;
      if (b.size() < width) break;
      const size_t pos = rng.below(b.size() - width + 1);
      std::memcpy(&b[pos], &v, width);
      break;
    }
    case 3:  // truncate
      b.resize(rng.below(b.size()));
      break;
    case 4: {  // duplicate a chunk
      const size_t pos = rng.below(b.size());
      const size_t len = std::min<size_t>(rng.below(64) + 1, b.size() - pos);
      std::vector<uint8_t> chunk(b.begin() + long(pos), b.begin() + long(pos + len));
      b.insert(b.begin() + long(rng.below(b.size())), chunk.begin(), chunk.end());
      break;
    }
    case 5: {  // erase a chunk
      const size_t pos = rng.below(b.size());
      const size_t len = std::min<size_t>(rng.below(16) + 1, b.size() - pos);
      b.erase(b.begin() + long(pos), b.begin() + long(pos + len));
      break;
    }
    default: {  // printable JSON-ish noise (safetensors headers are text)
      static const char kChars[] = "{}[]\":,0123456789-eE.tfn ";
      b[rng.below(b.size())] = uint8_t(kChars[rng.below(sizeof kChars - 1)]);
      break;
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SEED_DIR [MUTATIONS]\n", argv[0]);
    return 2;
  }
  const long mutations = argc > 2 ? std::atol(argv[2]) : 5000;
  std::vector<std::string> names;
  if (DIR* d = opendir(argv[1])) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());  // readdir order varies; runs must not
  std::vector<std::vector<uint8_t>> seeds;
  for (const std::string& n : names) {
    std::ifstream in(std::string(argv[1]) + "/" + n, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string s = ss.str();
    seeds.emplace_back(s.begin(), s.end());
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "%s: no seed files in %s\n", argv[0], argv[1]);
    return 1;
  }
  for (const auto& s : seeds) run(s);
  Rng rng{0x9E3779B97F4A7C15ull};
  for (long i = 0; i < mutations; ++i) {
    std::vector<uint8_t> b = seeds[rng.below(seeds.size())];
    const uint64_t rounds = 1 + rng.below(4);
    for (uint64_t k = 0; k < rounds; ++k) mutate(b, rng);
    run(b);
  }
  std::printf("replayed %zu seeds and %ld mutations\n", seeds.size(), mutations);
  return 0;
}
