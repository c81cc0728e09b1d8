#include <benchmark/benchmark.h>
#include <string>
static void BM_copy(benchmark::State& state) {
  std::string src(state.range(0), 'x');
  for (auto _ : state) { std::string dst = src; benchmark::DoNotOptimize(dst); }
}
BENCHMARK(BM_copy)->Arg(64)->Arg(4096);
static void BM_sleepless(benchmark::State& state) {
  for (auto _ : state) { benchmark::DoNotOptimize(state.iterations()); }
}
BENCHMARK(BM_sleepless)->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
