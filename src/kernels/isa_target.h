// Included last by each unit compiled once per level (STRATA_ISA_SOURCES, isa.h): the
// functions defined after it are compiled for the unit's level, STRATA_ISA_V3 (x86-64-v3:
// AVX2, FMA, BMI1/2, F16C, LZCNT, MOVBE) or STRATA_ISA_V4 (v3 plus AVX-512 F/BW/CD/DQ/VL);
// with neither, for the build's baseline.
//
// Why a pragma after the headers rather than -march on the unit's command line: with -march,
// the inline functions and templates the headers define (std::vector's, strata::Buffer's,
// strata::Error's) would be compiled for the level too, and the linker keeps one copy of
// each for the whole program, possibly the one that needs the level, which a CPU without it
// would then run. Under the pragma, the headers' code stays baseline everywhere (and is
// inlined into the level's code, which a feature list, unlike arch=, allows). The list names
// features, not arch=, for that reason.
#if defined(STRATA_ISA_V4)
#pragma GCC target("sse4.2,popcnt,avx,avx2,fma,bmi,bmi2,f16c,lzcnt,movbe,avx512f,avx512bw,avx512cd,avx512dq,avx512vl")
#elif defined(STRATA_ISA_V3)
#pragma GCC target("sse4.2,popcnt,avx,avx2,fma,bmi,bmi2,f16c,lzcnt,movbe")
#endif
