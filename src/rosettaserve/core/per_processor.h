/* BUILT_PER_PROCESSOR: a hot function built twice where gcc can pick one at load time (glibc's
   ifunc): for x86-64-v3 processors (2013 on: BMI2's shifts by any register, LZCNT, ...) and for
   any x86-64. Elsewhere (clang, as in the fuzz build; other processors) it is built once.
   Included by json_floats.c and json_numbers.c (their figures are at the function). */
#ifndef ROSETTASERVE_PER_PROCESSOR_H
#define ROSETTASERVE_PER_PROCESSOR_H
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && \
    defined(__GLIBC__)
#define BUILT_PER_PROCESSOR __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define BUILT_PER_PROCESSOR
#endif
#endif
